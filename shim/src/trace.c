/*
 * trace.c - GPUPROBE_TRACE: what the application asks the dynamic linker and
 * the driver for, and what the shim does about it.
 *
 *   GPUPROBE_TRACE=1     log to stderr
 *   GPUPROBE_TRACE=PATH  append to PATH
 *
 * Logged: every dlsym and cuGetProcAddress request (name, version, flags,
 * answer), every wrapper bound, the first call of each wrapper, every
 * module/library load with its image kind, cuLink* steps, the handshake
 * outcome, and at exit a summary line with the counts. Each line is one
 * write(2), prefixed "gpuprobe[PID]: ".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gp.h"

GP_HOT_VAR GP_HIDDEN int gp_trace_fd = -1;
GP_HIDDEN struct gp_stats gp_stats;

GP_HIDDEN void gp_tracef(const char *fmt, ...)
{
	char buf[1024];
	int n = snprintf(buf, sizeof buf, "gpuprobe[%d]: ", (int)getpid());
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (m < 0)
		return;
	n += m;
	if (n > (int)sizeof buf - 2)
		n = (int)sizeof buf - 2;
	buf[n++] = '\n';
	ssize_t w = write(gp_trace_fd, buf, (size_t)n);
	(void)w;
}

__attribute__((constructor)) static void gp_trace_init(void)
{
	const char *t = getenv("GPUPROBE_TRACE");
	if (t == NULL || t[0] == 0 || strcmp(t, "0") == 0)
		return;
	if (strcmp(t, "1") == 0) {
		gp_trace_fd = fcntl(2, F_DUPFD_CLOEXEC, 3);
		if (gp_trace_fd < 0)
			gp_trace_fd = 2;
	} else {
		gp_trace_fd = open(t, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (gp_trace_fd < 0)
			return;
	}
	GP_TRACE("libgpuprobe.so loaded into %s (GPUPROBE_SOCKET=%s)", program_invocation_name,
		 getenv("GPUPROBE_SOCKET") ? getenv("GPUPROBE_SOCKET") : "(default " GP_DEFAULT_SOCKET ")");
}

__attribute__((destructor)) static void gp_trace_fini(void)
{
	if (gp_trace_fd < 0)
		return;
	uint64_t dropped = 0;
	void *ring = __atomic_load_n(&gp_ring_base, __ATOMIC_ACQUIRE);
	if (ring != NULL)
		dropped = __atomic_load_n(gpbr_u64(ring, GPBR_RING_DROPPED), __ATOMIC_RELAXED);
	GP_TRACE("summary: launches=%llu graph_launches=%llu captured=%llu names=%llu names_cut=%llu loads=%llu "
		 "syncs=%llu memcpys=%llu records=%llu not_written=%llu ring_dropped=%llu unbound_regions=%llu "
		 "device_maps=%llu unbound_device_maps=%llu stopped_device_maps=%llu session=%s",
		 (unsigned long long)gp_stats.launches, (unsigned long long)gp_stats.graph_launches,
		 (unsigned long long)gp_stats.captured, (unsigned long long)gp_stats.names,
		 (unsigned long long)gp_stats.names_cut, (unsigned long long)gp_stats.loads,
		 (unsigned long long)gp_stats.syncs, (unsigned long long)gp_stats.memcpys,
		 (unsigned long long)gp_stats.published, (unsigned long long)gp_stats.dropped,
		 (unsigned long long)dropped, (unsigned long long)gp_stats.unbound, (unsigned long long)gp_stats.devmap_bound,
		 (unsigned long long)gp_stats.devmap_unbound, (unsigned long long)gp_stats.devmap_stopped,
		 ring ? "connected" : "none");
	gp_sass_summary();
	gp_stack_summary();
}

/*
 * InitializeInjection is what the driver calls in a library named by
 * CUDA_INJECTION64_PATH (it dlopens it at cuInit). The shim does nothing
 * there beyond logging: interposition needs LD_PRELOAD (see README.md).
 */
GP_EXPORT int InitializeInjection(void);
GP_EXPORT int InitializeInjection(void)
{
	GP_TRACE("InitializeInjection: loaded through CUDA_INJECTION64_PATH");
	return 1;
}
