/* Minimal, self-contained declarations for the host probes' eBPF program:
 * fixed-width types, the few map types and helpers it uses (numbers from the
 * kernel's UAPI include/uapi/linux/bpf.h), BTF map-definition macros and the
 * struct pt_regs of x86-64 and arm64 (their UAPI ptrace.h layouts) with the
 * calling conventions' argument registers.
 * Nothing here depends on installed headers, so the generated object is the
 * same on every machine with the same clang. */
#ifndef GPUPROBE_HOSTPROBE_H
#define GPUPROBE_HOSTPROBE_H

#if !defined(__TARGET_ARCH_x86) && !defined(__TARGET_ARCH_arm64)
#error "host probes are built for x86-64 and arm64: bpf2go -target amd64,arm64"
#endif

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef int __s32;
typedef long long __s64;

#define SEC(name) __attribute__((section(name), used))
#define __always_inline inline __attribute__((always_inline))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

enum {
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_RINGBUF = 27,
};

#define BPF_ANY 0
#define BPF_RB_NO_WAKEUP 1
#define BPF_RB_FORCE_WAKEUP 2
#define BPF_RB_AVAIL_DATA 0

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value, __u64 flags) = (void *)2;
static long (*bpf_map_delete_elem)(void *map, const void *key) = (void *)3;
static __u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static __u64 (*bpf_get_current_pid_tgid)(void) = (void *)14;
static long (*bpf_probe_read_user)(void *dst, __u32 size, const void *unsafe_ptr) = (void *)112;
static long (*bpf_probe_read_user_str)(void *dst, __u32 size, const void *unsafe_ptr) = (void *)114;
static void *(*bpf_ringbuf_reserve)(void *ringbuf, __u64 size, __u64 flags) = (void *)131;
static void (*bpf_ringbuf_submit)(void *data, __u64 flags) = (void *)132;
static __u64 (*bpf_get_attach_cookie)(void *ctx) = (void *)174;
static __u64 (*bpf_ringbuf_query)(void *ringbuf, __u64 flags) = (void *)134;

#if defined(__TARGET_ARCH_x86)
/* The registers at a uprobe: the layout of the x86-64 UAPI struct pt_regs,
 * which is also the kernel's (the program context of a uprobe). */
struct pt_regs {
	unsigned long r15, r14, r13, r12, rbp, rbx, r11, r10, r9, r8;
	unsigned long rax, rcx, rdx, rsi, rdi, orig_rax, rip, cs, eflags, rsp, ss;
};
/* System V: arguments 1-6 in rdi, rsi, rdx, rcx, r8, r9; at a function's
 * first instruction rsp points at the return address, so argument 7 is at
 * rsp+8, 8 at rsp+16, ...; the result in rax. */
#define GP_ARG1(c) ((c)->rdi)
#define GP_ARG2(c) ((c)->rsi)
#define GP_ARG3(c) ((c)->rdx)
#define GP_ARG4(c) ((c)->rcx)
#define GP_ARG5(c) ((c)->r8)
#define GP_ARG6(c) ((c)->r9)
#define GP_RET(c) ((c)->rax)
#define GP_REG_ARGS 6
#define GP_STACK_ARGS(c) ((c)->rsp + 8)
#else
/* arm64: the UAPI struct user_pt_regs at the start of the kernel's
 * pt_regs. AAPCS64: arguments 1-8 in x0-x7, 9 and later at sp (no return
 * address is pushed: it is in x30); the result in x0. */
struct pt_regs {
	__u64 regs[31];
	__u64 sp, pc, pstate;
};
#define GP_ARG1(c) ((c)->regs[0])
#define GP_ARG2(c) ((c)->regs[1])
#define GP_ARG3(c) ((c)->regs[2])
#define GP_ARG4(c) ((c)->regs[3])
#define GP_ARG5(c) ((c)->regs[4])
#define GP_ARG6(c) ((c)->regs[5])
#define GP_RET(c) ((c)->regs[0])
#define GP_REG_ARGS 8
#define GP_STACK_ARGS(c) ((c)->sp)
#endif

#endif
