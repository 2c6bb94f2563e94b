/*
 * stack.c - the launching thread's stack, for sampled launches.
 *
 * The collector asks for stacks_per_second in its WELCOME (settings word
 * 3). A launch takes its thread's stack when its return time reaches
 * gp_stack_next, the process's next sampling time, and moves it on by a
 * jittered gap of 1 s / rate (one compare-and-swap; the loser of a race
 * takes none), so that a loop launching kernels in a fixed order is not
 * always sampled at the same one. The stack goes into the launch ring as
 * stack records (record type 15) just before the launch record.
 *
 * Native frames: a frame-pointer walk, innermost first, each frame pointer
 * checked against the thread's stack (above the walker's own frame, below
 * the stack's top: __libc_stack_end for the main thread, the thread's
 * descriptor for a glibc-allocated thread stack; a thread on any other
 * stack walks no native frame) and rising; at most GP_STACK_NATIVE return
 * addresses, the shim's own left out. Code built without frame pointers
 * ends the chain early or, where its rbp holds data, may add wrong frames;
 * every address is symbolised by the collector from the process's mapped
 * files, never here.
 *
 * Python frames (CPython 3.10-3.13): the thread's own PyThreadState
 * (PyGILState_GetThisThreadState, a thread-specific read: no GIL, lock or
 * syscall), then its frame chain by the offsets of gp_pylayouts, verified
 * against each version's headers by shim/stack_test.go. At session start,
 * with no launch in flight, the layout is checked against the live
 * interpreter through process_vm_readv (a read that fails instead of
 * faulting): every thread state must name the main interpreter and every
 * frame's code object be a PyCode_Type. An unknown version or a failed
 * check means no Python frames (GP_STACK_F_PY_UNKNOWN on each stack, and
 * counted in the trace summary). On the launch path each code object's
 * type is checked again before it is recorded; its address and the frame's
 * instruction pointer are all that is taken: the collector reads the code
 * object (file, name, line table) from the process's memory.
 *
 * Launch path cost: a relaxed load and a compare per launch; a sampled
 * launch walks at most GP_STACK_NATIVE + 2 * GP_STACK_PYTHON words from
 * the thread's own stack and frames and writes them into ring slots.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <sys/uio.h>
#include <unistd.h>

#include "gp.h"

/* CLOCK_MONOTONIC ns from which the next launch takes its stack;
 * UINT64_MAX: stacks are off. */
GP_HIDDEN GP_HOT_VAR uint64_t gp_stack_next = UINT64_MAX;
static uint64_t gp_stack_gap;          /* ns between two sampled launches */
static uintptr_t gp_self_lo, gp_self_hi; /* the shim's mapped image */
extern void *__libc_stack_end;

/* Where CPython keeps a thread's frames (offsets in bytes). */
struct gp_pylayout {
	uint16_t version;     /* major << 8 | minor */
	int16_t tstate_frame; /* PyThreadState: frame (3.10), cframe (3.11, 3.12), current_frame (3.13) */
	int16_t cframe_cur;   /* _PyCFrame.current_frame; -1: tstate_frame is the frame itself */
	int16_t code;         /* the frame's code object: f_code, f_executable */
	int16_t prev;         /* the calling frame: f_back, previous */
	int16_t instr;        /* f_lasti (int, 3.10), prev_instr, instr_ptr */
	int16_t owner;        /* the frame's owner (char); -1: none */
};
/* Verified by shim/stack_test.go against each version's headers. */
GP_HIDDEN const struct gp_pylayout gp_pylayouts[] = {
	{0x030a, 24, -1, 32, 24, 96, -1},
	{0x030b, 56, 8, 32, 48, 56, 69},
	{0x030c, 56, 0, 0, 8, 56, 70},
	{0x030d, 72, -1, 0, 8, 56, 70},
};
#define GP_PY_OWNED_BY_CSTACK 3 /* 3.12+: an entry frame of the C stack, no code */
static const struct gp_pylayout *gp_py; /* NULL: no Python frames */
static uint16_t gp_py_version;          /* the interpreter's, 0: none */
static void *(*gp_py_tstate)(void);    /* PyGILState_GetThisThreadState */
static uintptr_t gp_py_code_type;       /* &PyCode_Type */
static uint64_t gp_py_unknown;          /* stacks taken without Python frames for want of a layout */
static uint64_t gp_stacks;              /* stacks taken */

