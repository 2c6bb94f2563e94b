# shim/shim.mk - builds bin/libgpuprobe.so, the in-application shim (C, no
# CUDA header or library needed), bin/libgpuprobe-selftime.so (the same,
# timing its own launch path), and bin/shim.test, the shim's Go test
# binary (carried to the GPU machine, which has gcc but no Go, to run the
# launch-overhead benchmark there). Include it from the top-level Makefile:
#
#	-include shim/shim.mk
#	build: bin/libgpuprobe.so
#
SHIM_CC ?= gcc
# -fno-omit-frame-pointer: a sampled launch's stack walk (stack.c) passes
# through the shim's own frames to the application's.
SHIM_CFLAGS ?= -O2 -fPIC -shared -Wall -Wextra -Werror -fvisibility=hidden -fno-omit-frame-pointer
# selftime.c is empty without GP_SELFTIME; left out of the production build
# so that even its symbol table is unchanged by it.
SHIM_SELFTIME_SRC := shim/src/selftime.c
SHIM_SRCS := $(filter-out $(SHIM_SELFTIME_SRC),$(wildcard shim/src/*.c))
SHIM_HDRS := $(wildcard shim/src/*.h) shm/include/gpuprobe_shm.h record/include/gpuprobe_record.h

bin/libgpuprobe.so: $(SHIM_SRCS) $(SHIM_HDRS)
	@mkdir -p bin
	$(SHIM_CC) $(SHIM_CFLAGS) -Ishim/src -Ishm/include -Irecord/include -o $@ $(SHIM_SRCS) -ldl -lpthread

# The self-timing build: its launch wrappers time their own instructions
# around the driver call (GP_SELFTIME, shim/src/selftime.c) and it prints one
# "gpuprobe selftime:" line at exit; scripts/gpu/launch-cost.sh adds it to
# its rounds when it exists. Not for production.
bin/libgpuprobe-selftime.so: $(SHIM_SRCS) $(SHIM_SELFTIME_SRC) $(SHIM_HDRS)
	@mkdir -p bin
	$(SHIM_CC) $(SHIM_CFLAGS) -DGP_SELFTIME=1 -Ishim/src -Ishm/include -Irecord/include -o $@ $(SHIM_SRCS) $(SHIM_SELFTIME_SRC) -ldl -lpthread

bin/shim.test: $(SHIM_SRCS) $(SHIM_SELFTIME_SRC) $(SHIM_HDRS) $(wildcard shim/*.go) $(wildcard shim/testdata/*.[ch])
	@mkdir -p bin
	$(GO) test -c -o $@ ./shim

.PHONY: shim shim-selftime shim-test shim-bench shim-patch
shim: bin/libgpuprobe.so ## build the in-application shim bin/libgpuprobe.so

# The SASS route's patch image (shim/patch/sass_phases.cu, nvcc
# --compile-as-tools-patch for sm_70..sm_90) is committed as
# shim/src/sass_image.h, so the shim builds with gcc alone;
# TestSASSImageCurrent fails when it is stale.
shim-patch: ## rebuild shim/src/sass_image.h from shim/patch/sass_phases.cu (needs nvcc)
	$(GO) run shim/patch/gen.go

shim-selftime: bin/libgpuprobe-selftime.so ## the shim that times its own launch path (prints ns/launch at exit)

shim-test: ## the shim's tests (mock driver, real agent socket)
	$(GO) test -count=1 ./shim

# SHIM_BENCH_BASELINE=/path/libgpuprobe.so: another build measured in the
# same rounds (before/after figures). BenchmarkSelftime: what the
# GP_SELFTIME build times of itself in the same configurations.
shim-bench: ## what a wrapped launch costs (mock driver), ns per launch: end to end, and timed inside the shim
	GPUPROBE_BENCH_BASELINE=$(SHIM_BENCH_BASELINE) $(GO) test -run '^$$' -bench 'LaunchOverhead|Selftime' -benchtime 10000000x -count 5 ./shim
