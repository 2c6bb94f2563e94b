// A program in a section gpuprobe does not know.
#include "gpuprobe.h"

SEC("xdp")
int not_a_probe(void *ctx)
{
	return 0;
}
