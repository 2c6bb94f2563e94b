// A GPU program that hands ebpf_puts an 8-byte stack buffer with no NUL:
// the compiled copy reads up to the mailbox payload (168 bytes), so the
// 160 bytes of the kernel's local memory past the buffer would reach the
// collector's logs. It loads fine; the verifier must reject it at the call.
#include "gpuprobe.h"

SEC("kretprobe/_Z6kernelv")
int strleak(void *ctx)
{
	char tag[8];

	__builtin_memcpy(tag, "ABCDEFGH", sizeof(tag));
	ebpf_puts(tag);
	return 0;
}
