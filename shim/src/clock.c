/*
 * clock.c - cheap CLOCK_MONOTONIC timestamps for the launch path.
 *
 * clock_gettime through the vDSO costs 20-40 ns on the machines measured
 * (more in VMs); a launch takes two. Where the kernel itself keeps
 * CLOCK_MONOTONIC on the TSC (clocksource "tsc": invariant and synchronised
 * across CPUs), the shim reads the TSC (rdtsc, about 10 ns) and converts
 * ticks to CLOCK_MONOTONIC ns with a line fitted between two anchors, each
 * a clock_gettime/rdtsc pair: the first taken when the library loads, the
 * next at least 5 ms later (a fit good to a few ppm, so that short-lived
 * processes and the first launches get the cheap path soon), then one at
 * least 50 ms later, then one about every second. Until the first fit, and
 * on other clocksources or architectures, timestamps are clock_gettime;
 * while the first fit is pending, whether it is due is checked with the
 * TSC, not a third clock_gettime per launch. The fit's error is a few ns
 * per second of drift, far below the microseconds the records resolve.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "gp.h"

GP_HOT_VAR GP_HIDDEN int gp_tsc_on;
GP_HIDDEN int gp_tsc_pending;
GP_HOT_VAR GP_HIDDEN struct gp_cal gp_cals[2] __attribute__((aligned(8)));
GP_HOT_VAR GP_HIDDEN uint32_t gp_cal_cur;

#if defined(__x86_64__)
static int gp_tsc_usable;
static uint32_t gp_cal_busy;
static struct gp_cal gp_anchor; /* the last measured pair */

/* gp_pair reads CLOCK_MONOTONIC and the TSC as close together as it can. */
static void gp_pair(uint64_t *mono, uint64_t *tsc)
{
	uint64_t best = ~0ull;
	for (int i = 0; i < 3; i++) {
		uint64_t a = gp_now(), c = __builtin_ia32_rdtsc(), b = gp_now();
		if (b - a < best)
			best = b - a, *mono = a + (b - a) / 2, *tsc = c;
	}
}

__attribute__((constructor)) static void gp_clock_init(void)
{
	char buf[32] = {0};
	int fd = open("/sys/devices/system/clocksource/clocksource0/current_clocksource", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n < 3 || strncmp(buf, "tsc", 3) != 0 || (buf[3] != '\n' && buf[3] != 0))
		return;
	gp_pair(&gp_anchor.mono, &gp_anchor.tsc);
	gp_tsc_usable = 1;
	gp_tsc_pending = 1;
}

/* The first fit spans at least GP_CAL_FIRST_NS, the second GP_CAL_NEXT_NS,
 * later ones about GP_CAL_EVERY_NS. */
#define GP_CAL_FIRST_NS 5000000ull
#define GP_CAL_NEXT_NS 50000000ull
#define GP_CAL_EVERY_NS 1000000000ull
/* A rough rate needs this much time after the load anchor. */
#define GP_CAL_RATE_NS 1000000ull

/* gp_first_due: the TSC value at which the first fit is due, estimated
 * from the load anchor and a pair at least GP_CAL_RATE_NS later (0: not
 * yet), so that the pending check is one rdtsc instead of a clock read. */
static uint64_t gp_first_due;

/* gp_first_pending reports whether the first fit is not due yet. */
static int gp_first_pending(void)
{
	uint64_t due = __atomic_load_n(&gp_first_due, __ATOMIC_RELAXED);
	if (due != 0)
		return __builtin_ia32_rdtsc() < due;
	uint64_t m = gp_now(), c = __builtin_ia32_rdtsc();
	uint64_t dm = m - gp_anchor.mono, dc = c - gp_anchor.tsc;
	if (m < gp_anchor.mono || c < gp_anchor.tsc || dm < GP_CAL_RATE_NS)
		return 1; /* too early for a rate: clock reads until then */
	due = gp_anchor.tsc + (uint64_t)((unsigned __int128)dc * GP_CAL_FIRST_NS / dm);
	__atomic_store_n(&gp_first_due, due, __ATOMIC_RELAXED);
	return c < due;
}

GP_HIDDEN void gp_recalibrate(void)
{
	uint64_t m, c;
	if (!gp_tsc_usable)
		return;
	int first = !__atomic_load_n(&gp_tsc_on, __ATOMIC_ACQUIRE);
	uint64_t span = first ? GP_CAL_FIRST_NS : GP_CAL_NEXT_NS;
	if (first && gp_first_pending())
		return;
	if (gp_now() - gp_anchor.mono < span || __atomic_exchange_n(&gp_cal_busy, 1, __ATOMIC_ACQUIRE))
		return;
	gp_pair(&m, &c);
	uint64_t dm = m - gp_anchor.mono, dc = c - gp_anchor.tsc;
	if (m > gp_anchor.mono && c > gp_anchor.tsc && dm >= span) {
		uint32_t next = gp_cal_cur ^ 1;
		struct gp_cal *k = &gp_cals[next];
		k->mono = m;
		k->tsc = c;
		k->mult = (uint64_t)(((unsigned __int128)dm << 32) / dc);
		/* The first fit is refitted after GP_CAL_NEXT_NS, later ones
		 * after GP_CAL_EVERY_NS (in ticks). */
		uint64_t every = first ? GP_CAL_NEXT_NS : GP_CAL_EVERY_NS;
		k->recal = k->mult ? (uint64_t)(((unsigned __int128)every << 32) / k->mult) : ~0ull;
		__atomic_store_n(&gp_cal_cur, next, __ATOMIC_RELEASE);
		__atomic_store_n(&gp_tsc_on, 1, __ATOMIC_RELEASE);
		__atomic_store_n(&gp_tsc_pending, 0, __ATOMIC_RELEASE);
		gp_anchor.mono = m, gp_anchor.tsc = c;
	}
	__atomic_store_n(&gp_cal_busy, 0, __ATOMIC_RELEASE);
}
#else
GP_HIDDEN void gp_recalibrate(void)
{
}
#endif
