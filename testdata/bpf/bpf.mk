# bpf.mk: builds every testdata/bpf/*.c and testdata/bpf/compat/*.c (the
# compatibility suite gpuprobe-gpucheck -compat runs) into *.o with clang,
# and bad/directrun.o (bpftime's kprobe/__directly_run, which
# scripts/gpu/examples.sh shows refused).
# Included by the top-level Makefile; usable alone too:
#   make -f testdata/bpf/bpf.mk bpf-objects
BPF_DIR     ?= testdata/bpf
# gpuprobe.h, the GPU programs' header, lives beside the ABI table it
# mirrors (jit/abi.go).
BPF_INCLUDE ?= jit/include
BPF_CLANG   ?= clang
BPF_CFLAGS  ?= -target bpf -O2 -g -Wall -Werror -mcpu=v3 -I $(BPF_INCLUDE)
BPF_SOURCES := $(wildcard $(BPF_DIR)/*.c) $(wildcard $(BPF_DIR)/compat/*.c)
BPF_OBJECTS := $(BPF_SOURCES:.c=.o) $(BPF_DIR)/bad/directrun.o

.PHONY: bpf-objects bpf-clean
bpf-objects: $(BPF_OBJECTS)

$(BPF_DIR)/%.o: $(BPF_DIR)/%.c $(BPF_INCLUDE)/gpuprobe.h
	$(BPF_CLANG) $(BPF_CFLAGS) -c $< -o $@

$(BPF_DIR)/compat/%.o: $(BPF_DIR)/compat/%.c $(BPF_INCLUDE)/gpuprobe.h
	$(BPF_CLANG) $(BPF_CFLAGS) -c $< -o $@

$(BPF_DIR)/bad/%.o: $(BPF_DIR)/bad/%.c $(BPF_INCLUDE)/gpuprobe.h
	$(BPF_CLANG) $(BPF_CFLAGS) -c $< -o $@

bpf-clean:
	rm -f $(BPF_OBJECTS)

# launchlate_ks.c includes launchlate.c.
$(BPF_DIR)/launchlate_ks.o: $(BPF_DIR)/launchlate.c
