/*
 * weak_api.c - an application that uses include/gpuprobe_shim.h through
 * weak references, as the header suggests: it runs with or without the
 * shim, and says which ("shim=0" or "shim=1 set=0 bad=-1").
 */
#define GPUPROBE_SHIM_WEAK
#include <stdio.h>

#include "gpuprobe_shim.h"

int main(void)
{
	if (!gpuprobe_set_span_context) {
		printf("shim=0\n");
		return 0;
	}
	const uint8_t tr[16] = {1}, sp[8] = {2}, zero[16] = {0};
	int set = gpuprobe_set_span_context(tr, sp, GPUPROBE_TRACE_FLAG_SAMPLED);
	int bad = gpuprobe_set_span_context(zero, sp, 0);
	gpuprobe_clear_span_context();
	printf("shim=1 set=%d bad=%d\n", set, bad);
	return 0;
}
