/* host.h: what the test objects' host programs need beyond gpuprobe.h.
 * Registers of a uprobe's context (struct pt_regs) by architecture: the
 * tests compile with -D__TARGET_ARCH_x86 or -D__TARGET_ARCH_arm64. */
#ifndef USERPROG_HOST_H
#define USERPROG_HOST_H
#include "gpuprobe.h"

#define BPF_MAP_TYPE_RINGBUF 27

static long (*bpf_ringbuf_output)(void *ringbuf, void *data, __u64 size, __u64 flags) = (void *)130;

#if defined(__TARGET_ARCH_x86)
/* x86-64 pt_regs: di at 112, si at 104, ax at 80 */
#define PARM1(ctx) (((const __u64 *)(ctx))[14])
#define PARM2(ctx) (((const __u64 *)(ctx))[13])
#define RC(ctx) (((const __u64 *)(ctx))[10])
#elif defined(__TARGET_ARCH_arm64)
/* arm64 user_pt_regs: regs[0..30] */
#define PARM1(ctx) (((const __u64 *)(ctx))[0])
#define PARM2(ctx) (((const __u64 *)(ctx))[1])
#define RC(ctx) (((const __u64 *)(ctx))[0])
#else
#error "define __TARGET_ARCH_x86 or __TARGET_ARCH_arm64"
#endif
#endif
