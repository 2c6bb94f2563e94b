/*
 * mock_libcupti.c - a MOCK of libcupti for the shim's tests (CI has no GPU):
 * the activity and callback entry points cupti.c uses, with the record and
 * callback-data layouts of CUDA 13's CUPTI (CUpti_ActivityKernel9,
 * CUpti_CallbackData). The mock driver (mock_libcuda.c) tells it of every
 * kernel it "runs": the subscriber's launch callback gets a correlation id
 * at API exit and a kernel record (start = the mock's clock, 1 us long) is
 * queued for the next flush.
 *
 * Kernels by name, as the real CUPTI was seen or documented to report
 * launch kinds: a name with "nested" is launched through a second,
 * nested entry point (the callback comes twice, the record carries the
 * inner call's correlation id); "untimed" gets 0 timestamps; "cdp"
 * launches two children from the device (CDP kernel records, kind 18,
 * with the host launch's correlation id).
 *
 * MOCK_CUPTI_FAIL=enable makes cuptiActivityEnable fail (fail-open test).
 * MOCK_CUPTI_FLUSH=forced hands records over only in a forced flush (as if
 * every kernel ran until then).
 * MOCK_CUPTI_FLUSH=full: an unforced flush hands over a buffer only once
 * the records queued fill it (as if a kernel of the buffer were always
 * still running, as in a stream kept busy); a forced flush, everything.
 * MOCK_CUPTI_FLUSH_HOLD=PATH: the first unforced flush creates PATH, then
 * takes a second to return (a periodic flush in progress when the
 * application exits: the app waits for PATH).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))
#define REC 208 /* sizeof(CUpti_ActivityKernel9) */
#define MAXQ 65536

typedef void (*buf_req_fn)(uint8_t **, size_t *, size_t *);
typedef void (*buf_done_fn)(void *, uint32_t, uint8_t *, size_t, size_t);
typedef void (*cb_fn)(void *, uint32_t, uint32_t, const void *);

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static buf_req_fn req;
static buf_done_fn done;
static uint64_t (*ts_fn)(void);
static int kernels_on, subscribed, launch_cb_on;
static cb_fn sub_cb;
static void *sub_ud;
static uint32_t corr;
static uint8_t queue[MAXQ][REC];
static char names[MAXQ][256];
static uint32_t nq;
static int sub_token;

static uint64_t now(void)
{
	if (ts_fn)
		return ts_fn();
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t); /* CUPTI's own clock is wall time */
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* What the driver's launch entry points call (a real CUPTI hooks them). */
static void callback(cb_fn cb, void *ud, uint32_t site, uint32_t c)
{
	uint8_t d[72] = {0};
	memcpy(d, &site, 4);
	memcpy(d + 64, &c, 4);
	cb(ud, 1, 307, d);
}

/* queue_record queues one kernel record (mu held): CONCURRENT_KERNEL
 * (CUpti_ActivityKernel9's offsets) or CDP_KERNEL (CUpti_ActivityCdpKernel's). */
static void queue_record(uint32_t kind, const char *name, uint32_t c, uint64_t start, uint64_t end)
{
	if (!kernels_on || nq >= MAXQ)
		return;
	uint8_t *r = queue[nq];
	int cdp = kind == 18;
	memset(r, 0, REC);
	memcpy(r, &kind, 4);
	memcpy(r + (cdp ? 8 : 16), &start, 8);
	memcpy(r + (cdp ? 16 : 24), &end, 8);
	memcpy(r + (cdp ? 76 : 92), &c, 4);
	snprintf(names[nq], sizeof names[nq], "%s", name);
	const char *np = names[nq];
	memcpy(r + (cdp ? 136 : 104), &np, sizeof np);
	nq++;
}

static void on_launch(const char *name)
{
	pthread_mutex_lock(&mu);
	uint32_t c = ++corr, inner = strstr(name, "nested") ? ++corr : c;
	cb_fn cb = subscribed && launch_cb_on ? sub_cb : NULL;
	void *ud = sub_ud;
	pthread_mutex_unlock(&mu);
	if (cb)
		callback(cb, ud, 0, c); /* API entry */
	if (cb && inner != c)
		callback(cb, ud, 0, inner); /* the nested entry point's */
	pthread_mutex_lock(&mu);
	uint64_t start = now(), end = start + 1000;
	if (strstr(name, "untimed"))
		start = end = 0;
	queue_record(10, name, inner, start, end);
	if (strstr(name, "cdp"))
		for (int i = 0; i < 2; i++)
			queue_record(18, "_Z9cdp_childv", c, start + 100 + 300 * (uint64_t)i, start + 300 + 300 * (uint64_t)i);
	pthread_mutex_unlock(&mu);
	if (cb && inner != c)
		callback(cb, ud, 1, inner);
	if (cb)
		callback(cb, ud, 1, c); /* API exit */
}

