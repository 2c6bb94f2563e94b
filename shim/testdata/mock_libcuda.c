/*
 * mock_libcuda.c - a MOCK of the CUDA driver (libcuda.so.1) for the shim's
 * tests on machines without a GPU. It is named and built as libcuda.so.1 in
 * a temporary directory and found through LD_LIBRARY_PATH. It runs no
 * kernels: modules, libraries, kernels, functions and graphs are host
 * objects, and every launch only updates counters that the test app prints
 * (mock_report), so that an application's output with and without the shim
 * can be compared.
 *
 * Like the real driver it exports the cu* entry points and answers
 * cuGetProcAddress(_v2) by (name, flags, version), with per-thread-stream
 * variants for flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM. Two
 * deliberate differences exercise the shim's fallbacks:
 *   - cuGetProcAddress("cuLaunchKernelEx") returns an internal function,
 *     not the exported symbol (the shim must still wrap it, by name);
 *   - cuGetProcAddress("cuCtxSynchronize", version >= 13000) returns a
 *     function taking a CUcontext (like CUDA 13's cuCtxSynchronize_v2),
 *     which the shim must not wrap with the void signature.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long cuuint64_t;

#define EXPORT __attribute__((visibility("default")))

#define MOCK_DEVICES 8

struct mock_fn {
	uint32_t magic; /* 'FUNC' or 'KERN' */
	uint32_t id;
	char *name; /* any length, as the driver's (C++ kernel names reach kilobytes) */
	struct mock_fn *next;
	struct mock_fn *func[MOCK_DEVICES]; /* KERN: its CUfunction in each device's context */
	int nparams;          /* .param count of its PTX .entry (-1: unknown) */
};
struct mock_global {
	char name[128];
	uint64_t value; /* the global's "device" storage */
	struct mock_global *next;
};
struct mock_mod {
	uint32_t magic; /* 'MODU' */
	struct mock_fn *fns;
	char *ptx; /* a PTX image's text */
	struct mock_global *globals;
};
#define MOCK_NODE_PARAMS 8
struct mock_node {
	struct mock_fn *f;
	unsigned grid[3], block[3], shmem;
	/* Like the driver, a node keeps copies of its parameter values (8
	 * bytes each here: the test kernels take pointers and the u64 id). */
	int nparams;
	uint64_t values[MOCK_NODE_PARAMS];
	void *ptrs[MOCK_NODE_PARAMS];
};
struct mock_graph {
	int n;
	struct mock_node nodes[16];
};

static uint32_t next_id = 1;
static uint64_t n_launch, n_ptsz, n_ex, n_coop, n_graph, n_sync, n_memcpy, checksum;
static int inited;

#define ADD(v, x) __atomic_fetch_add(&(v), (x), __ATOMIC_RELAXED)

static void count_launch(struct mock_fn *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
			 unsigned bz, int ptsz)
{
	ADD(n_launch, 1);
	if (ptsz)
		ADD(n_ptsz, 1);
	ADD(checksum, (uint64_t)(f ? f->id : 0) * 1000003u + (uint64_t)gx * gy * gz * bx * by * bz);
}

static struct mock_fn *as_fn(void *p)
{
	struct mock_fn *f = p;
	if (f == NULL)
		return NULL;
	if (f->magic == 0x4b45524e) /* a CUkernel launched as a CUfunction */
		return f;
	return f->magic == 0x46554e43 ? f : NULL;
}

static int prim_ref; /* the primary context's reference count (see cuDevicePrimaryCtxRetain) */
EXPORT CUresult cuInit(unsigned flags)
{
	(void)flags;
	if (!inited)
		prim_ref = 1; /* as a runtime retains it */
	inited = 1;
	return 0;
}

EXPORT CUresult cuDriverGetVersion(int *v)
{
	*v = 13000;
	return 0;
}

static __thread int cur_device;
EXPORT void mock_set_device(int d) { cur_device = d; }

/* The current device: mock_set_device's, else MOCK_CURRENT_DEVICE, else 0. */
EXPORT CUresult cuCtxGetDevice(int *d)
{
	static int env = -1;
	int e = __atomic_load_n(&env, __ATOMIC_RELAXED);
	if (e < 0) {
		const char *s = getenv("MOCK_CURRENT_DEVICE");
		e = s && s[0] ? atoi(s) : 0;
		__atomic_store_n(&env, e, __ATOMIC_RELAXED);
	}
	*d = cur_device ? cur_device : e;
	return 0;
}

/* Devices the process sees: MOCK_DEVICE_COUNT, default 1; a negative count
 * fails like a driver not initialised yet (CUDA_ERROR_NOT_INITIALIZED). */
EXPORT CUresult cuDeviceGetCount(int *n)
{
	const char *e = getenv("MOCK_DEVICE_COUNT");
	int c = e && e[0] ? atoi(e) : 1;
	if (c < 0)
		return 3;
	*n = c;
	return 0;
}

/* ptx_nparams counts the .param entries of .entry name in a PTX text. */
static int ptx_nparams(const char *ptx, const char *name)
{
	char key[300];
	snprintf(key, sizeof key, ".entry %s(", name);
	const char *p = ptx ? strstr(ptx, key) : NULL;
	if (p == NULL)
		return -1;
	const char *end = strchr(p, ')');
	int n = 0;
	for (p += strlen(key); end && (p = strstr(p, ".param")) != NULL && p < end; p += 6)
		n++;
	return n;
}

static struct mock_mod *new_mod(void)
{
	struct mock_mod *m = calloc(1, sizeof *m);
	m->magic = 0x4d4f4455;
	return m;
}

static struct mock_fn *mod_fn(struct mock_mod *m, const char *name, uint32_t magic)
{
	for (struct mock_fn *f = m->fns; f; f = f->next)
		if (f->magic == magic && strcmp(f->name, name) == 0)
			return f;
	struct mock_fn *f = calloc(1, sizeof *f);
	f->magic = magic;
	f->id = next_id++;
	f->nparams = ptx_nparams(m->ptx, name);
	f->name = strdup(name);
	f->next = m->fns;
	m->fns = f;
	return f;
}

/* is_ptx: the image is PTX text (starts with a comment or a directive). */
static int is_ptx(const char *p)
{
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		p++;
	return *p == '/' || *p == '.';
}

/* The last launch's kernelParams and extra, for the test app. */
static void **last_params, **last_extra;
EXPORT void mock_last_launch(void ***params, void ***extra)
{
	*params = last_params;
	*extra = last_extra;
}

