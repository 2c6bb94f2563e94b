/*
 * selftime.c - GP_SELFTIME builds (bin/libgpuprobe-selftime.so): what the
 * shim's own instructions cost per launch, on whatever driver it runs on.
 * In production builds (GP_SELFTIME 0) this file is empty.
 *
 * The launch wrappers (wrap_launch.c) read the TSC at entry, just before the
 * forwarded driver call, just after it returns and at exit, with rdtscp
 * (gp_st_now): it reads the counter only once every earlier instruction
 * has executed and every earlier load is done, so each interval,
 * (before-call - entry) and (exit - after-call), runs from the completion
 * of what came before (the application's code, the driver's) to the
 * completion of the shim's own instructions: the time the shim keeps the
 * calling thread, its cache misses included, and nothing of the driver's.
 * Plain rdtsc is not ordered (a load missing the cache just before a stamp
 * can complete after it and be charged to the driver; on the mock driver
 * it reads about 30 ns for a shim that adds about 50 ns end to end).
 * A fence after the read as well (lfence; rdtsc; lfence, Intel's recipe
 * for timing a code region) also stops the shim's first instructions from
 * overlapping what came before, which they do in production: on the mock
 * it reads 15-20 ns above the end-to-end difference; rdtscp reads within a
 * few ns of it (the forward-only path 5 ns, recording about 45 ns on the
 * development VM, where the end-to-end difference is 4-10 and 46-54 ns).
 * A CPU without rdtscp gets "lfence; rdtsc" (one branch on a flag set at
 * load, in the timed pairs too, so it is subtracted with them).
 *
 * Per launch, each thread adds the two intervals (in ticks) and a count to
 * its own counters (static TLS: no lock, no syscall, no atomic
 * read-modify-write); the accounting happens after the exit stamp. A launch
 * that ran the agent handshake (once per process; milliseconds, the ring
 * prefault included) is counted but not timed. Launches of other
 * first-time paths (the first call of a wrapper slot, a function's first
 * name record, the clock's refits) are timed: they are what the shim does.
 *
 * Threads: a thread registers its counters at its first launch (a mutex,
 * once per thread) in a list of live threads; at thread exit a
 * pthread-key destructor moves its totals into process totals. At process
 * exit (this library's destructor, so exit() or a return from main; not
 * _exit or a signal) the totals of exited threads and of every live thread
 * are summed (a live thread that is still launching is read as it stands)
 * and one line goes to stderr, if any launch was seen:
 *
 *   gpuprobe selftime: launches N, shim ns/launch mean X (pre P, post Q),
 *   tsc overhead T ns subtracted, tsc GHz G, recorded R, forwarded F,
 *   handshake H (not timed), slow S, stacks T (Y ns each), threads K,
 *   pid PID
 *
 * N counts every launch wrapper call that reached the driver (a cuGraphLaunch
 * is one); the mean is over the N - H timed launches, R recorded and F
 * forwarded only (no session). P and Q are the mean of each interval less
 * the cost of one pair of stamps, measured at exit as the minimum over
 * back-to-back pairs; T = 2 pairs is what was subtracted per launch (the
 * minimum: the least that can be taken, so X is not understated). Ticks
 * become ns with a TSC rate fitted here, from a clock_gettime/TSC pair taken
 * when the library loads and one at exit (at least 10 ms apart). S counts
 * launches through gp_patch_args_slow (some module patched). T counts the
 * launch stacks taken (sampled launches, stack.c) and Y is the mean time
 * of one, less a pair of stamps: it is part of Q. A fork child
 * starts from zero.
 */
#define _GNU_SOURCE
#include "gp.h"

#if GP_SELFTIME
#include <cpuid.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

GP_HIDDEN __thread struct gp_st_thread gp_st __attribute__((tls_model("initial-exec")));
GP_HIDDEN int gp_st_rdtscp;

/* Totals of exited threads, and the threads that launched. */
struct gp_st_sums {
	uint64_t launches, pre, post, forwarded, handshakes, slow, stacks, stack_ticks;
	uint32_t threads;
};

static pthread_mutex_t gp_st_mu = PTHREAD_MUTEX_INITIALIZER;
static struct gp_st_thread *gp_st_live; /* guarded by gp_st_mu */
static struct gp_st_sums gp_st_gone;    /* guarded by gp_st_mu */
static pthread_key_t gp_st_key;
static int gp_st_key_ok;
static uint64_t gp_st_mono0, gp_st_tsc0; /* the rate fit's first pair */

static void gp_st_add(struct gp_st_sums *to, const struct gp_st_thread *t)
{
	to->launches += __atomic_load_n(&t->launches, __ATOMIC_RELAXED);
	to->pre += __atomic_load_n(&t->pre, __ATOMIC_RELAXED);
	to->post += __atomic_load_n(&t->post, __ATOMIC_RELAXED);
	to->forwarded += __atomic_load_n(&t->forwarded, __ATOMIC_RELAXED);
	to->handshakes += __atomic_load_n(&t->handshakes, __ATOMIC_RELAXED);
	to->slow += __atomic_load_n(&t->slow, __ATOMIC_RELAXED);
	to->stacks += __atomic_load_n(&t->stacks, __ATOMIC_RELAXED);
	to->stack_ticks += __atomic_load_n(&t->stack_ticks, __ATOMIC_RELAXED);
}

/* gp_st_register links the calling thread's counters into the registry.
 * Without a thread-exit hook (pthread_key_create failed) only the thread
 * that exits the process is counted (in gp_st_fini), as a linked counter
 * block would dangle once its thread is gone. */
