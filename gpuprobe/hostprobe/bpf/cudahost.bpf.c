// SPDX-License-Identifier: (MIT OR GPL-2.0)
/* Host probes on the CUDA runtime (libcudart) and driver (libcuda), x86-64.
 *
 * Every probed entry point gets a uprobe and a uretprobe: one pair of
 * programs per argument shape (enter_<shape>, exit_<shape>), the API number
 * coming from the attach cookie. At entry the six register arguments (and, per shape, the
 * stack arguments or the launch-config struct they point to) are saved in
 * an LRU hash keyed by thread and API; at return one event with entry and
 * exit times, the raw arguments and the return value goes out through a BPF
 * ring buffer, waking the reader only when wakeup_bytes are pending.
 * Go (decode.go) turns raw words into record.HostCall and
 * record.KernelName. A full ring drops the event and counts it in `drops`.
 * A call whose thread dies never returns: its entry stays in the LRU hash
 * until newer calls evict it.
 */
#include "hostprobe.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Argument shapes: what besides the six register arguments is read. */
enum shape {
	SHAPE_PLAIN = 0,  /* registers only */
	SHAPE_STACK2 = 1, /* + 2 stack words (cudaLaunchKernel: shmem, stream) */
	SHAPE_STACK3 = 2, /* + 3 stack words (cuLaunchKernel: blockZ, shmem, stream) */
	SHAPE_CFG = 3,    /* + 40 bytes of the launch config that arg 0 points to */
	SHAPE_OUT = 4,    /* at return: the u64 that arg 0 points to (allocs) */
	SHAPE_NAME = 5,   /* at return: *arg0 (handle) and the string at arg 2 */
};

#define EXTRA_WORDS 5
#define NAME_CAP 240          /* longest name sent; longer names are cut */
#define NAME_BUF 248          /* NAME_CAP + NUL + room to see a cut */

enum event_kind {
	EVENT_CALL = 1,
	EVENT_NAME = 2,
};

enum event_flags {
	FLAG_FAULTED = 2, /* record.HostCallArgsFaulted */
};

struct key {
	__u64 pid_tgid;
	__u32 api;
	__u32 pad;
};

struct entry {
	__u64 enter_ns;
	__u64 regs[6];
	__u64 extra[EXTRA_WORDS];
	__u32 flags;
	__u32 pad;
};

/* One returned call (136 bytes). */
struct call_event {
	__u16 kind; /* EVENT_CALL */
	__u16 api;
	__u16 flags;
	__u16 pad;
	__u32 pid;
	__u32 tid;
	__u64 enter_ns;
	__u64 exit_ns;
	__u64 ret;  /* the return register (rax, x0) */
	__u64 out;  /* SHAPE_OUT: *arg0 at return */
	__u64 regs[6];
	__u64 extra[EXTRA_WORDS];
};

/* One successful cuModuleGetFunction / cuLibraryGetKernel (312 bytes). */
struct name_event {
	__u16 kind; /* EVENT_NAME */
	__u16 api;
	__u16 flags;
	__u16 pad;
	__u32 pid;
	__u32 tid;
	__u64 enter_ns;
	__u64 exit_ns;
	__u64 ret;
	__u64 function; /* *arg0 at return */
	__u64 module;   /* arg 1 */
	__s32 name_len; /* bpf_probe_read_user_str's result: bytes with the NUL, or < 0 */
	__u32 pad2;
	char name[NAME_BUF];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct key);
	__type(value, struct entry);
} entries SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

/* Wake the reader only once this many bytes wait in the ring (set by Go;
 * 0: on every event). A wakeup per event costs the probed thread about as
 * much as the probe itself on a small machine; the reader polls with a
 * deadline for the rest. */
volatile const __u64 wakeup_bytes = 0;

static __always_inline __u64 submit_flags(void)
{
	if (!wakeup_bytes)
		return 0;
	return bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

static __always_inline void count_drop(void)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&drops, &zero);
	if (n)
		__sync_fetch_and_add(n, 1);
}

/* read_stack_args puts arguments 7 .. 6+n (n = 2 or 3) into e->extra. */
static __always_inline void read_stack_args(struct pt_regs *ctx, struct entry *e, int n)
{
#if GP_REG_ARGS == 8
	e->extra[0] = ctx->regs[6];
	e->extra[1] = ctx->regs[7];
	if (n == 3 && bpf_probe_read_user(&e->extra[2], 8, (void *)GP_STACK_ARGS(ctx)))
		e->flags |= FLAG_FAULTED;
#else
	if (bpf_probe_read_user(e->extra, n * 8, (void *)GP_STACK_ARGS(ctx)))
		e->flags |= FLAG_FAULTED;
#endif
}