/* The driver's JIT, for the shim's patch thread: a PTX load whose text
 * holds MOCK_JIT_MATCH is a JIT target. MOCK_JIT_GATE=PATH: a target's load
 * waits until PATH exists (a slow JIT, up to 30 s); MOCK_JIT_FAIL=1: it
 * fails (CUDA_ERROR_INVALID_PTX). mock_jit_done counts finished targets. */
static int jit_done;
EXPORT int mock_jit_done(void) { return __atomic_load_n(&jit_done, __ATOMIC_ACQUIRE); }
static CUresult mock_jit(const char *img)
{
	const char *match = getenv("MOCK_JIT_MATCH"), *gate = getenv("MOCK_JIT_GATE");
	const char *fail = getenv("MOCK_JIT_FAIL");
	if (match == NULL || match[0] == 0 || strstr(img, match) == NULL)
		return 0;
	for (int i = 0; gate && gate[0] && access(gate, F_OK) != 0 && i < 30000; i++)
		usleep(1000);
	/* MOCK_JIT_READY=DIR with MOCK_JIT_PEERS=N: each process's JIT marks
	 * itself in DIR and waits until N processes are in theirs (two
	 * processes filling the shim's cache at once). */
	const char *ready = getenv("MOCK_JIT_READY"), *peers = getenv("MOCK_JIT_PEERS");
	if (ready && ready[0] && peers && peers[0]) {
		char me[4096];
		snprintf(me, sizeof me, "%s/%d", ready, (int)getpid());
		FILE *f = fopen(me, "w");
		if (f)
			fclose(f);
		for (int i = 0, n = 0; n < atoi(peers) && i < 30000; i++) {
			DIR *d = opendir(ready);
			n = 0;
			for (struct dirent *e; d && (e = readdir(d)) != NULL;)
				n += e->d_name[0] != '.';
			if (d)
				closedir(d);
			if (n < atoi(peers))
				usleep(1000);
		}
	}
	CUresult r = fail && fail[0] == '1' ? 218 : 0;
	fprintf(stderr, "mock: jit target r=%d\n", r);
	__atomic_fetch_add(&jit_done, 1, __ATOMIC_ACQ_REL);
	return r;
}

/* The mock's linker, for the shim's cache of compiled images (cache.c):
 * cuLinkAddData of PTX runs mock_jit (the JIT, counted and logged like a
 * PTX load's), and the "cubin" cuLinkComplete returns is MOCK_CUBIN and
 * the PTX, which cuModuleLoadData loads as that PTX without a JIT. */
#define MOCK_CUBIN "MOCKCUBIN\n"
struct mock_link {
	char *out;
};
EXPORT CUresult cuLinkCreate_v2(unsigned n, void *opts, void *vals, void **state)
{
	(void)n, (void)opts, (void)vals;
	*state = calloc(1, sizeof(struct mock_link));
	return *state ? 0 : 2;
}
EXPORT CUresult cuLinkAddData_v2(void *state, int type, void *data, size_t size, const char *name, unsigned n,
				 void *opts, void *vals)
{
	(void)name, (void)n, (void)opts, (void)vals;
	struct mock_link *l = state;
	if (l == NULL || type != 1 /* CU_JIT_INPUT_PTX */ || data == NULL || size == 0 || l->out != NULL)
		return 1;
	CUresult j = mock_jit(data);
	if (j != 0)
		return j;
	if (strstr(data, ".version") == NULL)
		return 218;
	size_t k = strnlen(data, size);
	l->out = malloc(sizeof MOCK_CUBIN + k);
	memcpy(l->out, MOCK_CUBIN, sizeof MOCK_CUBIN - 1);
	memcpy(l->out + sizeof MOCK_CUBIN - 1, data, k);
	l->out[sizeof MOCK_CUBIN - 1 + k] = 0;
	return 0;
}
EXPORT CUresult cuLinkComplete(void *state, void **out, size_t *size)
{
	struct mock_link *l = state;
	if (l == NULL || l->out == NULL)
		return 1;
	*out = l->out;
	*size = strlen(l->out) + 1;
	return 0;
}
EXPORT CUresult cuLinkDestroy(void *state)
{
	struct mock_link *l = state;
	if (l != NULL)
		free(l->out);
	free(l);
	return 0;
}

EXPORT CUresult cuModuleLoadData(void **m, const void *img)
{
	if (!inited || img == NULL)
		return inited ? 1 : 3;
	if (strncmp(img, MOCK_CUBIN, sizeof MOCK_CUBIN - 1) == 0) {
		/* A mock cubin: compiled already. */
		fprintf(stderr, "mock: cubin load\n");
		img = (const char *)img + sizeof MOCK_CUBIN - 1;
		if (!is_ptx(img) || strstr(img, ".version") == NULL)
			return 200; /* CUDA_ERROR_INVALID_IMAGE */
		struct mock_mod *mod = new_mod();
		mod->ptx = strdup(img);
		*m = mod;
		return 0;
	}
	if (is_ptx(img)) {
		CUresult j = mock_jit(img);
		if (j != 0)
			return j;
	}
	struct mock_mod *mod = new_mod();
	if (is_ptx(img)) {
		/* A real driver would fail to compile broken PTX: the mock
		 * refuses PTX without a .version directive. */
		if (strstr(img, ".version") == NULL) {
			free(mod);
			return 218; /* CUDA_ERROR_INVALID_PTX */
		}
		mod->ptx = strdup(img);
		/* MOCK_IMAGE_OUT: where the last loaded PTX is written. */
		const char *out = getenv("MOCK_IMAGE_OUT");
		FILE *f = out && out[0] ? fopen(out, "w") : NULL;
		if (f) {
			fputs(img, f);
			fclose(f);
		}
	}
	*m = mod;
	return 0;
}

/* File loads read the file like the driver: a missing or unreadable file
 * is CUDA_ERROR_FILE_NOT_FOUND (301), and its bytes are loaded like
 * cuModuleLoadData's image (so MOCK_IMAGE_OUT gets a PTX file's text). Each
 * is logged to stderr ("mock: cuModuleLoad path=... r=..."), so a test can
 * tell a file load from the data load of its bytes. */
static CUresult load_file(void **m, const char *path)
{
	if (!inited)
		return 3;
	FILE *f = path ? fopen(path, "rb") : NULL;
	if (f == NULL)
		return 301; /* CUDA_ERROR_FILE_NOT_FOUND */
	size_t cap = 1 << 16, n = 0;
	char *buf = malloc(cap + 1);
	for (size_t r; (r = fread(buf + n, 1, cap - n, f)) > 0;) {
		n += r;
		if (n == cap)
			buf = realloc(buf, (cap *= 2) + 1);
	}
	fclose(f);
	buf[n] = 0;
	CUresult r = n ? cuModuleLoadData(m, buf) : 200; /* CUDA_ERROR_INVALID_IMAGE */
	free(buf);
	return r;
}
EXPORT CUresult cuModuleLoad(void **m, const char *path)
{
	CUresult r = load_file(m, path);
	fprintf(stderr, "mock: cuModuleLoad path=%s r=%d\n", path ? path : "(null)", r);
	return r;
}

