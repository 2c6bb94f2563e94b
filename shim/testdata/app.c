/*
 * app.c - a test application for libgpuprobe.so, run against the MOCK
 * libcuda.so.1 (mock_libcuda.c). It reaches the driver the three ways real
 * applications do:
 *
 *   app cudart SCENARIO  dlopen("libcuda.so.1") + dlsym("cuGetProcAddress_v2"),
 *                        everything else through cuGetProcAddress (static and
 *                        shared cudart); code through cuLibraryLoadData
 *   app dlsym SCENARIO   dlopen + dlsym of every cu* name (PyTorch); code
 *                        through cuModuleLoadData
 *   app-direct direct SCENARIO  linked with -lcuda, calls the symbols
 *
 * Scenarios: basic (default), graph, capture, fork, unnamed, threads, slow, slowmix, bench N,
 * the kernel-name scenarios of app_names.c (long names, devices, spawned
 * workers, a full names ring),
 * ptxagain FILE (ptx, then ptx again once a line arrives on stdin),
 * ptx FILE (loads a real PTX file, launches its vectorAdd by kernelParams
 * and by a CU_LAUNCH_PARAM_BUFFER_POINTER buffer and from a graph kernel
 * node, and prints what the MOCK driver received: the extra launch-id
 * parameter, the module's globals), ptxfile FILE (the same, but the file is
 * loaded by path: cuModuleLoad, or cuLibraryLoadFromFile with one JIT and
 * one library option in cudart mode), loadfile FILE (loads FILE by path,
 * prints the result; on success launches its vectorAdd once and unloads),
 * devmap FILE array|ring ... (loads FILE, launches its vectorAdd, and acts
 * as the GPU on the device copies behind the globals gp_dm_arr and
 * gp_dm_ring: see devmap below), async FILE GATE [unload|fail] (the
 * shim's patching off the application's threads: see async_swap).
 * The output (stdout) depends only on what the driver did, so it must be
 * identical with and without the shim.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpuprobe_shm.h"

#include "app.h"

void *cuda;
const char *mode;

void *mock(const char *name) { return need(dlsym(cuda ? cuda : RTLD_DEFAULT, name), name); }

#ifndef APP_DIRECT
typedef CUresult (*gpa2_t)(const char *, void **, int, u64, int *);

static void *gpa(gpa2_t g, const char *name, int ver, u64 flags)
{
	void *p = NULL;
	int st = -1;
	CHECK(g(name, &p, ver, flags, &st));
	return need(p, name);
}

static void load_cudart(struct api *a)
{
	gpa2_t g0 = (gpa2_t)need(dlsym(cuda, "cuGetProcAddress_v2"), "cuGetProcAddress_v2");
	/* cudart asks the driver for cuGetProcAddress itself and uses that. */
	gpa2_t g = (gpa2_t)gpa(g0, "cuGetProcAddress", 13000, 1);
	a->init = gpa(g, "cuInit", 2000, 1);
	a->lib_load = gpa(g, "cuLibraryLoadData", 12000, 1);
	a->lib_load_file = gpa(g, "cuLibraryLoadFromFile", 12000, 1);
	a->lib_kernel = gpa(g, "cuLibraryGetKernel", 12000, 1);
	a->kernel_fn = gpa(g, "cuKernelGetFunction", 12000, 1);
	a->launch = gpa(g, "cuLaunchKernel", 4000, 1);
	a->launch_ptsz = gpa(g, "cuLaunchKernel", 4000, 2);
	a->launch_ex = gpa(g, "cuLaunchKernelEx", 11060, 1);
	a->coop = gpa(g, "cuLaunchCooperativeKernel", 9000, 1);
	a->stream_sync = gpa(g, "cuStreamSynchronize", 2000, 1);
	a->memcpy_htod = gpa(g, "cuMemcpyHtoD", 3020, 1);
	a->graph_create = gpa(g, "cuGraphCreate", 10000, 1);
	a->graph_add = gpa(g, "cuGraphAddKernelNode", 10000, 1);
	a->graph_inst = gpa(g, "cuGraphInstantiateWithFlags", 11040, 1);
	a->graph_launch = gpa(g, "cuGraphLaunch", 10000, 1);
	a->capture_begin = gpa(g, "cuStreamBeginCapture", 10010, 1);
	a->capture_end = gpa(g, "cuStreamEndCapture", 10000, 1);
	a->ctx_sync = gpa(g, "cuCtxSynchronize", 13000, 1);
	a->unload = gpa(g, "cuLibraryUnload", 12000, 1);
	a->prim_retain = gpa(g, "cuDevicePrimaryCtxRetain", 7000, 1);
	a->prim_release = gpa(g, "cuDevicePrimaryCtxRelease", 11000, 1);
	a->library = 1;
}