#define GP_USER_MAX ((uintptr_t)1 << 47)
static inline int gp_ptr_ok(uintptr_t p) { return p >= 4096 && p < GP_USER_MAX && (p & 7) == 0; }
static inline uintptr_t gp_ld(uintptr_t p) { return *(const uintptr_t *)p; }

/* The fault-safe read of the session-start check: 0 when all n bytes came. */
static int gp_safe_read(uintptr_t a, void *out, size_t n)
{
	struct iovec l = {out, n}, r = {(void *)a, n};
	return process_vm_readv(getpid(), &l, 1, &r, 1, 0) == (ssize_t)n ? 0 : -1;
}

/* gp_py_frame0 returns the innermost frame of thread state ts, read by rd. */
static uintptr_t gp_py_frame0(const struct gp_pylayout *L, uintptr_t ts, int (*rd)(uintptr_t, uintptr_t *))
{
	uintptr_t f;
	if (rd(ts + (uintptr_t)L->tstate_frame, &f) != 0)
		return 0;
	if (L->cframe_cur >= 0 && (!gp_ptr_ok(f) || rd(f + (uintptr_t)L->cframe_cur, &f) != 0))
		return 0;
	return f;
}

static int gp_rd_safe(uintptr_t a, uintptr_t *v) { return gp_ptr_ok(a) ? gp_safe_read(a, v, sizeof *v) : -1; }

/* gp_py_check walks every thread state of the main interpreter through
 * the fault-safe read: 0 when the layout holds for all of them. */
static int gp_py_check(const struct gp_pylayout *L, void *interp, void *(*head)(void *), void *(*next)(void *),
		       const char **why)
{
	uintptr_t ts = (uintptr_t)head(interp);
	int frames = 0;
	for (int t = 0; ts != 0 && t < 64; t++, ts = (uintptr_t)next((void *)ts)) {
		uintptr_t in;
		if (gp_rd_safe(ts + 16, &in) != 0 || in != (uintptr_t)interp)
			return *why = "a thread state does not name its interpreter", -1;
		uintptr_t f = gp_py_frame0(L, ts, gp_rd_safe);
		for (int k = 0; gp_ptr_ok(f) && k < 256; k++) {
			uint8_t owner = 0;
			if (L->owner >= 0 && gp_safe_read(f + (uintptr_t)L->owner, &owner, 1) != 0)
				return *why = "unreadable frame", -1;
			uintptr_t code, type;
			if (gp_rd_safe(f + (uintptr_t)L->code, &code) != 0)
				return *why = "unreadable frame", -1;
			if (owner != GP_PY_OWNED_BY_CSTACK) {
				if (gp_rd_safe(code + 8, &type) != 0 || type != gp_py_code_type)
					return *why = "a frame's code is no code object", -1;
				frames++;
			}
			if (gp_rd_safe(f + (uintptr_t)L->prev, &f) != 0)
				return *why = "unreadable frame", -1;
		}
	}
	GP_TRACE("stacks: CPython %u.%u layout checked (%d frames)", gp_py_version >> 8, gp_py_version & 0xff, frames);
	return 0;
}

/* gp_py_start finds the process's CPython and checks its layout. */
static void gp_py_start(void)
{
	gp_py = NULL;
	gp_py_version = 0;
	void *tsf = gp_real_dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState");
	void *code = gp_real_dlsym(RTLD_DEFAULT, "PyCode_Type");
	void *(*mainf)(void) = (void *(*)(void))gp_real_dlsym(RTLD_DEFAULT, "PyInterpreterState_Main");
	void *(*head)(void *) = (void *(*)(void *))gp_real_dlsym(RTLD_DEFAULT, "PyInterpreterState_ThreadHead");
	void *(*next)(void *) = (void *(*)(void *))gp_real_dlsym(RTLD_DEFAULT, "PyThreadState_Next");
	if (tsf == NULL || code == NULL || mainf == NULL || head == NULL || next == NULL)
		return; /* no CPython in the process */
	const unsigned long *hex = gp_real_dlsym(RTLD_DEFAULT, "Py_Version"); /* 3.11+ */
	const char *(*verf)(void) = (const char *(*)(void))gp_real_dlsym(RTLD_DEFAULT, "Py_GetVersion");
	unsigned maj = 0, min = 0;
	if (hex != NULL)
		maj = (unsigned)(*hex >> 24) & 0xff, min = (unsigned)(*hex >> 16) & 0xff;
	else if (verf != NULL) {
		const char *s = verf();
		for (; *s >= '0' && *s <= '9'; s++)
			maj = maj * 10 + (unsigned)(*s - '0');
		for (s += *s == '.'; *s >= '0' && *s <= '9'; s++)
			min = min * 10 + (unsigned)(*s - '0');
	}
	gp_py_version = (uint16_t)(maj << 8 | (min & 0xff));
	const struct gp_pylayout *L = NULL;
	for (size_t i = 0; i < sizeof gp_pylayouts / sizeof gp_pylayouts[0]; i++)
		if (gp_pylayouts[i].version == gp_py_version)
			L = &gp_pylayouts[i];
	const char *why = "no layout for this version";
	gp_py_tstate = (void *(*)(void))tsf;
	gp_py_code_type = (uintptr_t)code;
	void *interp = mainf();
	if (L == NULL || interp == NULL || gp_py_check(L, interp, head, next, &why) != 0) {
		GP_TRACE("stacks: CPython %u.%u: %s; no Python frames", maj, min, why);
		return;
	}
	gp_py = L;
}

