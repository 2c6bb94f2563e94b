# shim/shim.mk - builds bin/libgpuprobe.so, the in-application shim (C, no
# CUDA header or library needed), and bin/shim.test, the shim's Go test
# binary (carried to the GPU machine, which has gcc but no Go, to run the
# launch-overhead benchmark there). Include it from the top-level Makefile:
#
#	-include shim/shim.mk
#	build: bin/libgpuprobe.so
#
SHIM_CC ?= gcc
SHIM_CFLAGS ?= -O2 -fPIC -shared -Wall -Wextra -Werror -fvisibility=hidden
SHIM_SRCS := $(wildcard shim/src/*.c)
SHIM_HDRS := $(wildcard shim/src/*.h) shm/include/gpuprobe_shm.h record/include/gpuprobe_record.h

bin/libgpuprobe.so: $(SHIM_SRCS) $(SHIM_HDRS)
	@mkdir -p bin
	$(SHIM_CC) $(SHIM_CFLAGS) -Ishim/src -Ishm/include -Irecord/include -o $@ $(SHIM_SRCS) -ldl -lpthread

bin/shim.test: $(SHIM_SRCS) $(SHIM_HDRS) $(wildcard shim/*.go) shim/testdata/app.c shim/testdata/mock_libcuda.c
	@mkdir -p bin
	$(GO) test -c -o $@ ./shim

.PHONY: shim shim-test shim-bench
shim: bin/libgpuprobe.so ## build the in-application shim bin/libgpuprobe.so

shim-test: ## the shim's tests (mock driver, real agent socket)
	$(GO) test -count=1 ./shim

# SHIM_BENCH_BASELINE=/path/libgpuprobe.so: another build measured in the
# same rounds (before/after figures).
shim-bench: ## what a wrapped launch costs (mock driver), ns per launch
	GPUPROBE_BENCH_BASELINE=$(SHIM_BENCH_BASELINE) $(GO) test -run '^$$' -bench LaunchOverhead -benchtime 10000000x -count 5 ./shim
