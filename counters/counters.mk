# counters/counters.mk - builds bin/gpuprobe-counters, the per-node PM
# sampler (C, no CUDA header or library needed: it loads libcuda and
# libcupti with dlopen). Included by the top-level Makefile.
COUNTERS_CC ?= gcc
COUNTERS_CFLAGS ?= -O2 -std=gnu11 -Wall -Wextra -Werror
COUNTERS_SRCS := $(wildcard counters/src/*.c)
COUNTERS_HDRS := $(wildcard counters/src/*.h)

bin/gpuprobe-counters: $(COUNTERS_SRCS) $(COUNTERS_HDRS)
	@mkdir -p bin
	$(COUNTERS_CC) $(COUNTERS_CFLAGS) -o $@ $(COUNTERS_SRCS) -ldl

.PHONY: counters
counters: bin/gpuprobe-counters ## build the per-node PM sampler bin/gpuprobe-counters