/* The shim's own image, whose frames a stack leaves out. */
static int gp_self_phdr(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	uintptr_t me = (uintptr_t)arg;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *p = &info->dlpi_phdr[i];
		uintptr_t lo = info->dlpi_addr + p->p_vaddr;
		if (p->p_type == PT_LOAD && (p->p_flags & PF_X) && me >= lo && me < lo + p->p_memsz) {
			gp_self_lo = lo, gp_self_hi = lo + p->p_memsz;
			return 1;
		}
	}
	return 0;
}

GP_HIDDEN void gp_stack_start(uint32_t rate)
{
	if (rate == 0) {
		__atomic_store_n(&gp_stack_next, UINT64_MAX, __ATOMIC_RELAXED);
		return;
	}
	if (gp_self_hi == 0)
		dl_iterate_phdr(gp_self_phdr, (void *)(uintptr_t)gp_stack_start);
	gp_py_start();
	gp_stack_gap = 1000000000ull / rate;
	if (gp_stack_gap == 0)
		gp_stack_gap = 1;
	GP_TRACE("stacks: %u a second", rate);
	__atomic_store_n(&gp_stack_next, 0, __ATOMIC_RELEASE);
}

GP_HIDDEN void gp_stack_summary(void)
{
	GP_TRACE("stacks: %llu taken, %llu without Python frames for want of a layout",
		 (unsigned long long)__atomic_load_n(&gp_stacks, __ATOMIC_RELAXED),
		 (unsigned long long)__atomic_load_n(&gp_py_unknown, __ATOMIC_RELAXED));
}

/* gp_stack_top returns the top of the calling thread's stack, 0 when it
 * runs on a stack this walk does not know. */
static uintptr_t gp_stack_top(uintptr_t sp)
{
	if (gp_tid() == gp_pid())
		return (uintptr_t)__libc_stack_end;
	uintptr_t self = (uintptr_t)pthread_self(); /* glibc: the descriptor tops its stack block */
	return self > sp && self - sp < ((uintptr_t)1 << 30) ? self : 0;
}

/* gp_walk_native fills w with the return addresses above the walker's
 * frame; *cut says it stopped at max. */
static __attribute__((noinline)) uint32_t gp_walk_native(uint64_t *w, uint32_t max, int *cut)
{
	uintptr_t fp = (uintptr_t)__builtin_frame_address(0), lo = fp, hi = gp_stack_top(fp);
	uint32_t n = 0;
	*cut = 0;
	while (fp >= lo && fp + 16 <= hi && (fp & 7) == 0) {
		uintptr_t nfp = gp_ld(fp), ret = gp_ld(fp + 8);
		if (ret < 4096)
			break;
		if (ret < gp_self_lo || ret >= gp_self_hi) {
			if (n == max) {
				*cut = 1;
				break;
			}
			w[n++] = ret;
		}
		if (nfp <= fp)
			break;
		lo = fp + 16, fp = nfp;
	}
	return n;
}

/* gp_walk_python fills w with pairs (code object, instruction pointer) of
 * the calling thread's Python frames; *cut says it stopped at max. */