/* The JIT and library options a library load got, for the test: the count
 * and the first of each. File loads are always logged, data loads only
 * when they have options. */
static void log_opts(const char *api, const char *path, const int *jo, void **jv, unsigned nj, const int *lo,
		     void **lv, unsigned nl, CUresult r)
{
	fprintf(stderr, "mock: %s%s%s njopt=%u", api, path ? " path=" : "", path ? path : "", nj);
	if (nj && jo && jv)
		fprintf(stderr, " jopt0=%d jval0=%p", jo[0], jv[0]);
	fprintf(stderr, " nlopt=%u", nl);
	if (nl && lo && lv)
		fprintf(stderr, " lopt0=%d lval0=%p", lo[0], lv[0]);
	fprintf(stderr, " r=%d\n", r);
}

EXPORT CUresult cuModuleUnload(void *m)
{
	struct mock_mod *mod = m;
	if (mod == NULL || mod->magic != 0x4d4f4455)
		return 400;
	if (getenv("MOCK_JIT_MATCH") != NULL)
		fprintf(stderr, "mock: unload %p\n", m);
	mod->magic = 0; /* leaked: handles into it may still be printed */
	return 0;
}
EXPORT CUresult cuLibraryUnload(void *l) { return cuModuleUnload(l); }

/* Module globals: a PTX module has the .global variables its text
 * declares (found by name); MOCK_FAIL_GLOBAL makes every lookup fail. */
EXPORT CUresult cuModuleGetGlobal_v2(uint64_t *dptr, size_t *bytes, void *m, const char *name)
{
	struct mock_mod *mod = m;
	if (mod == NULL || mod->magic != 0x4d4f4455 || name == NULL)
		return 400;
	const char *fail = getenv("MOCK_FAIL_GLOBAL");
	if ((fail && fail[0]) || mod->ptx == NULL)
		return 500;
	char decl[160];
	snprintf(decl, sizeof decl, ".u64 %s", name);
	const char *at = strstr(mod->ptx, decl);
	if (at == NULL) /* the module declares no such .u64 */
		return 500;
	struct mock_global *g;
	for (g = mod->globals; g; g = g->next)
		if (strcmp(g->name, name) == 0)
			break;
	if (g == NULL) {
		g = calloc(1, sizeof *g);
		snprintf(g->name, sizeof g->name, "%s", name);
		g->next = mod->globals;
		mod->globals = g;
	}
	*dptr = (uint64_t)(uintptr_t)&g->value;
	*bytes = 8;
	return 0;
}
EXPORT CUresult cuLibraryGetGlobal(uint64_t *dptr, size_t *bytes, void *lib, const char *name)
{
	return cuModuleGetGlobal_v2(dptr, bytes, lib, name);
}

/* mock_report_globals prints the globals of a module, sorted by the order
 * they were set (newest first). */
EXPORT void mock_report_globals(FILE *out, void *m)
{
	struct mock_mod *mod = m;
	for (struct mock_global *g = mod ? mod->globals : NULL; g; g = g->next)
		fprintf(out, "mock: global %s=%#llx\n", g->name, (unsigned long long)g->value);
}

/* Capture interaction modes (cuThreadExchangeStreamCaptureMode): while a
 * capture is open, a "potentially unsafe" call (allocation, synchronous
 * copy, stream creation and synchronisation, context switch, asynchronous
 * copy) from a thread whose mode forbids it fails with
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture, whose
 * cuStreamEndCapture then fails with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
 * as the real driver does. Modes: 0 global (every thread's default), 1
 * thread-local, 2 relaxed. */
static void *cap_graph_open; /* atomic: the open capture's graph, or NULL */
static int cap_mode, cap_invalid;
static pthread_t cap_thread;
static __thread int thr_mode;
EXPORT CUresult cuThreadExchangeStreamCaptureMode(int *mode)
{
	if (mode == NULL || *mode < 0 || *mode > 2)
		return 1;
	int old = thr_mode;
	thr_mode = *mode, *mode = old;
	return 0;
}
/* capture_unsafe: nonzero (the error) when the calling thread may not make
 * a potentially unsafe call now; the open capture is then invalidated. */
static CUresult capture_unsafe(const char *what)
{
	if (__atomic_load_n(&cap_graph_open, __ATOMIC_ACQUIRE) == NULL || thr_mode == 2)
		return 0;
	int own = pthread_equal(cap_thread, pthread_self());
	if ((own && cap_mode != 2) || (!own && thr_mode == 0 && cap_mode == 0)) {
		__atomic_store_n(&cap_invalid, 1, __ATOMIC_RELEASE);
		fprintf(stderr, "mock: %s during a capture: unsafe, capture invalidated\n", what);
		return 900; /* CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED */
	}
	return 0;
}

/* Device memory: cuMemAlloc hands out host memory (so memset and copies
 * work); cuMemHostRegister + cuMemHostGetDevicePointer map a host range to
 * host + MOCK_DEVMAP_OFFSET. Each is printed to stderr for the test. */
#define MOCK_DEVMAP_OFFSET 0x100000000000ull
EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, int dev)
{
	(void)dev;
	if (attr == 75) /* compute capability major */
		*v = 9;
	else if (attr == 76) /* minor */
		*v = 0;
	else if (attr == 16) /* multiprocessors */
		*v = 132;
	else
		return 1;
	return 0;
}

/* Device identities: device d's UUID is 16 bytes of 0x10 + d (its GPU's);
 * with MOCK_MIG set, cuDeviceGetUuid_v2 gives a MIG instance's own, 16
 * bytes of 0xa0 + d, and the name says MIG as the driver's does. */
EXPORT CUresult cuDeviceGet(int *dev, int ordinal)
{
	*dev = ordinal;
	return 0;
}
EXPORT CUresult cuDeviceGetUuid(unsigned char *uuid, int dev)
{
	memset(uuid, 0x10 + dev, 16);
	return 0;
}
EXPORT CUresult cuDeviceGetUuid_v2(unsigned char *uuid, int dev)
{
	const char *mig = getenv("MOCK_MIG");
	memset(uuid, (mig && mig[0] ? 0xa0 : 0x10) + dev, 16);
	return 0;
}
EXPORT CUresult cuDeviceGetName(char *name, int len, int dev)
{
	const char *mig = getenv("MOCK_MIG");
	snprintf(name, (size_t)len, "Mock H100 %d%s", dev, mig && mig[0] ? " MIG 1g.10gb" : "");
	return 0;
}
static struct {
	void *host;
	size_t size;
} hostregs[64];
static int nhostregs;
/* The log line carries the range's first u64 (first=), so a test can tell
 * which memory was registered; MOCK_FAIL_HOSTREG_FIRST=<value> makes the
 * registration of a range whose first u64 is that value fail. */