__attribute__((constructor)) static void init(void)
{
	void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	void (*set)(void (*)(const char *)) = cuda ? (void (*)(void (*)(const char *)))dlsym(cuda, "mock_cuda_set_launch_hook") : NULL;
	if (set)
		set(on_launch);
}

EXPORT int cuptiGetVersion(uint32_t *v) { *v = 130001; return 0; }
EXPORT int cuptiActivityRegisterCallbacks(buf_req_fn r, buf_done_fn d) { req = r, done = d; return 0; }
EXPORT int cuptiActivityRegisterTimestampCallback(uint64_t (*f)(void)) { ts_fn = f; return 0; }
EXPORT int cuptiGetTimestamp(uint64_t *t) { *t = now(); return 0; }
EXPORT int cuptiActivityGetNumDroppedRecords(void *c, uint32_t s, size_t *n) { (void)c, (void)s; *n = 0; return 0; }

EXPORT int cuptiActivityEnable(uint32_t kind)
{
	const char *f = getenv("MOCK_CUPTI_FAIL");
	if (f && strcmp(f, "enable") == 0)
		return 1;
	if (kind == 10)
		kernels_on = 1;
	return 0;
}

EXPORT int cuptiActivityDisable(uint32_t kind)
{
	if (kind == 10)
		kernels_on = 0;
	return 0;
}

EXPORT int cuptiActivityFlushAll(uint32_t flags)
{
	const char *only = getenv("MOCK_CUPTI_FLUSH"), *hold = getenv("MOCK_CUPTI_FLUSH_HOLD");
	static int held;
	if (hold && hold[0] && (flags & 1) == 0 && !__atomic_exchange_n(&held, 1, __ATOMIC_ACQ_REL)) {
		FILE *fp = fopen(hold, "w");
		if (fp)
			fclose(fp);
		struct timespec t = {1, 0};
		nanosleep(&t, NULL);
	}
	if (only && strcmp(only, "forced") == 0 && (flags & 1) == 0)
		return 0;
	int full = only && strcmp(only, "full") == 0 && (flags & 1) == 0;
	static uint8_t *cur; /* MOCK_CUPTI_FLUSH=full: the buffer being filled */
	static size_t cur_size;
	pthread_mutex_lock(&mu);
	uint32_t i = 0;
	while (i < nq && req && done) {
		uint8_t *buf = cur;
		size_t size = cur_size, max = 0;
		if (buf == NULL)
			req(&buf, &size, &max);
		if (buf == NULL)
			break;
		cur = NULL;
		if (full && (size_t)(nq - i) * REC + REC <= size) {
			cur = buf, cur_size = size; /* not full yet: kept, records queued */
			break;
		}
		size_t valid = 0;
		while (i < nq && valid + REC <= size) {
			memcpy(buf + valid, queue[i], REC);
			valid += REC, i++;
		}
		done(NULL, 0, buf, size, valid);
	}
	memmove(queue, queue[i], (size_t)(nq - i) * REC);
	memmove(names, names[i], (size_t)(nq - i) * 256);
	for (uint32_t j = 0; j < nq - i; j++) { /* the names moved: point the records at them again */
		const char *np = names[j];
		uint32_t kind;
		memcpy(&kind, queue[j], 4);
		memcpy(queue[j] + (kind == 18 ? 136 : 104), &np, sizeof np);
	}
	nq -= i;
	pthread_mutex_unlock(&mu);
	return 0;
}

EXPORT int cuptiActivityGetNextRecord(uint8_t *buf, size_t valid, void **rec)
{
	uint8_t *r = *rec == NULL ? buf : (uint8_t *)*rec + REC;
	if (r + REC > buf + valid)
		return 3; /* CUPTI_ERROR_MAX_LIMIT_REACHED's place: no more */
	*rec = r;
	return 0;
}

EXPORT int cuptiSubscribe(void **sub, cb_fn cb, void *ud)
{
	if (subscribed)
		return 39; /* one subscriber at a time, as CUPTI */
	subscribed = 1, sub_cb = cb, sub_ud = ud;
	*sub = &sub_token;
	return 0;
}

EXPORT int cuptiUnsubscribe(void *sub)
{
	(void)sub;
	subscribed = 0, launch_cb_on = 0, sub_cb = NULL;
	return 0;
}

EXPORT int cuptiEnableCallback(uint32_t on, void *sub, uint32_t domain, uint32_t cbid)
{
	(void)sub, (void)domain;
	if (cbid == 307)
		launch_cb_on = on;
	return 0;
}

/* Detaches: no more callbacks or records (what is queued is dropped). */
EXPORT int cuptiFinalize(void)
{
	pthread_mutex_lock(&mu);
	subscribed = 0, launch_cb_on = 0, sub_cb = NULL, kernels_on = 0, nq = 0;
	req = NULL, done = NULL;
	pthread_mutex_unlock(&mu);
	return 0;
}
