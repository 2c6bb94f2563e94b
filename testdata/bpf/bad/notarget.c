// A kprobe section that names no kernel.
#include "gpuprobe.h"

SEC("kprobe/")
int no_target(void *ctx)
{
	return 0;
}