static __always_inline int on_enter(struct pt_regs *ctx, __u32 api, int shape)
{
	struct key k = { .pid_tgid = bpf_get_current_pid_tgid(), .api = api };
	struct entry e = {};

	e.regs[0] = GP_ARG1(ctx);
	e.regs[1] = GP_ARG2(ctx);
	e.regs[2] = GP_ARG3(ctx);
	e.regs[3] = GP_ARG4(ctx);
	e.regs[4] = GP_ARG5(ctx);
	e.regs[5] = GP_ARG6(ctx);
	/* Arguments 7 and later: on the stack on x86-64 (hostprobe.h); on
	 * arm64 7 and 8 are still registers (x6, x7) and 9 is at sp. */
	if (shape == SHAPE_STACK2 || shape == SHAPE_STACK3)
		read_stack_args(ctx, &e, shape == SHAPE_STACK2 ? 2 : 3);
	else if (shape == SHAPE_CFG) {
		if (bpf_probe_read_user(e.extra, EXTRA_WORDS * 8, (void *)GP_ARG1(ctx))) {
			e.flags |= FLAG_FAULTED;
			__builtin_memset(e.extra, 0, sizeof(e.extra));
		}
	}
	if (shape == SHAPE_STACK2 || shape == SHAPE_STACK3) {
		if (e.flags & FLAG_FAULTED)
			__builtin_memset(e.extra, 0, sizeof(e.extra));
	}
	e.enter_ns = bpf_ktime_get_ns();
	bpf_map_update_elem(&entries, &k, &e, BPF_ANY);
	return 0;
}

static __always_inline int emit_name(struct pt_regs *ctx, __u32 api, struct entry *e, __u64 now, __u64 pid_tgid)
{
	struct name_event *ev;
	__u64 handle = 0;

	if ((__u32)GP_RET(ctx) != 0)
		return 0; /* no handle: nothing to name */
	ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	if (!ev) {
		count_drop();
		return 0;
	}
	ev->kind = EVENT_NAME;
	ev->api = api;
	ev->flags = e->flags;
	ev->pad = 0;
	ev->pid = pid_tgid >> 32;
	ev->tid = (__u32)pid_tgid;
	ev->enter_ns = e->enter_ns;
	ev->exit_ns = now;
	ev->ret = GP_RET(ctx);
	if (bpf_probe_read_user(&handle, sizeof(handle), (void *)e->regs[0]))
		ev->flags |= FLAG_FAULTED;
	ev->function = handle;
	ev->module = e->regs[1];
	ev->pad2 = 0;
	/* NAME_CAP+2 bytes: up to NAME_CAP+1 characters, so a name longer than
	 * NAME_CAP is seen as such and flagged truncated in Go. */
	ev->name_len = bpf_probe_read_user_str(ev->name, NAME_CAP + 2, (void *)e->regs[2]);
	bpf_ringbuf_submit(ev, submit_flags());
	return 0;
}

static __always_inline int on_exit(struct pt_regs *ctx, __u32 api, int shape)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct key k = { .pid_tgid = pid_tgid, .api = api };
	struct call_event *ev;
	struct entry *e;

	e = bpf_map_lookup_elem(&entries, &k);
	if (!e)
		return 0; /* attached between this call's entry and return */
	if (shape == SHAPE_NAME) {
		emit_name(ctx, api, e, now, pid_tgid);
		bpf_map_delete_elem(&entries, &k);
		return 0;
	}
	ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	if (!ev) {
		count_drop();
		bpf_map_delete_elem(&entries, &k);
		return 0;
	}
	ev->kind = EVENT_CALL;
	ev->api = api;
	ev->flags = e->flags;
	ev->pad = 0;
	ev->pid = pid_tgid >> 32;
	ev->tid = (__u32)pid_tgid;
	ev->enter_ns = e->enter_ns;
	ev->exit_ns = now;
	ev->ret = GP_RET(ctx);
	ev->out = 0;
	if (shape == SHAPE_OUT && (__u32)GP_RET(ctx) == 0) {
		if (bpf_probe_read_user(&ev->out, sizeof(ev->out), (void *)e->regs[0])) {
			ev->out = 0;
			ev->flags |= FLAG_FAULTED;
		}
	}
	__builtin_memcpy(ev->regs, e->regs, sizeof(ev->regs));
	__builtin_memcpy(ev->extra, e->extra, sizeof(ev->extra));
	bpf_ringbuf_submit(ev, submit_flags());
	bpf_map_delete_elem(&entries, &k);
	return 0;
}

/* PROBE(name, shape): the entry and return programs of one argument shape.
 * Go attaches them to every entry point of that shape with the API number
 * (record.HostAPI; 1000 cuModuleGetFunction, 1001 cuLibraryGetKernel) as
 * the attach cookie: uprobe_multi links (Linux 6.6) where the kernel has
 * them, one perf-event uprobe per symbol (Linux 5.15) otherwise. */
#define PROBE(name, shape)                                                        \
	SEC("uprobe")                                                             \
	int enter_##name(struct pt_regs *ctx)                                     \
	{                                                                         \
		return on_enter(ctx, (__u32)bpf_get_attach_cookie(ctx), shape);   \
	}                                                                         \
	SEC("uretprobe")                                                          \
	int exit_##name(struct pt_regs *ctx)                                      \
	{                                                                         \
		return on_exit(ctx, (__u32)bpf_get_attach_cookie(ctx), shape);    \
	}

PROBE(plain, SHAPE_PLAIN)
PROBE(stack2, SHAPE_STACK2)
PROBE(stack3, SHAPE_STACK3)
PROBE(cfg, SHAPE_CFG)
PROBE(out, SHAPE_OUT)
PROBE(name, SHAPE_NAME)
