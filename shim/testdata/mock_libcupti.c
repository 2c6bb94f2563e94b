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
 * A cuGraphLaunch is one call to CUPTI (its callback, cbid 514, one
 * correlation id), its nodes' kernel records carry that id and a graph
 * node id; with the graph trace enabled (kind 51), as CUPTI documents it,
 * the nodes get no records and the launch one graph trace record
 * (CUpti_ActivityGraphTrace2) from its first node's start to its last's end.
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
static int kernels_on, graphs_on, subscribed, launch_cb_on;
static __thread int in_graph; /* a cuGraphLaunch's nodes are running */
static __thread uint32_t graph_corr;
static __thread uint64_t graph_start, graph_end, graph_node;
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
static void callback(cb_fn cb, void *ud, uint32_t site, uint32_t c, uint32_t cbid)
{
	uint8_t d[72] = {0};
	memcpy(d, &site, 4);
	memcpy(d + 64, &c, 4);
	cb(ud, 1, cbid, d);
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
	if (in_graph && !cdp)
		memcpy(r + 144, &graph_node, 8);
	snprintf(names[nq], sizeof names[nq], "%s", name);
	const char *np = names[nq];
	memcpy(r + (cdp ? 136 : 104), &np, sizeof np);
	nq++;
}

/* on_graph: a cuGraphLaunch begins (begin 1) or ends: its API callbacks
 * and, with the graph trace on, its record. */
static void on_graph(int begin)
{
	pthread_mutex_lock(&mu);
	cb_fn cb = subscribed && launch_cb_on ? sub_cb : NULL;
	void *ud = sub_ud;
	if (begin)
		graph_corr = ++corr, graph_start = graph_end = 0;
	else if (graphs_on && nq < MAXQ) {
		uint8_t *r = queue[nq];
		uint32_t kind = 51;
		memset(r, 0, REC);
		memcpy(r, &kind, 4);
		memcpy(r + 4, &graph_corr, 4);
		memcpy(r + 8, &graph_start, 8);
		memcpy(r + 16, &graph_end, 8);
		names[nq][0] = 0;
		nq++;
	}
	pthread_mutex_unlock(&mu);
	if (cb && begin)
		callback(cb, ud, 0, graph_corr, 514);
	in_graph = begin;
	if (cb && !begin)
		callback(cb, ud, 1, graph_corr, 514);
}

static void on_launch(const char *name)
{
	if (in_graph) {
		/* A node: no callback of its own, the launch's correlation id. */
		pthread_mutex_lock(&mu);
		uint64_t start = now(), end = start + 1000;
		if (graph_start == 0)
			graph_start = start;
		graph_end = end, graph_node++;
		if (!graphs_on)
			queue_record(10, name, graph_corr, start, end);
		pthread_mutex_unlock(&mu);
		return;
	}
	pthread_mutex_lock(&mu);
	uint32_t c = ++corr, inner = strstr(name, "nested") ? ++corr : c;
	cb_fn cb = subscribed && launch_cb_on ? sub_cb : NULL;
	void *ud = sub_ud;
	pthread_mutex_unlock(&mu);
	if (cb)
		callback(cb, ud, 0, c, 307); /* API entry */
	if (cb && inner != c)
		callback(cb, ud, 0, inner, 307); /* the nested entry point's */
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
		callback(cb, ud, 1, inner, 307);
	if (cb)
		callback(cb, ud, 1, c, 307); /* API exit */
}

__attribute__((constructor)) static void init(void)
{
	void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	void (*set)(void (*)(const char *)) = cuda ? (void (*)(void (*)(const char *)))dlsym(cuda, "mock_cuda_set_launch_hook") : NULL;
	if (set)
		set(on_launch);
	void (*gset)(void (*)(int)) = cuda ? (void (*)(void (*)(int)))dlsym(cuda, "mock_cuda_set_graph_hook") : NULL;
	if (gset)
		gset(on_graph);
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
	if (kind == 51)
		graphs_on = 1;
	return 0;
}

EXPORT int cuptiActivityDisable(uint32_t kind)
{
	if (kind == 10)
		kernels_on = 0;
	if (kind == 51)
		graphs_on = 0;
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
		if (kind != 51)
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
	subscribed = 0, launch_cb_on = 0, sub_cb = NULL, kernels_on = 0, graphs_on = 0, nq = 0;
	req = NULL, done = NULL;
	pthread_mutex_unlock(&mu);
	return 0;
}
