/*
 * clock.c - cheap CLOCK_MONOTONIC timestamps for the launch path.
 *
 * clock_gettime through the vDSO costs 20-40 ns on the machines measured
 * (more in VMs); a launch takes two. Where the kernel itself keeps
 * CLOCK_MONOTONIC on the TSC (clocksource "tsc": invariant and synchronised
 * across CPUs), the shim reads the TSC (rdtsc, about 10 ns) and converts
 * ticks to CLOCK_MONOTONIC ns with a line fitted between two anchors, each
 * a clock_gettime/rdtsc pair: the first taken when the library loads, the
 * next at least 50 ms later, then one about every second. Until the first
 * fit, and on other clocksources or architectures, timestamps are
 * clock_gettime. The fit's error is a few ns per second of drift, far below
 * the microseconds the records resolve.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "gp.h"

GP_HIDDEN int gp_tsc_on;
GP_HIDDEN int gp_tsc_pending;
GP_HIDDEN struct gp_cal gp_cals[2];
GP_HIDDEN uint32_t gp_cal_cur;

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

GP_HIDDEN void gp_recalibrate(void)
{
	uint64_t m, c;
	if (!gp_tsc_usable || gp_now() - gp_anchor.mono < 50000000u ||
	    __atomic_exchange_n(&gp_cal_busy, 1, __ATOMIC_ACQUIRE))
		return;
	gp_pair(&m, &c);
	uint64_t dm = m - gp_anchor.mono, dc = c - gp_anchor.tsc;
	if (m > gp_anchor.mono && c > gp_anchor.tsc && dm >= 50000000u) {
		uint32_t next = gp_cal_cur ^ 1;
		struct gp_cal *k = &gp_cals[next];
		k->mono = m;
		k->tsc = c;
		k->mult = (uint64_t)(((unsigned __int128)dm << 32) / dc);
		k->recal = k->mult ? (uint64_t)(((unsigned __int128)1000000000u << 32) / k->mult) : ~0ull;
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