EXPORT CUresult cuMemHostRegister_v2(void *p, size_t size, unsigned flags)
{
	if (capture_unsafe("cuMemHostRegister"))
		return 900;
	if (p == NULL || size < 8 || !(flags & 2) || nhostregs == 64)
		return 1;
	for (int i = 0; i < nhostregs; i++)
		if (hostregs[i].host == p)
			return 712; /* CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED */
	unsigned long long first = *(volatile uint64_t *)p;
	const char *fail = getenv("MOCK_FAIL_HOSTREG_FIRST");
	if (fail && fail[0] && strtoull(fail, NULL, 0) == first) {
		fprintf(stderr, "mock: hostreg failed size=%zu first=%#llx\n", size, first);
		return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
	}
	hostregs[nhostregs].host = p, hostregs[nhostregs++].size = size;
	fprintf(stderr, "mock: hostreg dev=%#llx size=%zu first=%#llx\n",
		(unsigned long long)((uintptr_t)p + MOCK_DEVMAP_OFFSET), size, first);
	return 0;
}
EXPORT CUresult cuMemHostGetDevicePointer_v2(uint64_t *d, void *p, unsigned flags)
{
	(void)flags;
	for (int i = 0; i < nhostregs; i++)
		if ((char *)p >= (char *)hostregs[i].host && (char *)p < (char *)hostregs[i].host + hostregs[i].size) {
			*d = (uintptr_t)p + MOCK_DEVMAP_OFFSET;
			return 0;
		}
	return 1;
}
/* Live allocations, scrubbed when their context is destroyed. */
static struct {
	void *p;
	size_t size;
} allocs[256];
static int nallocs;
static void alloc_add(void *p, size_t size)
{
	if (nallocs < 256)
		allocs[nallocs].p = p, allocs[nallocs++].size = size;
}
static void alloc_del(void *p)
{
	for (int i = 0; i < nallocs; i++)
		if (allocs[i].p == p) {
			allocs[i] = allocs[--nallocs];
			return;
		}
}
/* MOCK_FAIL_ALLOC=1: every allocation fails (CUDA_ERROR_OUT_OF_MEMORY). */
EXPORT CUresult cuMemAlloc_v2(uint64_t *d, size_t size)
{
	if (capture_unsafe("cuMemAlloc"))
		return 900;
	const char *fail = getenv("MOCK_FAIL_ALLOC");
	if (fail && strcmp(fail, "1") == 0) {
		fprintf(stderr, "mock: alloc failed size=%zu\n", size);
		return 2;
	}
	void *p = malloc(size ? size : 1);
	memset(p, 0xAB, size); /* like uninitialised device memory */
	alloc_add(p, size);
	*d = (uint64_t)(uintptr_t)p;
	fprintf(stderr, "mock: alloc dev=%#llx size=%zu\n", (unsigned long long)*d, size);
	return 0;
}
EXPORT CUresult cuMemFree_v2(uint64_t d)
{
	if (capture_unsafe("cuMemFree"))
		return 900;
	fprintf(stderr, "mock: free dev=%#llx\n", (unsigned long long)d);
	alloc_del((void *)(uintptr_t)d);
	free((void *)(uintptr_t)d);
	return 0;
}
EXPORT CUresult cuMemsetD8_v2(uint64_t d, unsigned char v, size_t n)
{
	if (capture_unsafe("cuMemsetD8"))
		return 900;
	memset((void *)(uintptr_t)d, v, n);
	return 0;
}
EXPORT CUresult cuModuleLoadDataEx(void **m, const void *img, unsigned n, void *o, void **v)
{
	(void)n, (void)o, (void)v;
	return cuModuleLoadData(m, img);
}
EXPORT CUresult cuModuleLoadFatBinary(void **m, const void *img) { return cuModuleLoadData(m, img); }

EXPORT CUresult cuModuleGetFunction(void **f, void *m, const char *name)
{
	struct mock_mod *mod = m;
	if (mod == NULL || mod->magic != 0x4d4f4455 || name == NULL)
		return 400; /* CUDA_ERROR_INVALID_HANDLE */
	*f = mod_fn(mod, name, 0x46554e43);
	return 0;
}

/* mock_quiet_function: a function handle obtained behind the shim's back
 * (no cu* entry point), so the shim names it through cuFuncGetName. */
EXPORT void *mock_quiet_function(const char *name)
{
	static struct mock_mod *m;
	if (m == NULL)
		m = new_mod();
	return mod_fn(m, name, 0x46554e43);
}

/* mock_reuse_function renames function handle f, as a driver that reuses
 * a freed handle for another kernel: cuModuleGetFunction of that name in
 * f's module then returns f. */
EXPORT void mock_reuse_function(void *f, const char *name)
{
	struct mock_fn *fn = as_fn(f);
	if (fn != NULL)
		fn->name = strdup(name); /* the old name is leaked: a copy may share it */
}

EXPORT CUresult cuFuncGetName(const char **name, void *f)
{
	struct mock_fn *fn = as_fn(f);
	if (fn == NULL)
		return 400;
	*name = fn->name;
	return 0;
}

EXPORT CUresult cuLibraryLoadData(void **lib, const void *code, int *jo, void **jv, unsigned nj, int *lo,
				  void **lv, unsigned nl)
{
	CUresult r = cuModuleLoadData(lib, code);
	if (nj || nl) /* only loads with options are logged (tests want stderr quiet otherwise) */
		log_opts("cuLibraryLoadData", NULL, jo, jv, nj, lo, lv, nl, r);
	return r;
}
EXPORT CUresult cuLibraryLoadFromFile(void **lib, const char *path, int *jo, void **jv, unsigned nj, int *lo,
				      void **lv, unsigned nl)
{
	CUresult r = 1; /* CUDA_ERROR_INVALID_VALUE: CU_LIBRARY_BINARY_IS_PRESERVED is for data only */
	for (unsigned i = 0; i < nl && lo; i++)
		if (lo[i] == 1)
			goto out;
	r = load_file(lib, path);
out:
	log_opts("cuLibraryLoadFromFile", path ? path : "(null)", jo, jv, nj, lo, lv, nl, r);
	return r;
}
EXPORT CUresult cuLibraryGetKernel(void **k, void *lib, const char *name)
{
	struct mock_mod *mod = lib;
	if (mod == NULL || mod->magic != 0x4d4f4455 || name == NULL)
		return 400;
	*k = mod_fn(mod, name, 0x4b45524e);
	return 0;
}
/* cuKernelGetFunction: like the driver, a CUkernel has one CUfunction per
 * context, so the same kernel gets another handle on another device. */