static void load_dlsym(struct api *a)
{
#define D(field, name) a->field = need(dlsym(cuda, name), name)
	D(init, "cuInit");
	D(mod_load, "cuModuleLoadData");
	D(mod_load_file, "cuModuleLoad");
	D(mod_fn, "cuModuleGetFunction");
	D(launch, "cuLaunchKernel");
	D(launch_ptsz, "cuLaunchKernel_ptsz");
	D(launch_ex, "cuLaunchKernelEx");
	D(coop, "cuLaunchCooperativeKernel");
	D(stream_sync, "cuStreamSynchronize");
	D(memcpy_htod, "cuMemcpyHtoD_v2");
	D(graph_create, "cuGraphCreate");
	D(graph_add, "cuGraphAddKernelNode");
	D(graph_inst, "cuGraphInstantiateWithFlags");
	D(graph_launch, "cuGraphLaunch");
	D(capture_begin, "cuStreamBeginCapture_v2");
	D(capture_end, "cuStreamEndCapture");
	D(unload, "cuModuleUnload");
	D(prim_retain, "cuDevicePrimaryCtxRetain");
	D(prim_release, "cuDevicePrimaryCtxRelease_v2");
#undef D
}
#endif

#ifdef APP_DIRECT
CUresult cuInit(unsigned);
CUresult cuModuleLoadData(void **, const void *);
CUresult cuModuleLoad(void **, const char *);
CUresult cuModuleGetFunction(void **, void *, const char *);
CUresult cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
			void **, void **);
CUresult cuLaunchKernel_ptsz(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
			     void *, void **, void **);
CUresult cuLaunchKernelEx(const launch_config *, void *, void **, void **);
CUresult cuLaunchCooperativeKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
				   void *, void **);
CUresult cuStreamSynchronize(void *);
CUresult cuMemcpyHtoD_v2(u64, const void *, size_t);
CUresult cuGraphCreate(void **, unsigned);
CUresult cuGraphAddKernelNode(void **, void *, void *, size_t, const kernel_node_params *);
CUresult cuGraphInstantiateWithFlags(void **, void *, unsigned long long);
CUresult cuGraphLaunch(void *, void *);
CUresult cuStreamBeginCapture_v2(void *, int);
CUresult cuStreamEndCapture(void *, void **);
CUresult cuModuleUnload(void *);
CUresult cuDevicePrimaryCtxRetain(void **, int);
CUresult cuDevicePrimaryCtxRelease_v2(int);
static void load_direct(struct api *a)
{
	a->init = cuInit;
	a->mod_load = cuModuleLoadData;
	a->mod_load_file = cuModuleLoad;
	a->mod_fn = cuModuleGetFunction;
	a->launch = cuLaunchKernel;
	a->launch_ptsz = cuLaunchKernel_ptsz;
	a->launch_ex = cuLaunchKernelEx;
	a->coop = cuLaunchCooperativeKernel;
	a->stream_sync = cuStreamSynchronize;
	a->memcpy_htod = cuMemcpyHtoD_v2;
	a->graph_create = cuGraphCreate;
	a->graph_add = cuGraphAddKernelNode;
	a->unload = cuModuleUnload;
	a->graph_inst = cuGraphInstantiateWithFlags;
	a->graph_launch = cuGraphLaunch;
	a->capture_begin = cuStreamBeginCapture_v2;
	a->capture_end = cuStreamEndCapture;
	a->prim_retain = cuDevicePrimaryCtxRetain;
	a->prim_release = cuDevicePrimaryCtxRelease_v2;
}
#endif

/* A fatbin container header (magic, version 1, header 16 bytes, 0 bytes). */
const uint32_t fatbin[4] = {0xBA55ED50u, 0x00100001u, 0, 0};

struct api A;
static void *f_vec, *f_gemm;
static void *code_mod; /* the module of f_vec (module paths only) */

static void load_code(void)
{
	void *m;
	if (A.library) {
		void *kvec, *kgemm;
		CHECK(A.lib_load(&m, fatbin, NULL, NULL, 0, NULL, NULL, 0));
		CHECK(A.lib_kernel(&kvec, m, "_Z6vecAddPfS_S_i"));
		CHECK(A.lib_kernel(&kgemm, m, "_Z4gemmPKfS0_Pfi"));
		f_vec = kvec; /* a CUkernel launched as a CUfunction */
		CHECK(A.kernel_fn(&f_gemm, kgemm));
	} else {
		CHECK(A.mod_load(&m, fatbin));
		CHECK(A.mod_fn(&f_vec, m, "_Z6vecAddPfS_S_i"));
		CHECK(A.mod_fn(&f_gemm, m, "_Z4gemmPKfS0_Pfi"));
		code_mod = m;
	}
}

/* basic: nvec vecAdd launches, then one each of the other launch paths, a
 * stream sync and a 4096-byte HtoD copy. */
static void basic(int nvec)
{
	static char dev[4096], host[4096];
	for (int i = 0; i < nvec; i++)
		CHECK(A.launch(f_vec, 4, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL));
	CHECK(A.launch_ptsz(f_gemm, 8, 8, 1, 16, 16, 1, 2048, NULL, NULL, NULL));
	launch_config c = {2, 3, 4, 32, 2, 1, 0, (void *)0x1234, NULL, 0};
	CHECK(A.launch_ex(&c, f_vec, NULL, NULL));
	CHECK(A.coop(f_gemm, 1, 1, 1, 64, 1, 1, 0, (void *)0x77, NULL));
	CHECK(A.stream_sync(NULL));
	memset(host, 7, sizeof host);
	CHECK(A.memcpy_htod((u64)(uintptr_t)dev, host, sizeof host));
	if (dev[4095] != 7)
		exit(1);
	if (A.ctx_sync) /* a different ABI: must reach the driver untouched */
		CHECK(A.ctx_sync((void *)0x5ca1ab1e));
}

