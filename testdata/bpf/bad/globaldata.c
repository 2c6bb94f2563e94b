// A GPU program that reads global data (.rodata): not supported on the GPU.
#include "gpuprobe.h"

static volatile const u64 threshold = 42;

SEC("kprobe/_Z6kernelv")
int uses_rodata(void *ctx)
{
	return bpf_get_globaltimer() > threshold;
}