EXPORT CUresult cuKernelGetFunction(void **f, void *k)
{
	struct mock_fn *kern = k;
	int d = 0;
	if (kern == NULL || kern->magic != 0x4b45524e)
		return 400;
	cuCtxGetDevice(&d);
	if (d < 0 || d >= MOCK_DEVICES)
		return 101; /* CUDA_ERROR_INVALID_DEVICE */
	if (kern->func[d] == NULL) {
		struct mock_fn *fn = calloc(1, sizeof *fn);
		*fn = *kern;
		fn->magic = 0x46554e43;
		fn->next = NULL;
		memset(fn->func, 0, sizeof fn->func);
		kern->func[d] = fn;
	}
	*f = kern->func[d];
	return 0;
}

/* mock_quiet_kernel: a CUkernel obtained behind the shim's back (like
 * cudart's cudaGetKernel of a kernel it found itself), so the shim names
 * it at its first launch or cuKernelGetFunction. */
EXPORT void *mock_quiet_kernel(const char *name)
{
	static struct mock_mod *m;
	if (m == NULL)
		m = new_mod();
	return mod_fn(m, name, 0x4b45524e);
}

EXPORT CUresult cuKernelGetName(const char **name, void *k)
{
	struct mock_fn *kern = k;
	if (kern == NULL || kern->magic != 0x4b45524e)
		return 400;
	*name = kern->name;
	return 0;
}

/* Stream capture (one stream at a time): a launch into the capturing
 * stream becomes a node of its graph instead of running. */
static void *cap_stream;
static struct mock_graph *cap_graph;
static CUresult capture_launch(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
			       unsigned bz, unsigned shm, void **p, void **e);

/* The MOCK CUPTI (mock_libcupti.c) hears of every kernel run here, as the
 * real CUPTI hooks the real driver's launch entry points. */
static void (*launch_hook)(const char *name);
EXPORT void mock_cuda_set_launch_hook(void (*fn)(const char *)) { __atomic_store_n(&launch_hook, fn, __ATOMIC_RELEASE); }
/* graph_hook(1) and (0) bracket a cuGraphLaunch's nodes (the mock CUPTI's
 * one correlation id per graph launch). */
static void (*graph_hook)(int begin);
EXPORT void mock_cuda_set_graph_hook(void (*fn)(int)) { __atomic_store_n(&graph_hook, fn, __ATOMIC_RELEASE); }

/* The MOCK Sanitizer API (mock_libsanitizer.c) hears of every launch
 * before it runs, as the real one's launch callback comes inside the
 * driver's launch call. */
static void (*san_hook)(void *f, const char *name, const unsigned dims[6]);
EXPORT void mock_cuda_set_san_hook(void (*fn)(void *, const char *, const unsigned *))
{
	__atomic_store_n(&san_hook, fn, __ATOMIC_RELEASE);
}

static CUresult launch(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		       int ptsz)
{
	struct mock_fn *fn = as_fn(f);
	if (fn == NULL)
		return 400;
	if (!gx || !gy || !gz || !bx || !by || !bz)
		return 1;
	void (*sh)(void *, const char *, const unsigned *) = __atomic_load_n(&san_hook, __ATOMIC_ACQUIRE);
	if (sh) {
		const unsigned dims[6] = {gx, gy, gz, bx, by, bz};
		sh(f, fn->name, dims);
	}
	count_launch(fn, gx, gy, gz, bx, by, bz, ptsz);
	void (*hook)(const char *) = __atomic_load_n(&launch_hook, __ATOMIC_ACQUIRE);
	if (hook)
		hook(fn->name);
	return 0;
}

EXPORT CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
			       unsigned bz, unsigned shm, void *st, void **p, void **e)
{
	last_params = p, last_extra = e;
	if (cap_graph != NULL && st == cap_stream)
		return capture_launch(f, gx, gy, gz, bx, by, bz, shm, p, e);
	return launch(f, gx, gy, gz, bx, by, bz, 0);
}
EXPORT CUresult cuLaunchKernel_ptsz(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
				    unsigned bz, unsigned shm, void *st, void **p, void **e)
{
	(void)shm, (void)st, (void)p, (void)e;
	return launch(f, gx, gy, gz, bx, by, bz, 1);
}

typedef struct {
	unsigned gx, gy, gz, bx, by, bz, shm;
	void *stream;
	void *attrs;
	unsigned nattrs;
} mock_launch_config;

EXPORT CUresult cuLaunchKernelEx(const mock_launch_config *c, void *f, void **p, void **e)
{
	last_params = p, last_extra = e;
	ADD(n_ex, 1);
	return launch(f, c->gx, c->gy, c->gz, c->bx, c->by, c->bz, 0);
}
EXPORT CUresult cuLaunchKernelEx_ptsz(const mock_launch_config *c, void *f, void **p, void **e)
{
	(void)p, (void)e;
	ADD(n_ex, 1);
	return launch(f, c->gx, c->gy, c->gz, c->bx, c->by, c->bz, 1);
}
/* What cuGetProcAddress hands out for cuLaunchKernelEx: not an export. */
static CUresult internal_launch_ex(const mock_launch_config *c, void *f, void **p, void **e)
{
	return cuLaunchKernelEx(c, f, p, e);
}

EXPORT CUresult cuLaunchCooperativeKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
					  unsigned by, unsigned bz, unsigned shm, void *st, void **p)
{
	(void)shm, (void)st, (void)p;
	ADD(n_coop, 1);
	return launch(f, gx, gy, gz, bx, by, bz, 0);
}
EXPORT CUresult cuLaunchCooperativeKernel_ptsz(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
					       unsigned by, unsigned bz, unsigned shm, void *st, void **p)
{
	(void)shm, (void)st, (void)p;
	ADD(n_coop, 1);
	return launch(f, gx, gy, gz, bx, by, bz, 1);
}

