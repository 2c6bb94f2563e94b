// directrun: bpftime's kprobe/__directly_run, a program bpftime launches as
// a kernel of its own. gpuprobe has no such mode and refuses it by name.
#include "gpuprobe.h"

SEC("kprobe/__directly_run")
int cuda__run(void *ctx)
{
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
