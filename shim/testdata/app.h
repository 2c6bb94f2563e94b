/*
 * app.h - what the test application's files share (app.c: the driver
 * paths and most scenarios; app_names.c: the kernel-name scenarios).
 */
#ifndef GPUPROBE_SHIM_TEST_APP_H
#define GPUPROBE_SHIM_TEST_APP_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef int CUresult;
typedef unsigned long long u64;

typedef struct {
	unsigned gx, gy, gz, bx, by, bz, shm;
	void *stream;
	void *attrs;
	unsigned nattrs;
} launch_config;
typedef struct {
	void *func;
	unsigned gx, gy, gz, bx, by, bz, shm;
	void **params, **extra;
} kernel_node_params;

struct api {
	CUresult (*init)(unsigned);
	CUresult (*mod_load)(void **, const void *);
	CUresult (*mod_fn)(void **, void *, const char *);
	CUresult (*lib_load)(void **, const void *, void *, void **, unsigned, void *, void **, unsigned);
	CUresult (*mod_load_file)(void **, const char *);
	CUresult (*lib_load_file)(void **, const char *, int *, void **, unsigned, int *, void **, unsigned);
	CUresult (*lib_kernel)(void **, void *, const char *);
	CUresult (*kernel_fn)(void **, void *);
	CUresult (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
			   void **, void **);
	CUresult (*launch_ptsz)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
				void *, void **, void **);
	CUresult (*launch_ex)(const launch_config *, void *, void **, void **);
	CUresult (*coop)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
			 void **);
	CUresult (*stream_sync)(void *);
	CUresult (*memcpy_htod)(u64, const void *, size_t);
	CUresult (*graph_create)(void **, unsigned);
	CUresult (*graph_add)(void **, void *, void *, size_t, const kernel_node_params *);
	CUresult (*graph_inst)(void **, void *, unsigned long long);
	CUresult (*graph_launch)(void *, void *);
	CUresult (*capture_begin)(void *, int);
	CUresult (*capture_end)(void *, void **);
	CUresult (*ctx_sync)(void *); /* the version-13000 answer: takes a context */
	CUresult (*unload)(void *);   /* cuModuleUnload, or cuLibraryUnload for libraries */
	CUresult (*prim_retain)(void **, int);
	CUresult (*prim_release)(int);
	int library;                  /* load code as a library (cudart 13 style) */
};

extern void *cuda;
extern const char *mode;
extern struct api A;

#define CHECK(call)                                                                        \
	do {                                                                               \
		CUresult r_ = (call);                                                      \
		if (r_ != 0) {                                                             \
			fprintf(stderr, "app: %s failed: %d (line %d)\n", #call, r_, __LINE__); \
			exit(1);                                                           \
		}                                                                          \
	} while (0)

static inline void *need(void *p, const char *what)
{
	if (p == NULL) {
		fprintf(stderr, "app: %s not found\n", what);
		exit(1);
	}
	return p;
}

/* A fatbin container header: the code every scenario loads. */
extern const uint32_t fatbin[4];

/* mock returns the MOCK driver's test hook name (mock_libcuda.c). */
void *mock(const char *name);

/* names_scenario runs a kernel-name scenario (app_names.c); -1 when
 * scenario is not one of them. spawn runs before the driver is touched. */
int names_scenario(const char *scenario, int argc, char **argv);
int names_spawn(int argc, char **argv);

/* kinds_scenario runs the launch-kinds scenario (app_kinds.c); -1 when
 * scenario is another. */
int kinds_scenario(const char *scenario, int argc, char **argv);

/* spanctx_scenario launches f under span contexts (app_spanctx.c). */
int spanctx_scenario(void *f);
/* spanctx_bench_setup sets a span context for the bench scenario when
 * APP_SPANCTX=1 (app_spanctx.c). */
void spanctx_bench_setup(void);
/* spanctx_slow: n launches of f under one span context, 10 ms apart. */
int spanctx_slow(void *f, int n);

#endif