struct mock_stream;
static int ctx_dead, ctx_gen; /* the primary context was destroyed; contexts made so far */
static int is_stream(const void *st);
static void stream_flush(struct mock_stream *s);
EXPORT CUresult cuStreamSynchronize(void *st)
{
	if (is_stream(st)) { /* the mirror's: not the app's output */
		if (capture_unsafe("cuStreamSynchronize"))
			return 900;
		if (__atomic_load_n(&ctx_dead, __ATOMIC_ACQUIRE))
			return 709;
		stream_flush(st);
		return 0;
	}
	ADD(n_sync, 1);
	return 0;
}
EXPORT CUresult cuStreamSynchronize_ptsz(void *st) { return cuStreamSynchronize(st); }
EXPORT CUresult cuCtxSynchronize(void)
{
	ADD(n_sync, 1);
	return 0;
}
/* Like CUDA 13's cuCtxSynchronize_v2: a different signature. */
static CUresult ctx_sync_v2(void *ctx)
{
	if (ctx != (void *)0x5ca1ab1e)
		return 201; /* CUDA_ERROR_INVALID_CONTEXT */
	ADD(n_sync, 1);
	return 0;
}

EXPORT CUresult cuMemcpyHtoD_v2(uint64_t dst, const void *src, size_t n)
{
	if (capture_unsafe("cuMemcpyHtoD"))
		return 900;
	memcpy((void *)dst, src, n);
	ADD(n_memcpy, 1);
	return 0;
}
EXPORT CUresult cuMemcpyDtoH_v2(void *dst, uint64_t src, size_t n)
{
	if (capture_unsafe("cuMemcpyDtoH"))
		return 900;
	memcpy(dst, (const void *)src, n);
	ADD(n_memcpy, 1);
	return 0;
}

/* Contexts and streams for the shim's mirror thread. There is one
 * context; cuCtxSetCurrent makes it current on the calling thread, and the
 * asynchronous copies fail on a thread without it. A created stream defers
 * its copies to its cuStreamSynchronize (in order), as a real stream runs
 * them later: a caller that reads before synchronising sees old bytes.
 * MOCK_FAIL_ASYNC_AFTER=N: every asynchronous copy after the first N fails
 * (CUDA_ERROR_ILLEGAL_ADDRESS, as after a device fault). */
#define MOCK_CTX ((void *)0xc7c7c7c7)
#define MOCK_STREAM_OPS 64
struct mock_stream {
	uint32_t magic; /* 'STRM' */
	int gen;        /* the context it was made in */
	int n;
	struct {
		void *dst;
		const void *src;
		size_t len;
	} ops[MOCK_STREAM_OPS];
};
static __thread void *cur_ctx;
static uint64_t n_async;
static void *streams[16]; /* created streams (test apps pass made-up handles) */
static int nstreams;

static int is_stream(const void *st)
{
	for (int i = 0; st && i < __atomic_load_n(&nstreams, __ATOMIC_ACQUIRE); i++)
		if (streams[i] == st)
			return 1;
	return 0;
}

EXPORT CUresult cuCtxGetCurrent(void **ctx)
{
	*ctx = inited && !__atomic_load_n(&ctx_dead, __ATOMIC_ACQUIRE) ? MOCK_CTX : NULL;
	return 0;
}
EXPORT CUresult cuCtxSetCurrent(void *ctx)
{
	if (capture_unsafe("cuCtxSetCurrent"))
		return 900;
	if (ctx != NULL && ctx != MOCK_CTX)
		return 201; /* CUDA_ERROR_INVALID_CONTEXT */
	if (ctx != NULL && __atomic_load_n(&ctx_dead, __ATOMIC_ACQUIRE))
		return 709; /* CUDA_ERROR_CONTEXT_IS_DESTROYED */
	cur_ctx = ctx;
	return 0;
}
EXPORT CUresult cuStreamCreate(void **st, unsigned flags)
{
	if (capture_unsafe("cuStreamCreate"))
		return 900;
	if (cur_ctx == NULL)
		return 201;
	if (nstreams == 16)
		return 2;
	struct mock_stream *s = calloc(1, sizeof *s);
	s->magic = 0x5354524d;
	s->gen = __atomic_load_n(&ctx_gen, __ATOMIC_ACQUIRE);
	streams[nstreams] = s;
	__atomic_store_n(&nstreams, nstreams + 1, __ATOMIC_RELEASE);
	*st = s;
	fprintf(stderr, "mock: stream created flags=%u\n", flags);
	return 0;
}
static void stream_flush(struct mock_stream *s)
{
	for (int i = 0; i < s->n; i++)
		memcpy(s->ops[i].dst, s->ops[i].src, s->ops[i].len);
	s->n = 0;
}
static CUresult copy_async(void *dst, const void *src, size_t n, void *st)
{
	if (capture_unsafe("an asynchronous copy"))
		return 900;
	struct mock_stream *s = st;
	if (cur_ctx == NULL)
		return 201;
	if (!is_stream(s))
		return 400; /* the legacy stream (0) is not the mirror's */
	if (__atomic_load_n(&ctx_dead, __ATOMIC_ACQUIRE))
		return 709;
	if (s->gen != __atomic_load_n(&ctx_gen, __ATOMIC_ACQUIRE))
		return 400; /* a stream of a destroyed context */
	const char *fail = getenv("MOCK_FAIL_ASYNC_AFTER");
	if (fail && fail[0] && ADD(n_async, 1) >= strtoull(fail, NULL, 0)) {
		fprintf(stderr, "mock: async copy failed\n");
		return 700;
	}
	if (s->n == MOCK_STREAM_OPS)
		stream_flush(s);
	s->ops[s->n].dst = dst, s->ops[s->n].src = src, s->ops[s->n++].len = n;
	return 0;
}
EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, uint64_t src, size_t n, void *st)
{
	return copy_async(dst, (const void *)(uintptr_t)src, n, st);
}
EXPORT CUresult cuMemcpyHtoDAsync_v2(uint64_t dst, const void *src, size_t n, void *st)
{
	return copy_async((void *)(uintptr_t)dst, src, n, st);
}

/* The primary context's life: cuInit retains it once; the retain and
 * release calls count; it is destroyed when the count drops to 0, by
 * cuDevicePrimaryCtxReset or by cuCtxDestroy. Destroying it scrubs the
 * memory allocated in it (0xDD: its device memory is gone) and makes it
 * unusable (709) until a retain makes a new one (the same handle, as the
 * driver's primary context often has), whose streams are new. */
/* The MOCK Sanitizer API hears of a context's end, as the real one calls
 * back at CONTEXT_DESTROY_STARTING. */
static void (*san_ctx_hook)(void *ctx);
EXPORT void mock_cuda_set_san_ctx_hook(void (*fn)(void *)) { __atomic_store_n(&san_ctx_hook, fn, __ATOMIC_RELEASE); }