static void graph(void)
{
	void *g, *n, *exec;
	kernel_node_params p1 = {f_vec, 5, 1, 1, 128, 1, 1, 0, NULL, NULL};
	kernel_node_params p2 = {f_gemm, 3, 3, 1, 8, 8, 1, 512, NULL, NULL};
	CHECK(A.graph_create(&g, 0));
	CHECK(A.graph_add(&n, g, NULL, 0, &p1));
	CHECK(A.graph_add(&n, g, NULL, 0, &p2));
	CHECK(A.graph_inst(&exec, g, 0));
	CHECK(A.graph_launch(exec, (void *)0x99));
	CHECK(A.graph_launch(exec, (void *)0x99));
}

/* capture: a graph captured from stream 0x66 (two launches), launched
 * twice on stream 0x77, with a launch on another stream while the capture
 * is open and one on 0x66 after it. */
static void capture(void)
{
	void *g, *exec;
	CHECK(A.launch(f_vec, 4, 1, 1, 256, 1, 1, 0, (void *)0x55, NULL, NULL));
	CHECK(A.capture_begin((void *)0x66, 0));
	CHECK(A.launch(f_vec, 6, 1, 1, 64, 1, 1, 0, (void *)0x66, NULL, NULL));
	CHECK(A.launch(f_vec, 2, 1, 1, 32, 1, 1, 0, (void *)0x55, NULL, NULL));
	CHECK(A.launch(f_gemm, 3, 3, 1, 8, 8, 1, 512, (void *)0x66, NULL, NULL));
	CHECK(A.capture_end((void *)0x66, &g));
	CHECK(A.graph_inst(&exec, g, 0));
	CHECK(A.graph_launch(exec, (void *)0x77));
	CHECK(A.graph_launch(exec, (void *)0x77));
	CHECK(A.launch(f_vec, 7, 1, 1, 16, 1, 1, 0, (void *)0x66, NULL, NULL));
}