GP_HIDDEN void gp_st_register(void)
{
	gp_st.registered = 1;
	if (!gp_st_key_ok)
		return;
	pthread_mutex_lock(&gp_st_mu);
	gp_st.next = gp_st_live;
	gp_st_live = &gp_st;
	gp_st_gone.threads++;
	pthread_mutex_unlock(&gp_st_mu);
	pthread_setspecific(gp_st_key, &gp_st);
}

/* gp_st_thread_exit moves an exiting thread's totals into gp_st_gone. */
static void gp_st_thread_exit(void *p)
{
	struct gp_st_thread *t = p;
	pthread_mutex_lock(&gp_st_mu);
	for (struct gp_st_thread **l = &gp_st_live; *l != NULL; l = &(*l)->next)
		if (*l == t) {
			*l = t->next;
			gp_st_add(&gp_st_gone, t);
			break;
		}
	pthread_mutex_unlock(&gp_st_mu);
	/* A launch from a later destructor of this thread registers again. */
	memset(t, 0, sizeof *t);
}

static void gp_st_fork_prepare(void)
{
	pthread_mutex_lock(&gp_st_mu);
}

static void gp_st_fork_parent(void)
{
	pthread_mutex_unlock(&gp_st_mu);
}

/* A fork child reports its own launches only: the parent's threads are
 * not there, and the calling thread starts from zero. */
static void gp_st_fork_child(void)
{
	pthread_mutex_init(&gp_st_mu, NULL);
	gp_st_live = NULL;
	memset(&gp_st_gone, 0, sizeof gp_st_gone);
	memset(&gp_st, 0, sizeof gp_st);
}

/* gp_st_pair reads CLOCK_MONOTONIC and the TSC as close together as it can. */
static void gp_st_pair(uint64_t *mono, uint64_t *tsc)
{
	uint64_t best = ~0ull;
	for (int i = 0; i < 5; i++) {
		uint64_t a = gp_now(), c = gp_st_now(), b = gp_now();
		if (b - a < best)
			best = b - a, *mono = a + (b - a) / 2, *tsc = c;
	}
}

__attribute__((constructor)) static void gp_st_init(void)
{
	unsigned a, b, c, d;
	if (__get_cpuid(0x80000001u, &a, &b, &c, &d) && (d & (1u << 27)))
		gp_st_rdtscp = 1;
	gp_st_key_ok = pthread_key_create(&gp_st_key, gp_st_thread_exit) == 0;
	pthread_atfork(gp_st_fork_prepare, gp_st_fork_parent, gp_st_fork_child);
	gp_st_pair(&gp_st_mono0, &gp_st_tsc0);
}

/* The rate fit spans at least this much (ns): a pair is good to about
 * 50 ns, so the rate to a few ppm. */
#define GP_ST_FIT_NS 10000000ull
/* Back-to-back stamp pairs timed for the overhead. */
#define GP_ST_PAIRS 20000

/* gp_st_ghz fits the TSC rate (ticks per ns) since the library loaded. */
static double gp_st_ghz(void)
{
	uint64_t m, c;
	gp_st_pair(&m, &c);
	while (m - gp_st_mono0 < GP_ST_FIT_NS) {
		uint64_t left = GP_ST_FIT_NS - (m - gp_st_mono0);
		struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)left};
		nanosleep(&ts, NULL);
		gp_st_pair(&m, &c);
	}
	if (c <= gp_st_tsc0)
		return 0;
	return (double)(c - gp_st_tsc0) / (double)(m - gp_st_mono0);
}

/* gp_st_pair_ticks is the least an interval between two stamps costs. */
static uint64_t gp_st_pair_ticks(void)
{
	uint64_t best = ~0ull;
	for (int i = 0; i < GP_ST_PAIRS; i++) {
		uint64_t a = gp_st_now(), b = gp_st_now();
		if (b - a < best)
			best = b - a;
	}
	return best;
}

__attribute__((destructor)) static void gp_st_fini(void)
{
	struct gp_st_sums s;
	pthread_mutex_lock(&gp_st_mu);
	s = gp_st_gone;
	for (const struct gp_st_thread *t = gp_st_live; t != NULL; t = t->next)
		gp_st_add(&s, t);
	pthread_mutex_unlock(&gp_st_mu);
	if (!gp_st_key_ok) {
		gp_st_add(&s, &gp_st);
		s.threads = s.launches != 0;
	}
	if (s.launches == 0)
		return;
	double ghz = gp_st_ghz();
	uint64_t pair = gp_st_pair_ticks();
	uint64_t timed = s.launches - s.handshakes;
	double pre = NAN, post = NAN, over = NAN, stack = 0;
	if (ghz > 0 && s.stacks > 0)
		stack = ((double)s.stack_ticks / (double)s.stacks - (double)pair) / ghz;
	if (ghz > 0) {
		over = 2 * (double)pair / ghz;
		if (timed > 0) {
			pre = ((double)s.pre / (double)timed - (double)pair) / ghz;
			post = ((double)s.post / (double)timed - (double)pair) / ghz;
		}
	}
	char line[512];
	int n = snprintf(line, sizeof line,
			 "gpuprobe selftime: launches %llu, shim ns/launch mean %.1f (pre %.1f, post %.1f), "
			 "tsc overhead %.1f ns subtracted, tsc GHz %.4f, recorded %llu, forwarded %llu, "
			 "handshake %llu (not timed), slow %llu, stacks %llu (%.1f ns each), threads %u, pid %d\n",
			 (unsigned long long)s.launches, pre + post, pre, post, over, ghz,
			 (unsigned long long)(timed - s.forwarded), (unsigned long long)s.forwarded,
			 (unsigned long long)s.handshakes, (unsigned long long)s.slow, (unsigned long long)s.stacks, stack,
			 s.threads, (int)getpid());
	if (n > 0) {
		ssize_t w = write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
		(void)w;
	}
}

#endif /* GP_SELFTIME */