static void ctx_destroy(const char *why)
{
	if (__atomic_load_n(&ctx_dead, __ATOMIC_ACQUIRE))
		return;
	void (*sh)(void *) = __atomic_load_n(&san_ctx_hook, __ATOMIC_ACQUIRE);
	if (sh)
		sh(MOCK_CTX);
	for (int i = 0; i < nallocs; i++)
		memset(allocs[i].p, 0xDD, allocs[i].size);
	nallocs = 0;
	prim_ref = 0;
	__atomic_store_n(&ctx_dead, 1, __ATOMIC_RELEASE);
	fprintf(stderr, "mock: context destroyed (%s)\n", why);
}
EXPORT CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev)
{
	if (!inited || dev != 0)
		return inited ? 101 : 3; /* CUDA_ERROR_INVALID_DEVICE */
	if (__atomic_load_n(&ctx_dead, __ATOMIC_ACQUIRE)) {
		__atomic_add_fetch(&ctx_gen, 1, __ATOMIC_RELEASE);
		__atomic_store_n(&ctx_dead, 0, __ATOMIC_RELEASE);
	}
	prim_ref++;
	*ctx = MOCK_CTX;
	return 0;
}
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(int dev)
{
	if (dev != 0)
		return 101;
	if (prim_ref == 0)
		return 201;
	if (--prim_ref == 0)
		ctx_destroy("cuDevicePrimaryCtxRelease");
	return 0;
}
EXPORT CUresult cuDevicePrimaryCtxRelease(int dev) { return cuDevicePrimaryCtxRelease_v2(dev); }
EXPORT CUresult cuDevicePrimaryCtxReset_v2(int dev)
{
	if (dev != 0)
		return 101;
	ctx_destroy("cuDevicePrimaryCtxReset");
	return 0;
}
EXPORT CUresult cuDevicePrimaryCtxReset(int dev) { return cuDevicePrimaryCtxReset_v2(dev); }
EXPORT CUresult cuDevicePrimaryCtxGetState(int dev, unsigned *flags, int *active)
{
	if (dev != 0)
		return 101;
	*flags = 0;
	*active = prim_ref > 0 && !__atomic_load_n(&ctx_dead, __ATOMIC_ACQUIRE);
	return 0;
}
EXPORT CUresult cuCtxDestroy_v2(void *ctx)
{
	if (ctx != MOCK_CTX || __atomic_load_n(&ctx_dead, __ATOMIC_ACQUIRE))
		return 201;
	ctx_destroy("cuCtxDestroy");
	return 0;
}
EXPORT CUresult cuCtxDestroy(void *ctx) { return cuCtxDestroy_v2(ctx); }

/* mock_global: a module global's value (what the shim set); 0 if unset. */
EXPORT uint64_t mock_global(void *m, const char *name)
{
	struct mock_mod *mod = m;
	for (struct mock_global *g = mod ? mod->globals : NULL; g; g = g->next)
		if (strcmp(g->name, name) == 0)
			return g->value;
	return 0;
}

/* Graphs: kernel nodes only. */
typedef struct {
	void *func;
	unsigned gx, gy, gz, bx, by, bz, shm;
	void **params, **extra;
} mock_kernel_node_params;
typedef struct {
	void *func;
	unsigned gx, gy, gz, bx, by, bz, shm;
	void **params, **extra;
	void *kern, *ctx;
} mock_kernel_node_params_v2;

/* node_params copies a node's parameter values: as many as the kernel's
 * PTX declares (a patched kernel: its own plus the launch id). */
static void node_params(struct mock_node *n, void **params, void **extra)
{
	n->nparams = 0;
	if (n->f == NULL || n->f->nparams <= 0 || params == NULL || extra != NULL)
		return;
	n->nparams = n->f->nparams > MOCK_NODE_PARAMS ? MOCK_NODE_PARAMS : n->f->nparams;
	for (int i = 0; i < n->nparams; i++) {
		memcpy(&n->values[i], params[i], 8);
		n->ptrs[i] = &n->values[i];
	}
}

EXPORT CUresult cuGraphCreate(void **g, unsigned flags)
{
	(void)flags;
	*g = calloc(1, sizeof(struct mock_graph));
	return 0;
}
EXPORT CUresult cuGraphAddKernelNode(void **node, void *g, void *deps, size_t ndeps, const mock_kernel_node_params *p)
{
	struct mock_graph *gr = g;
	(void)deps, (void)ndeps;
	if (gr->n == 16)
		return 2;
	struct mock_node *n = &gr->nodes[gr->n++];
	n->f = as_fn(p->func);
	n->grid[0] = p->gx, n->grid[1] = p->gy, n->grid[2] = p->gz;
	n->block[0] = p->bx, n->block[1] = p->by, n->block[2] = p->bz;
	n->shmem = p->shm;
	node_params(n, p->params, p->extra);
	*node = n;
	return 0;
}
/* mock_node_params: what the driver kept of a node's parameters. */
EXPORT int mock_node_params(void *node, uint64_t *out, int max)
{
	struct mock_node *n = node;
	for (int i = 0; i < n->nparams && i < max; i++)
		out[i] = n->values[i];
	return n->nparams;
}
EXPORT CUresult cuGraphGetNodes(void *g, void **nodes, size_t *num)
{
	struct mock_graph *gr = g;
	if (nodes != NULL)
		for (int i = 0; i < gr->n && (size_t)i < *num; i++)
			nodes[i] = &gr->nodes[i];
	*num = (size_t)gr->n;
	return 0;
}
EXPORT CUresult cuGraphNodeGetType(void *node, int *type)
{
	(void)node;
	*type = 0; /* CU_GRAPH_NODE_TYPE_KERNEL */
	return 0;
}
EXPORT CUresult cuGraphKernelNodeGetParams_v2(void *node, mock_kernel_node_params_v2 *p)
{
	struct mock_node *n = node;
	memset(p, 0, sizeof *p);
	p->func = n->f;
	p->gx = n->grid[0], p->gy = n->grid[1], p->gz = n->grid[2];
	p->bx = n->block[0], p->by = n->block[1], p->bz = n->block[2];
	p->shm = n->shmem;
	p->params = n->nparams ? n->ptrs : NULL;
	return 0;
}
EXPORT CUresult cuGraphInstantiateWithFlags(void **exec, void *g, unsigned long long flags)
{
	(void)flags;
	struct mock_graph *e = malloc(sizeof *e);
	*e = *(struct mock_graph *)g;
	for (int i = 0; i < e->n; i++)
		for (int j = 0; j < e->nodes[i].nparams; j++)
			e->nodes[i].ptrs[j] = &e->nodes[i].values[j];
	*exec = e;
	return 0;
}
EXPORT CUresult cuGraphLaunch(void *exec, void *st)
{
	struct mock_graph *e = exec;
	(void)st;
	ADD(n_graph, 1);
	void (*gh)(int) = __atomic_load_n(&graph_hook, __ATOMIC_ACQUIRE);
	if (gh)
		gh(1);
	for (int i = 0; i < e->n; i++) {
		struct mock_node *n = &e->nodes[i];
		launch(n->f, n->grid[0], n->grid[1], n->grid[2], n->block[0], n->block[1], n->block[2], 0);
	}
	if (gh)
		gh(0);
	return 0;
}

