/*
 * app_spanctx.c - the span-context scenario of the test application: the
 * launches of a thread under gpuprobe_set_span_context, found as Python's
 * ctypes finds it (dlsym in the global scope: present only when the shim
 * is preloaded).
 *
 * Launch order on the main thread (f = vecAdd, grid.x numbers them):
 *   1  before any context
 *   2  3  under context A (trace a0.., span b0.., sampled)
 *   4  under context B (trace c0.., span d0.., not sampled), after a
 *      4096-byte HtoD copy under B (the first record after the change)
 *   5  after gpuprobe_clear_span_context
 * then a second thread launches 6 under context C (trace e0.., span f0..)
 * and 7 with none of its own.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "app.h"

typedef int (*set_fn)(const uint8_t *, const uint8_t *, uint8_t);
typedef void (*clear_fn)(void);

static set_fn set_ctx;
static clear_fn clear_ctx;
static void *sc_f;

/* ctx fills a trace id of bytes t, t+1, ... and a span id of s, s+1, ...
 * and sets them with flags. */
static void ctx(uint8_t t, uint8_t s, uint8_t flags)
{
	uint8_t tr[16], sp[8];
	for (int i = 0; i < 16; i++)
		tr[i] = (uint8_t)(t + i);
	for (int i = 0; i < 8; i++)
		sp[i] = (uint8_t)(s + i);
	if (set_ctx(tr, sp, flags) != 0) {
		fprintf(stderr, "app: gpuprobe_set_span_context refused a valid context\n");
		exit(1);
	}
}

static void launch(unsigned n)
{
	CHECK(A.launch(sc_f, n, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
}

static void *second_thread(void *arg)
{
	(void)arg;
	ctx(0xe0, 0xf0, 1);
	launch(6);
	clear_ctx();
	launch(7);
	return NULL;
}

int spanctx_scenario(void *f)
{
	sc_f = f;
	set_ctx = (set_fn)dlsym(RTLD_DEFAULT, "gpuprobe_set_span_context");
	clear_ctx = (clear_fn)dlsym(RTLD_DEFAULT, "gpuprobe_clear_span_context");
	if (set_ctx == NULL || clear_ctx == NULL) {
		/* Without the shim: the same launches, no contexts. */
		static char dev[4096], host[4096];
		for (unsigned i = 1; i <= 7; i++)
			launch(i);
		CHECK(A.memcpy_htod((u64)(uintptr_t)dev, host, sizeof host));
		printf("app: spanctx shim=0\n");
		return 0;
	}
	uint8_t zero[16] = {0};
	if (set_ctx(zero, zero, 1) != -1 || set_ctx(NULL, zero, 1) != -1) {
		fprintf(stderr, "app: gpuprobe_set_span_context took an all-zero or NULL id\n");
		return 1;
	}
	launch(1);
	ctx(0xa0, 0xb0, 1);
	launch(2);
	launch(3);
	ctx(0xc0, 0xd0, 0);
	static char dev[4096], host[4096];
	CHECK(A.memcpy_htod((u64)(uintptr_t)dev, host, sizeof host));
	launch(4);
	clear_ctx();
	launch(5);
	pthread_t t;
	pthread_create(&t, NULL, second_thread, NULL);
	pthread_join(t, NULL);
	printf("app: spanctx shim=1\n");
	return 0;
}

/* spanctx_bench_setup: with APP_SPANCTX=1 (and the shim loaded), the bench
 * scenario's launches all run under one span context. */
void spanctx_bench_setup(void)
{
	const char *e = getenv("APP_SPANCTX");
	set_fn set = (set_fn)dlsym(RTLD_DEFAULT, "gpuprobe_set_span_context");
	if (e == NULL || strcmp(e, "1") != 0 || set == NULL)
		return;
	set_ctx = set;
	ctx(0xa0, 0xb0, 1);
}

/* spanctx_slow: n launches of f under one span context (trace a0.., span
 * b0..), 10 ms apart, with a line after the first (for a collector
 * restart in between). */
int spanctx_slow(void *f, int n)
{
	sc_f = f;
	set_ctx = (set_fn)dlsym(RTLD_DEFAULT, "gpuprobe_set_span_context");
	if (set_ctx == NULL) {
		fprintf(stderr, "app: the shim is not loaded\n");
		return 1;
	}
	ctx(0xa0, 0xb0, 1);
	for (int i = 0; i < n; i++) {
		launch(1);
		usleep(10000);
		if (i == 0) {
			printf("app: first launch done\n");
			fflush(stdout);
		}
	}
	return 0;
}
