/*
 * reconnect.c - coming back after the collector restarts.
 *
 * After the first handshake a thread (gpuprobe-agent, detached, every
 * signal blocked) waits in poll for the collector to hang up. Then it
 * closes the socket and turns the launch ring into limbo (session.c,
 * gp_session_lost: the launch path keeps its pointer and cost, every
 * record is dropped and counted), and handshakes again: after 100 ms,
 * doubling up to 30 s, for as long as the process lives. The new HELLO
 * carries the records lost (never read by the old collector, plus those
 * attempted in limbo) and the number of earlier sessions (doc.go, the
 * reconnect extension); an old collector that refuses it (ERROR code 1)
 * is asked again without (the resource extension, if any, is dropped
 * first). gp_install then swaps the ring that launches read with one
 * release store.
 *
 * Modules loaded before the reconnect stay as they were loaded (patched
 * ones keep writing to the old session's regions, which stay mapped):
 * code cannot be re-patched once loaded, so device probes resume only for
 * modules loaded after the reconnect, and device maps (global kind 5) are
 * not made again. Launch records resume at once. GPUPROBE_RECONNECT=0
 * turns all of this off (one session per process, as before).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <time.h>

#include "gp.h"

#define GP_BACKOFF_MIN_MS 100u
#define GP_BACKOFF_MAX_MS 30000u

GP_HIDDEN uint32_t gp_reconnects;
static char gp_rc_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
static int gp_rc_fd = -1;  /* the socket the thread watches */
static int gp_rc_running;  /* this process has the thread */
static int gp_rc_ext = 1;  /* HELLO with the reconnect extension */

static void gp_sleep_ms(uint64_t ms)
{
	struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* gp_watch returns when the collector's end of fd is gone. The session
 * never gets unsolicited frames, so only a hang-up wakes it (POLLIN is not
 * asked for: PATCH answers are read by gp_agent_exchange). */
static void gp_watch(int fd)
{
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLRDHUP};
		int n = poll(&p, 1, -1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)))
			return;
	}
}

/* gp_rejoin handshakes until a collector takes the process back. */
static void gp_rejoin(uint64_t unread)
{
	uint64_t backoff = GP_BACKOFF_MIN_MS;
	for (;;) {
		gp_sleep_ms(backoff);
		struct gp_conn c;
		const char *why = "";
		uint64_t lost = unread + gp_limbo_dropped();
		uint32_t n = __atomic_load_n(&gp_reconnects, __ATOMIC_RELAXED);
		int err = gp_handshake(gp_rc_path, gp_timeout_ms, gp_rc_ext, lost, n + 1, &c, &why);
		if (err == 0) {
			__atomic_store_n(&gp_reconnects, n + 1, __ATOMIC_RELEASE);
			gp_install(&c);
			gp_ring_prefault();
			gp_sass_start((c.settings & GP_SET_SASS) != 0, c.max_rate, c.flush_us, c.settings);
			gp_rc_fd = c.fd;
			GP_TRACE("reconnected to %s (session %u of this process): %llu records lost meanwhile",
				 gp_rc_path, n + 2, (unsigned long long)lost);
			return;
		}
		if (c.refused == GP_ERROR_PROTOCOL && gp_res_ext) {
			gp_res_ext = 0; /* an older collector: the service is named by default */
			GP_TRACE("the collector refused the HELLO resource extension; trying without");
			continue;
		}
		if (c.refused == GP_ERROR_PROTOCOL && gp_rc_ext) {
			gp_rc_ext = 0; /* an older collector: the lost count goes unreported */
			GP_TRACE("the collector refused the reconnect HELLO; trying the plain one");
			continue;
		}
		if (backoff < GP_BACKOFF_MAX_MS)
			backoff = backoff * 2 > GP_BACKOFF_MAX_MS ? GP_BACKOFF_MAX_MS : backoff * 2;
		GP_TRACE("reconnect to %s failed (%s: %s); next try in %llu ms", gp_rc_path, why, strerror(-err),
			 (unsigned long long)backoff);
	}
}

static void *gp_rc_main(void *arg)
{
	(void)arg;
	for (;;) {
		gp_watch(gp_rc_fd);
		uint64_t unread = gp_session_lost();
		GP_TRACE("collector gone (%llu records unread); reconnecting in the background",
			 (unsigned long long)unread);
		gp_rejoin(unread);
	}
	return NULL;
}

/* gp_reconnect_start starts the thread at the first handshake of the
 * process (or of a fork child); fd is the session's socket. */
GP_HIDDEN void gp_reconnect_start(const char *path, int fd)
{
	const char *e = getenv("GPUPROBE_RECONNECT");
	if ((e && strcmp(e, "0") == 0) || gp_rc_running || strlen(path) >= sizeof gp_rc_path)
		return;
	memcpy(gp_rc_path, path, strlen(path) + 1);
	gp_rc_fd = fd;
	pthread_attr_t a;
	pthread_t t;
	sigset_t all, old;
	sigfillset(&all);
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread inherits it: no signal lands there */
	if (pthread_create(&t, &a, gp_rc_main, NULL) == 0) {
		gp_rc_running = 1;
		pthread_setname_np(t, "gpuprobe-agent");
	} else {
		GP_TRACE("no reconnect thread: a collector restart ends recording");
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&a);
}

/* gp_reconnect_forked: a fork child has no thread; its own first handshake
 * starts one. */
GP_HIDDEN void gp_reconnect_forked(void)
{
	gp_rc_running = 0;
	gp_rc_fd = -1;
}
