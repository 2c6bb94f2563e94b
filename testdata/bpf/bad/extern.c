// A call to a function that is not defined in the object.
#include "gpuprobe.h"

extern u64 elsewhere(u64 x);

SEC("kprobe/_Z6kernelv")
int calls_extern(void *ctx)
{
	return elsewhere(bpf_get_globaltimer());
}