static void *thread_main(void *arg)
{
	int n = (int)(intptr_t)arg;
	for (int i = 0; i < n; i++)
		CHECK(A.launch(f_vec, 1 + (unsigned)i % 3, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
	return NULL;
}

/* Library loads of the ptx scenarios pass one JIT option
 * (CU_JIT_MAX_REGISTERS 64) and one library option, which the MOCK driver
 * logs: CU_LIBRARY_BINARY_IS_PRESERVED 1 with data, and with a file
 * CU_LIBRARY_HOST_UNIVERSAL_FUNCTION_AND_DATA_TABLE 0x1234, or
 * CU_LIBRARY_BINARY_IS_PRESERVED (invalid there) when APP_LIB_PRESERVE=1. */
static int jopt[1] = {0};
static void *jval[1] = {(void *)(uintptr_t)64};
static int lopt_data[1] = {1};
static void *lval_data[1] = {(void *)(uintptr_t)1};
static int lopt_file[1] = {0};
static void *lval_file[1] = {(void *)(uintptr_t)0x1234};

/* load_file loads the code file path with the mode's file call. */
static CUresult load_file(void **m, const char *path)
{
	const char *e = getenv("APP_LIB_PRESERVE");
	if (A.library && e && strcmp(e, "1") == 0)
		return A.lib_load_file(m, path, jopt, jval, 1, lopt_data, lval_data, 1);
	if (A.library)
		return A.lib_load_file(m, path, jopt, jval, 1, lopt_file, lval_file, 1);
	return A.mod_load_file(m, path);
}

/* vector_add returns the function of vectorAdd in the module (or library) m. */
static void *vector_add(void *m)
{
	void *fn;
	const char *name = "_Z9vectorAddPKfS0_Pf";
	if (A.library) {
		void *k;
		CHECK(A.lib_kernel(&k, m, name));
		CHECK(A.kernel_fn(&fn, k));
	} else {
		CHECK(A.mod_fn(&fn, m, name));
	}
	return fn;
}

/* ptx: load PTX text from file with the mode's load call (by path with
 * by_path), launch vectorAdd(a, b, c) twice (kernelParams, then an extra
 * buffer with cuLaunchKernelEx) and print what the driver got beyond the 3
 * params. */
static void ptx(const char *file, int by_path)
{
	void *m, *fn;
	if (by_path) {
		CHECK(load_file(&m, file));
	} else {
		FILE *f = fopen(file, "r");
		static char text[1 << 20];
		size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
		if (f == NULL || n == 0) {
			fprintf(stderr, "app: cannot read %s\n", file);
			exit(2);
		}
		fclose(f);
		text[n] = 0;
		if (A.library)
			CHECK(A.lib_load(&m, text, jopt, jval, 1, lopt_data, lval_data, 1));
		else
			CHECK(A.mod_load(&m, text));
	}
	fn = vector_add(m);
	void (*last)(void ***, void ***) = need(dlsym(cuda ? cuda : RTLD_DEFAULT, "mock_last_launch"), "mock_last_launch");
	void (*globals)(FILE *, void *) = need(dlsym(cuda ? cuda : RTLD_DEFAULT, "mock_report_globals"), "mock_report_globals");
	u64 a = 0xa0, b = 0xb0, c = 0xc0;
	void *params[3] = {&a, &b, &c};
	void **gp, **ge;
	CHECK(A.launch(fn, 2, 1, 1, 64, 1, 1, 0, NULL, params, NULL));
	last(&gp, &ge);
	printf("app: params-launch same=%d", gp == params);
	if (gp != params) /* a copy: the app's 3, then the launch id */
		printf(" p0=%d p1=%d p2=%d extra=%llu", gp[0] == &a, gp[1] == &b, gp[2] == &c, *(u64 *)gp[3]);
	printf("\n");
	u64 buf[3] = {a, b, c};
	size_t size = sizeof buf;
	void *extra[] = {(void *)1, buf, (void *)2, &size, (void *)0};
	launch_config cfg = {2, 1, 1, 64, 1, 1, 0, NULL, NULL, 0};
	CHECK(A.launch_ex(&cfg, fn, NULL, extra));
	last(&gp, &ge);
	printf("app: buffer-launch same=%d", ge == extra);
	if (ge != extra && ge[0] == (void *)1 && ge[2] == (void *)2) {
		u64 *nb = ge[1];
		size_t ns = *(size_t *)ge[3];
		printf(" size=%zu copied=%d", ns, nb[0] == a && nb[1] == b && nb[2] == c);
		if (ns >= 32)
			printf(" extra=%llu", nb[3]);
	}
	printf("\n");
	/* A kernel node built explicitly: what the driver kept of its
	 * parameters (the app's 3 values, then a patched kernel's launch id). */
	int (*node_params)(void *, u64 *, int) = need(dlsym(cuda ? cuda : RTLD_DEFAULT, "mock_node_params"), "mock_node_params");
	void *g, *node, *exec;
	kernel_node_params kp = {fn, 2, 1, 1, 64, 1, 1, 0, params, NULL};
	CHECK(A.graph_create(&g, 0));
	CHECK(A.graph_add(&node, g, NULL, 0, &kp));
	u64 v[8];
	int nv = node_params(node, v, 8);
	printf("app: graph-node n=%d p0=%d p1=%d p2=%d", nv, nv > 0 && v[0] == a, nv > 1 && v[1] == b, nv > 2 && v[2] == c);
	if (nv > 3)
		printf(" extra=%llu", v[3]);
	printf(" same=%d\n", kp.params == params);
	CHECK(A.graph_inst(&exec, g, 0));
	CHECK(A.graph_launch(exec, NULL));
	/* A launch captured from a stream: it runs (and is recorded) at its
	 * graph's launch, with the launch id its node kept. */
	void *cg, *cexec;
	CHECK(A.capture_begin((void *)0x66, 0));
	CHECK(A.launch(fn, 3, 1, 1, 64, 1, 1, 0, (void *)0x66, params, NULL));
	last(&gp, &ge);
	printf("app: captured-launch same=%d", gp == params);
	if (gp != params)
		printf(" extra=%llu", *(u64 *)gp[3]);
	printf("\n");
	CHECK(A.capture_end((void *)0x66, &cg));
	CHECK(A.graph_inst(&cexec, cg, 0));
	CHECK(A.graph_launch(cexec, (void *)0x77));
	globals(stdout, m);
	/* Unloading frees the patched module's device-only map memory. */
	CHECK(A.unload(m));
	printf("app: unloaded\n");
}

/* load_text loads the PTX text of file with the mode's load call. */
static void *load_text(const char *file)
{
	static char text[1 << 20];
	void *m;
	FILE *f = fopen(file, "r");
	size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
	if (f == NULL || n == 0) {
		fprintf(stderr, "app: cannot read %s\n", file);
		exit(2);
	}
	fclose(f);
	text[n] = 0;
	if (A.library)
		CHECK(A.lib_load(&m, text, jopt, jval, 1, lopt_data, lval_data, 1));
	else
		CHECK(A.mod_load(&m, text));
	return m;
}

/* until_swapped launches fn until the driver gets the hidden launch id
 * (the shim swapped the patched kernel in) or tries launches were made:
 * the launches made, and the id passed (0: none). */
static int until_swapped(void *fn, int tries, u64 *id)
{
	void (*last)(void ***, void ***) = need(dlsym(cuda ? cuda : RTLD_DEFAULT, "mock_last_launch"), "mock_last_launch");
	u64 a = 0xa0, b = 0xb0, c = 0xc0;
	void *params[3] = {&a, &b, &c};
	void **gp, **ge;
	*id = 0;
	for (int i = 1; i <= tries; i++) {
		CHECK(A.launch(fn, 2, 1, 1, 64, 1, 1, 0, NULL, params, NULL));
		last(&gp, &ge);
		if (gp != params) {
			*id = *(u64 *)gp[3];
			return i;
		}
		usleep(1000);
	}
	return tries;
}

/* async FILE GATE [unload|fail]: the shim's asynchronous patching under
 * the MOCK driver's slow JIT (MOCK_JIT_GATE=GATE holds the patched load
 * until GATE exists). Loads FILE, launches vectorAdd once (before the
 * swap: the original kernel), then opens the gate and:
 *   (none)  launches until the patched kernel runs (prints how many);
 *   fail    waits for the JIT to finish (MOCK_JIT_FAIL: it fails), then
 *           launches 50 times, 1 ms apart (all run the original);
 *   unload  unloads the module before opening the gate, then loads FILE
 *           again and launches that until its patched kernel runs (the
 *           patch thread takes its jobs in order: the first is over). */
static void async_swap(const char *file, const char *gate, const char *how)
{
	int (*jit_done)(void) = need(dlsym(cuda ? cuda : RTLD_DEFAULT, "mock_jit_done"), "mock_jit_done");
	void *m = load_text(file), *fn = vector_add(m);
	u64 id;
	int n = until_swapped(fn, 1, &id);
	printf("app: async first swapped=%d\n", id != 0);
	if (strcmp(how, "unload") == 0) {
		CHECK(A.unload(m));
		printf("app: unloaded early\n");
	}
	FILE *g = fopen(gate, "w");
	if (g == NULL) {
		fprintf(stderr, "app: cannot create %s\n", gate);
		exit(2);
	}
	fclose(g);
	if (strcmp(how, "fail") == 0) {
		for (int i = 0; i < 30000 && jit_done() < 1; i++)
			usleep(1000);
		n = until_swapped(fn, 50, &id);
		printf("app: async after-fail launches=%d swapped=%d\n", n, id != 0);
	} else if (strcmp(how, "unload") == 0) {
		void *m2 = load_text(file);
		n = until_swapped(vector_add(m2), 30000, &id);
		printf("app: async second swapped=%d\n", id != 0);
		m = m2;
	} else {
		n = until_swapped(fn, 30000, &id);
		printf("app: async swapped=%d launches=%d id=%llu\n", id != 0, n, id);
	}
	CHECK(A.unload(m));
	printf("app: unloaded\n");
}

/* A GPU ring producer: records of len bytes, (producer, seq) then a
 * pattern of both, written into the device copy with the ring protocol. */
struct producer {
	uint8_t *ring;
	uint32_t id, n, len, pause_every;
	uint64_t published, dropped, oversize;
};

static void *produce_main(void *arg)
{
	struct producer *p = arg;
	uint8_t rec[GPBR_SLOT_MAX];
	for (uint32_t i = 0; i < p->n; i++) {
		memcpy(rec, &p->id, 4);
		memcpy(rec + 4, &i, 4);
		for (uint32_t k = 8; k < p->len; k++)
			rec[k] = (uint8_t)(p->id * 31u + i * 7u + k);
		int r = gpbr_ring_produce(p->ring, 7, rec, p->len);
		if (r == GPBR_PUBLISHED)
			p->published++;
		else if (r == GPBR_DROPPED)
			p->dropped++;
		else
			p->oversize++;
		if (p->pause_every && i % p->pause_every == p->pause_every - 1)
			usleep(200);
	}
	return NULL;
}

/* devmap: load FILE, launch vectorAdd once, then act as the GPU:
 *   array KEYS SLEEP_MS  print the device copy's values (the host's seeds),
 *                        store 0x5eed0000+k at every key, print "written",
 *                        stay SLEEP_MS (the test watches the host region)
 *   ring THREADS N LEN PAUSE STALL SLEEP_MS START_MS  after START_MS,
 *                        THREADS producers of N records (LEN bytes, a 200
 *                        us pause every PAUSE), with STALL 1: one ticket
 *                        taken first and never published; print the
 *                        counts, stay SLEEP_MS, exit
 *   fork                 a fork child loads FILE again and prints its
 *                        globals (a child gets no device maps)
 *   release N RELEASES SLEEP_MS  retain the primary context, produce N
 *                        ring records, release it RELEASES times (the
 *                        runtime holds one reference: 2 destroys it; reset,
 *                        destroy: cuDevicePrimaryCtxReset, cuCtxDestroy
 *                        instead), and while it lives produce N more;
 *                        stay SLEEP_MS, exit
 *   capture SLEEP_MS     load and launch inside a global-mode capture of
 *                        stream 0x66, stay SLEEP_MS, end it (must succeed),
 *                        launch its graph */
static void devmap(const char *file, int argc, char **argv)
{
	void *m, *fn, *st = NULL;
	const char *sub = argc > 0 ? argv[0] : "";
	if (strcmp(sub, "capture") == 0) { /* the load and its binding inside the capture */
		st = (void *)0x66;
		CHECK(A.capture_begin(st, 0)); /* CU_STREAM_CAPTURE_MODE_GLOBAL */
	}
	CHECK(load_file(&m, file));
	fn = vector_add(m);
	uint64_t (*global)(void *, const char *) = need(dlsym(cuda ? cuda : RTLD_DEFAULT, "mock_global"), "mock_global");
	void (*last)(void ***, void ***) = need(dlsym(cuda ? cuda : RTLD_DEFAULT, "mock_last_launch"), "mock_last_launch");
	u64 a = 0xa0, b = 0xb0, c = 0xc0;
	void *params[3] = {&a, &b, &c};
	void **gp, **ge;
	CHECK(A.launch(fn, 2, 1, 1, 64, 1, 1, 0, st, params, NULL));
	last(&gp, &ge);
	printf("app: devmap patched=%d\n", gp != params);
	uint8_t *arr = (uint8_t *)(uintptr_t)global(m, "gp_dm_arr");
	uint8_t *ring = (uint8_t *)(uintptr_t)global(m, "gp_dm_ring");
	printf("app: devmap arr=%d ring=%d\n", arr != NULL, ring != NULL);
	if (strcmp(sub, "array") == 0 && arr != NULL && argc >= 3) {
		int keys = atoi(argv[1]);
		printf("app: devmap seeds");
		for (int k = 0; k < keys; k++)
			printf(" %#llx", *(u64 *)gpbr_array_value(arr, (uint32_t)k, 0));
		printf("\n");
		for (int k = 0; k < keys; k++)
			__atomic_store_n((u64 *)gpbr_array_value(arr, (uint32_t)k, 0), 0x5eed0000ull + (u64)k, __ATOMIC_RELEASE);
		printf("app: devmap written\n");
		usleep((useconds_t)atoi(argv[2]) * 1000u);
	} else if (strcmp(sub, "release") == 0 && ring != NULL && argc >= 4) {
		void *ctx;
		int n = atoi(argv[1]), releases = atoi(argv[2]);
		struct producer p = {ring, 0, (uint32_t)n, 48, 0, 0, 0, 0};
		CHECK(A.prim_retain(&ctx, 0));
		produce_main(&p);
		printf("app: devmap produced=%llu published=%llu\n", (u64)n, (u64)p.published);
		if (strcmp(argv[2], "reset") == 0) { /* the other calls that end a context (dlsym mode) */
			CUresult (*reset)(int) = need(dlsym(cuda, "cuDevicePrimaryCtxReset_v2"), "cuDevicePrimaryCtxReset_v2");
			CHECK(reset(0));
			releases = 2;
		} else if (strcmp(argv[2], "destroy") == 0) {
			CUresult (*destroy)(void *) = need(dlsym(cuda, "cuCtxDestroy_v2"), "cuCtxDestroy_v2");
			CHECK(destroy(ctx));
			releases = 2;
		} else {
			for (int i = 0; i < releases; i++)
				CHECK(A.prim_release(0));
		}
		printf("app: devmap released %d\n", releases);
		if (releases < 2) {
			struct producer q = {ring, 1, (uint32_t)n, 48, 0, 0, 0, 0};
			produce_main(&q);
			printf("app: devmap produced-after=%llu published=%llu\n", (u64)n, (u64)q.published);
		}
		usleep((useconds_t)atoi(argv[3]) * 1000u);
	} else if (strcmp(sub, "capture") == 0 && argc >= 2) {
		void *g, *exec;
		usleep((useconds_t)atoi(argv[1]) * 1000u); /* mirror periods inside the capture */
		CHECK(A.capture_end(st, &g));
		CHECK(A.graph_inst(&exec, g, 0));
		CHECK(A.graph_launch(exec, (void *)0x77));
		printf("app: devmap capture ok\n");
	} else if (strcmp(sub, "fork") == 0) {
		pid_t child = fork();
		if (child == 0) {
			void *m2;
			CHECK(load_file(&m2, file));
			CHECK(A.launch(vector_add(m2), 2, 1, 1, 64, 1, 1, 0, NULL, params, NULL));
			last(&gp, &ge);
			printf("app: devmap child patched=%d arr=%d ring=%d\n", gp != params, global(m2, "gp_dm_arr") != 0,
			       global(m2, "gp_dm_ring") != 0);
			exit(0); /* the atexit handlers run in the child too */
		}
		int st;
		waitpid(child, &st, 0);
		printf("app: devmap child exit=%d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	} else if (strcmp(sub, "ring") == 0 && ring != NULL && argc >= 8) {
		int nt = atoi(argv[1]);
		struct producer ps[64];
		pthread_t th[64];
		uint64_t stall_ticket = 0;
		int stall = atoi(argv[5]), why;
		if (nt < 1 || nt > 64)
			exit(2);
		usleep((useconds_t)atoi(argv[7]) * 1000u);
		if (stall && gpbr_ring_reserve(ring, 8, &stall_ticket, &why) == NULL)
			exit(3);
		for (int i = 0; i < nt; i++) {
			ps[i] = (struct producer){ring, (uint32_t)i, (uint32_t)atoi(argv[2]), (uint32_t)atoi(argv[3]),
						  (uint32_t)atoi(argv[4]), 0, 0, 0};
			pthread_create(&th[i], NULL, produce_main, &ps[i]);
		}
		u64 pub = 0, drop = 0, over = 0;
		for (int i = 0; i < nt; i++) {
			pthread_join(th[i], NULL);
			pub += ps[i].published, drop += ps[i].dropped, over += ps[i].oversize;
		}
		/* Compiled GPU producers count drops in shards (shm/doc.go):
		 * move the C producer's count there, taken from dropped first
		 * so the drainer never sees it twice. */
		u64 moved = __atomic_exchange_n(gpbr_u64(ring, GPBR_RING_DROPPED), 0, __ATOMIC_ACQ_REL);
		for (unsigned k = 0; k < GPBR_RING_DROP_SHARDS; k++)
			__atomic_fetch_add(gpbr_u64(ring, gpbr_ring_drop_shard(k)),
					   moved / GPBR_RING_DROP_SHARDS + (k < moved % GPBR_RING_DROP_SHARDS), __ATOMIC_RELAXED);
		printf("app: devmap produced=%llu published=%llu dropped=%llu oversize=%llu stalled=%d\n",
		       (u64)nt * (u64)atoi(argv[2]) + (u64)stall, pub, drop, over, stall);
		usleep((useconds_t)atoi(argv[6]) * 1000u);
	}
	/* The shim's mirror thread exists only where a device map was made. */
	int mirror = 0;
	DIR *d = opendir("/proc/self/task");
	for (struct dirent *e; d && (e = readdir(d)) != NULL && !mirror;) {
		char path[300], comm[32] = "";
		snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
		FILE *f = e->d_name[0] != '.' ? fopen(path, "r") : NULL;
		if (f == NULL)
			continue;
		mirror = fgets(comm, sizeof comm, f) && strcmp(comm, "gpuprobe-mirror\n") == 0;
		fclose(f);
	}
	if (d)
		closedir(d);
	printf("app: devmap mirror-thread=%d done\n", mirror);
}

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	const char *scenario = argc > 2 ? argv[2] : "basic";
	mode = argc > 1 ? argv[1] : "cudart";
	setvbuf(stdout, NULL, _IOLBF, 0);
#ifdef APP_DIRECT
	if (strcmp(mode, "direct") != 0) {
		fprintf(stderr, "app-direct: mode must be direct\n");
		return 2;
	}
	load_direct(&A);
#else
	cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	need(cuda, "libcuda.so.1");
	if (strcmp(mode, "cudart") == 0)
		load_cudart(&A);
	else if (strcmp(mode, "dlsym") == 0)
		load_dlsym(&A);
	else {
		fprintf(stderr, "app: unknown mode %s\n", mode);
		return 2;
	}
#endif
	if (strcmp(scenario, "spawn") == 0)
		return names_spawn(argc, argv);
	CHECK(A.init(0));
	load_code();
	int r = names_scenario(scenario, argc, argv);
	if (r < 0)
		r = kinds_scenario(scenario, argc, argv);
	if (r >= 0) {
		if (r > 0)
			return r;
	} else if (strcmp(scenario, "spanctx") == 0) {
		if (spanctx_scenario(f_vec) != 0)
			return 1;
	} else if (strcmp(scenario, "spanctxslow") == 0) {
		if (spanctx_slow(f_vec, argc > 3 ? atoi(argv[3]) : 60) != 0)
			return 1;
	} else if (strcmp(scenario, "basic") == 0) {
		basic(argc > 3 ? atoi(argv[3]) : 5);
	} else if (strcmp(scenario, "sassreset") == 0) {
		/* Launches, the primary context reset (its memory freed), a pause
		 * for the shim's threads, a new context, launches again. */
		int n = argc > 3 ? atoi(argv[3]) : 5;
		void *ctx;
		basic(n);
		CUresult (*reset)(int) = need(dlsym(cuda ? cuda : RTLD_DEFAULT, "cuDevicePrimaryCtxReset_v2"), "cuDevicePrimaryCtxReset_v2");
		CHECK(reset(0));
		usleep(100000);
		CHECK(A.prim_retain(&ctx, 0));
		basic(n);
	} else if (strcmp(scenario, "graph") == 0) {
		graph();
	} else if (strcmp(scenario, "capture") == 0) {
		capture();
	} else if (strcmp(scenario, "unnamed") == 0) {
		void *(*quiet)(const char *) = need(dlsym(cuda ? cuda : RTLD_DEFAULT, "mock_quiet_function"), "mock_quiet_function");
		void *f = quiet("_Z9hiddenKernv");
		CHECK(A.launch(f, 7, 1, 1, 64, 1, 1, 0, NULL, NULL, NULL));
		CHECK(A.launch(f, 7, 1, 1, 64, 1, 1, 0, NULL, NULL, NULL));
	} else if (strcmp(scenario, "rename") == 0) {
		/* The driver reuses a function handle for another kernel (as
		 * after an unload and another load): the new name must be
		 * announced before the handle's next launch. */
		void (*reuse)(void *, const char *) = need(dlsym(cuda ? cuda : RTLD_DEFAULT, "mock_reuse_function"), "mock_reuse_function");
		void *f2 = NULL;
		if (code_mod == NULL) {
			fprintf(stderr, "app: rename needs a module path (mode direct or dlsym)\n");
			return 2;
		}
		CHECK(A.launch(f_vec, 3, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
		CHECK(A.launch(f_vec, 3, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
		reuse(f_vec, "_Z7renamedv");
		CHECK(A.mod_fn(&f2, code_mod, "_Z7renamedv"));
		if (f2 != f_vec) {
			fprintf(stderr, "app: the mock did not reuse the handle\n");
			return 2;
		}
		CHECK(A.launch(f2, 3, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
		CHECK(A.launch(f2, 3, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
	} else if (strcmp(scenario, "fork") == 0) {
		CHECK(A.launch(f_vec, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
		CHECK(A.launch(f_vec, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
		fflush(stdout);
		pid_t c = fork();
		if (c == 0) {
			for (int i = 0; i < 3; i++)
				CHECK(A.launch(f_gemm, 2, 2, 1, 32, 1, 1, 0, NULL, NULL, NULL));
			_exit(0);
		}
		int st;
		waitpid(c, &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			return 1;
		CHECK(A.launch(f_vec, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
		printf("app: fork child exited 0\n");
	} else if (strcmp(scenario, "threads") == 0) {
		pthread_t t[4];
		for (int i = 0; i < 4; i++)
			pthread_create(&t[i], NULL, thread_main, (void *)(intptr_t)250);
		for (int i = 0; i < 4; i++)
			pthread_join(t[i], NULL);
	} else if (strcmp(scenario, "slowmix") == 0) { /* vecAdd and gemm in turn, 5 ms apart */
		int n = argc > 3 ? atoi(argv[3]) : 20;
		for (int i = 0; i < n; i++) {
			CHECK(A.launch(f_vec, 4, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL));
			CHECK(A.launch(f_gemm, 2, 2, 1, 16, 16, 1, 0, NULL, NULL, NULL));
			usleep(5000);
			if (i == n / 4) {
				printf("app: a quarter of the rounds done\n");
				fflush(stdout);
			}
		}
	} else if (strcmp(scenario, "slow") == 0) {
		int n = argc > 3 ? atoi(argv[3]) : 100;
		for (int i = 0; i < n; i++) {
			CHECK(A.launch(f_vec, 4, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL));
			usleep(10000);
			if (i == 0) {
				printf("app: first launch done\n");
				fflush(stdout);
			}
		}
	} else if (strcmp(scenario, "ptx") == 0 || strcmp(scenario, "ptxfile") == 0) {
		ptx(argc > 3 ? argv[3] : "", strcmp(scenario, "ptxfile") == 0);
	} else if (strcmp(scenario, "ptxagain") == 0) { /* ptx, then again after a line on stdin */
		char line[8];
		ptx(argc > 3 ? argv[3] : "", 0);
		printf("app: first load done\n");
		fflush(stdout);
		if (fgets(line, sizeof line, stdin) == NULL)
			return 2;
		ptx(argc > 3 ? argv[3] : "", 0);
	} else if (strcmp(scenario, "devmap") == 0) {
		devmap(argc > 3 ? argv[3] : "", argc - 4, argv + 4);
		return 0;
	} else if (strcmp(scenario, "async") == 0 && argc > 4) {
		async_swap(argv[3], argv[4], argc > 5 ? argv[5] : "");
	} else if (strcmp(scenario, "loadfile") == 0) {
		void *m;
		CUresult r = load_file(&m, argc > 3 ? argv[3] : "");
		printf("app: file-load r=%d\n", r);
		if (r == 0) {
			u64 a = 0xa0, b = 0xb0, c = 0xc0;
			void *params[3] = {&a, &b, &c};
			void (*last)(void ***, void ***) = need(dlsym(cuda ? cuda : RTLD_DEFAULT, "mock_last_launch"), "mock_last_launch");
			void **gp, **ge;
			CHECK(A.launch(vector_add(m), 2, 1, 1, 64, 1, 1, 0, NULL, params, NULL));
			last(&gp, &ge);
			printf("app: params-launch same=%d\n", gp == params);
			CHECK(A.unload(m));
			printf("app: unloaded\n");
		}
	} else if (strcmp(scenario, "bench") == 0) {
		long n = argc > 3 ? atol(argv[3]) : 1000000;
		spanctx_bench_setup();
		for (long i = 0; i < 1000; i++) /* warm up: first-call paths */
			A.launch(f_vec, 4, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL);
		double t0 = now_ns();
		for (long i = 0; i < n; i++)
			A.launch(f_vec, 4, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL);
		double t1 = now_ns();
		printf("bench: launches=%ld ns_per_launch=%.2f\n", n, (t1 - t0) / (double)n);
		return 0;
	} else {
		fprintf(stderr, "app: unknown scenario %s\n", scenario);
		return 2;
	}
	void (*report)(FILE *) = need(dlsym(cuda ? cuda : RTLD_DEFAULT, "mock_report"), "mock_report");
	printf("app: mode=%s scenario=%s done\n", mode, scenario);
	report(stdout);
	return 0;
}