static uint32_t gp_walk_python(uint64_t *w, uint32_t max, int *cut)
{
	const struct gp_pylayout *L = gp_py;
	uint32_t n = 0;
	*cut = 0;
	uintptr_t ts = (uintptr_t)gp_py_tstate();
	if (!gp_ptr_ok(ts))
		return 0;
	uintptr_t f = gp_ptr_ok(ts) ? gp_ld(ts + (uintptr_t)L->tstate_frame) : 0;
	if (L->cframe_cur >= 0)
		f = gp_ptr_ok(f) ? gp_ld(f + (uintptr_t)L->cframe_cur) : 0;
	for (int k = 0; gp_ptr_ok(f) && k < 2 * GP_STACK_PYTHON; k++, f = gp_ld(f + (uintptr_t)L->prev)) {
		if (L->owner >= 0 && *(const uint8_t *)(f + (uintptr_t)L->owner) == GP_PY_OWNED_BY_CSTACK)
			continue;
		uintptr_t code = gp_ld(f + (uintptr_t)L->code);
		if (!gp_ptr_ok(code) || gp_ld(code + 8) != gp_py_code_type)
			continue;
		if (n == max) {
			*cut = 1;
			break;
		}
		w[2 * n] = code;
		w[2 * n + 1] = L->owner < 0 ? (uint64_t)(uint32_t) * (const int *)(f + (uintptr_t)L->instr)
					     : gp_ld(f + (uintptr_t)L->instr);
		n++;
	}
	return n;
}

/* gp_stack_put writes one part: native then python frames of w. */
static int gp_stack_put(void *ring, uint64_t id, uint8_t part, uint8_t flags, const uint64_t *nat, uint32_t nn,
			const uint64_t *py, uint32_t np)
{
	uint32_t len = (uint32_t)(sizeof(struct gp_rec_stack) + 8 * (nn + 2 * np)), t = 0;
	uint64_t ticket;
	struct gpbr_slot *slot = gp_reserve(ring, len, &ticket);
	if (slot == NULL)
		return -1;
	struct gp_rec_stack *r = gpbr_ring_payload(slot);
	r->h.type = GP_REC_STACK, r->h.version = GP_REC_VERSION, r->h.size = len;
	r->launch_id = id, r->pid = gp_pid(), r->tid = gp_tid();
	r->part = part, r->flags = flags, r->native = (uint8_t)nn, r->python = (uint8_t)np;
	r->py_version = gp_py_version, r->reserved = 0;
	for (uint32_t i = 0; i < nn; i++)
		r->words[t++] = nat[i];
	for (uint32_t i = 0; i < 2 * np; i++)
		r->words[t++] = py[i];
	gp_ring_commit(slot, ticket, GP_REC_STACK, len);
	return 0;
}

GP_HIDDEN void gp_stack_take(void *ring, uint64_t id, uint64_t now)
{
	uint64_t next = __atomic_load_n(&gp_stack_next, __ATOMIC_RELAXED);
	uint64_t mix = id * 0x9E3779B97F4A7C15ull;
	uint64_t to = now + gp_stack_gap / 2 + (mix >> 32) % (gp_stack_gap | 1);
	if (now < next || !__atomic_compare_exchange_n(&gp_stack_next, &next, to, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		return; /* another thread took this one */
	uint64_t nat[GP_STACK_NATIVE], py[2 * GP_STACK_PYTHON];
	int ncut, pcut = 0;
	uint32_t nn = gp_walk_native(nat, GP_STACK_NATIVE, &ncut), np = 0;
	uint8_t flags = ncut ? GP_STACK_F_NATIVE_CUT : 0;
	if (gp_py != NULL)
		np = gp_walk_python(py, GP_STACK_PYTHON, &pcut);
	else if (gp_py_version != 0) {
		flags |= GP_STACK_F_PY_UNKNOWN;
		__atomic_fetch_add(&gp_py_unknown, 1, __ATOMIC_RELAXED);
	}
	if (pcut)
		flags |= GP_STACK_F_PYTHON_CUT;
	/* Parts that fit the ring's slots: a Python frame is not split. */
	uint32_t room = (((const struct gpbr_header *)ring)->stride - GPBR_SLOT_HEADER - sizeof(struct gp_rec_stack)) / 8;
	if (room > GP_STACK_MAX_WORDS)
		room = GP_STACK_MAX_WORDS;
	if (room < 2)
		return;
	uint32_t i = 0, j = 0;
	for (uint8_t part = 0;; part++) {
		uint32_t a = nn - i < room ? nn - i : room;
		uint32_t b = (room - a) / 2 < np - j ? (room - a) / 2 : np - j;
		int last = i + a == nn && j + b == np;
		if (gp_stack_put(ring, id, part, flags | (last ? GP_STACK_F_LAST : 0), nat + i, a, py + 2 * j, b) != 0)
			return;
		i += a, j += b;
		if (last)
			break;
	}
	__atomic_fetch_add(&gp_stacks, 1, __ATOMIC_RELAXED);
}