static CUresult capture_launch(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
			       unsigned bz, unsigned shm, void **p, void **e)
{
	void *node;
	mock_kernel_node_params kp = {f, gx, gy, gz, bx, by, bz, shm, p, e};
	return cuGraphAddKernelNode(&node, cap_graph, NULL, 0, &kp);
}
EXPORT CUresult cuStreamBeginCapture_v2(void *st, int mode)
{
	if (st == NULL || cap_graph != NULL || mode < 0 || mode > 2)
		return 401; /* CUDA_ERROR_ILLEGAL_STATE */
	cap_graph = calloc(1, sizeof *cap_graph);
	cap_stream = st;
	cap_mode = mode, cap_thread = pthread_self();
	__atomic_store_n(&cap_invalid, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&cap_graph_open, cap_graph, __ATOMIC_RELEASE);
	return 0;
}
EXPORT CUresult cuStreamEndCapture(void *st, void **g)
{
	if (cap_graph == NULL || st != cap_stream)
		return 401;
	__atomic_store_n(&cap_graph_open, NULL, __ATOMIC_RELEASE);
	*g = cap_graph;
	cap_graph = NULL, cap_stream = NULL;
	if (__atomic_load_n(&cap_invalid, __ATOMIC_ACQUIRE)) {
		*g = NULL;
		return 901; /* CUDA_ERROR_STREAM_CAPTURE_INVALIDATED */
	}
	return 0;
}
EXPORT CUresult cuStreamIsCapturing(void *st, int *status)
{
	/* ACTIVE (1), INVALIDATED (2) or NONE (0) */
	*status = cap_graph != NULL && st == cap_stream ? 1 + __atomic_load_n(&cap_invalid, __ATOMIC_ACQUIRE) : 0;
	return 0;
}

/* mock_report prints the counters: the application's "output". */
EXPORT void mock_report(FILE *out)
{
	fprintf(out, "mock: launches=%llu ptsz=%llu ex=%llu coop=%llu graph=%llu sync=%llu memcpy=%llu checksum=%llu\n",
		(unsigned long long)n_launch, (unsigned long long)n_ptsz, (unsigned long long)n_ex,
		(unsigned long long)n_coop, (unsigned long long)n_graph, (unsigned long long)n_sync,
		(unsigned long long)n_memcpy, (unsigned long long)checksum);
}

EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, cuuint64_t flags, int *status);

struct entry {
	const char *name;
	void *legacy, *ptds;
};
#define E(n) {#n, (void *)n, NULL}
#define P(n) {#n, (void *)n, (void *)n##_ptsz}
EXPORT CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, cuuint64_t flags);
static const struct entry table[] = {
	E(cuInit), E(cuDriverGetVersion), E(cuModuleUnload), E(cuLibraryUnload), E(cuLibraryGetGlobal),
	{"cuModuleGetGlobal", (void *)cuModuleGetGlobal_v2, NULL}, E(cuDeviceGetAttribute),
	{"cuMemHostRegister", (void *)cuMemHostRegister_v2, NULL},
	{"cuMemHostGetDevicePointer", (void *)cuMemHostGetDevicePointer_v2, NULL},
	{"cuMemAlloc", (void *)cuMemAlloc_v2, NULL}, {"cuMemFree", (void *)cuMemFree_v2, NULL},
	{"cuMemsetD8", (void *)cuMemsetD8_v2, NULL}, E(cuCtxGetDevice), E(cuDeviceGetCount), E(cuModuleLoad), E(cuModuleLoadData),
	E(cuModuleLoadDataEx), E(cuModuleLoadFatBinary), E(cuModuleGetFunction), E(cuLibraryLoadData),
	E(cuLibraryLoadFromFile), E(cuLibraryGetKernel), E(cuKernelGetFunction), E(cuFuncGetName),
	P(cuLaunchKernel), {"cuLaunchKernelEx", (void *)internal_launch_ex, (void *)cuLaunchKernelEx_ptsz},
	P(cuLaunchCooperativeKernel), P(cuStreamSynchronize), E(cuGraphCreate), E(cuGraphAddKernelNode),
	E(cuGraphInstantiateWithFlags), E(cuGraphLaunch), {"cuStreamBeginCapture", (void *)cuStreamBeginCapture_v2, NULL},
	E(cuStreamEndCapture), E(cuStreamIsCapturing), E(cuThreadExchangeStreamCaptureMode),
	E(cuDevicePrimaryCtxRetain), {"cuDevicePrimaryCtxRelease", (void *)cuDevicePrimaryCtxRelease_v2, NULL},
	{"cuDevicePrimaryCtxReset", (void *)cuDevicePrimaryCtxReset_v2, NULL}, E(cuDevicePrimaryCtxGetState),
	{"cuCtxDestroy", (void *)cuCtxDestroy_v2, NULL}, {"cuMemcpyHtoD", (void *)cuMemcpyHtoD_v2, NULL},
	{"cuMemcpyDtoH", (void *)cuMemcpyDtoH_v2, NULL},
};

EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, cuuint64_t flags, int *status)
{
	if (status)
		*status = 0;
	*pfn = NULL;
	if (strcmp(sym, "cuGetProcAddress") == 0) {
		*pfn = ver >= 12000 ? (void *)cuGetProcAddress_v2 : (void *)cuGetProcAddress;
		return 0;
	}
	if (strcmp(sym, "cuCtxSynchronize") == 0) {
		*pfn = ver >= 13000 ? (void *)ctx_sync_v2 : (void *)cuCtxSynchronize;
		return 0;
	}
	for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
		if (strcmp(table[i].name, sym) == 0) {
			*pfn = (flags & 2) && table[i].ptds ? table[i].ptds : table[i].legacy;
			return 0;
		}
	if (status)
		*status = 1; /* CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */
	return 500;
}

EXPORT CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, cuuint64_t flags)
{
	return cuGetProcAddress_v2(sym, pfn, ver, flags, NULL);
}
