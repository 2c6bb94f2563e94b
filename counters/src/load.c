/* load.c - resolves the CUDA driver and CUPTI entry points with dlopen and
 * dlsym, so the sampler needs neither at build time and says exactly which
 * one is missing at run time.
 *
 * libcupti is looked for in GPUPROBE_CUPTI (a path), then by soname (the
 * loader's path: LD_LIBRARY_PATH, ld.so.cache), then in the toolkit
 * (CUDA_HOME, /usr/local/cuda). PM sampling came with CUPTI 12.6: an
 * older libcupti lacks cuptiPmSamplingEnable and the sampler exits with
 * GPC_EXIT_NO_API naming it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpc.h"

struct gpc_api gpc;

struct sym {
	const char *name;
	void **slot;
	int optional;
};

#define S(f) {#f, (void **)&gpc.f, 0}
#define OPT(f) {#f, (void **)&gpc.f, 1}

static const struct sym cuda_syms[] = {
	S(cuInit),
	S(cuDeviceGet),
	S(cuDeviceGetName),
	OPT(cuDeviceGetUuid_v2),
	OPT(cuDeviceGetUuid),
	S(cuDevicePrimaryCtxRetain),
	S(cuCtxSetCurrent),
	S(cuGetErrorName),
};

static const struct sym cupti_syms[] = {
	S(cuptiGetResultString),
	OPT(cuptiGetTimestamp),
	S(cuptiProfilerInitialize),
	S(cuptiDeviceGetChipName),
	S(cuptiProfilerHostInitialize),
	S(cuptiProfilerHostDeinitialize),
	S(cuptiProfilerHostGetBaseMetrics),
	S(cuptiProfilerHostGetSubMetrics),
	S(cuptiProfilerHostConfigAddMetrics),
	S(cuptiProfilerHostGetConfigImageSize),
	S(cuptiProfilerHostGetConfigImage),
	S(cuptiProfilerHostGetNumOfPasses),
	S(cuptiProfilerHostEvaluateToGpuValues),
	S(cuptiPmSamplingGetCounterAvailability),
	S(cuptiPmSamplingEnable),
	S(cuptiPmSamplingDisable),
	S(cuptiPmSamplingSetConfig),
	S(cuptiPmSamplingStart),
	S(cuptiPmSamplingStop),
	S(cuptiPmSamplingDecodeData),
	S(cuptiPmSamplingGetCounterDataSize),
	S(cuptiPmSamplingCounterDataImageInitialize),
	S(cuptiPmSamplingGetCounterDataInfo),
	S(cuptiPmSamplingCounterDataGetSampleInfo),
};

/* resolve fills the slots of syms from h; the first required symbol
 * missing is reported against lib. */
static int resolve(void *h, const char *lib, const struct sym *syms, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		*syms[i].slot = dlsym(h, syms[i].name);
		if (!*syms[i].slot && !syms[i].optional) {
			fprintf(stderr, "gpuprobe-counters: %s has no %s%s\n", lib, syms[i].name,
				strncmp(syms[i].name, "cupti", 5) == 0
					? " (PM sampling and the profiler host API need CUPTI 12.6 or newer: CUDA 12.6+)"
					: "");
			return GPC_EXIT_NO_API;
		}
	}
	return 0;
}

/* open_cupti tries the places libcupti lives, in order. */
static void *open_cupti(void)
{
	char buf[sizeof gpc.cupti_path - 32];
	const char *env = getenv("GPUPROBE_CUPTI");
	const char *home = getenv("CUDA_HOME");
	const char *names[] = {"libcupti.so", "libcupti.so.13", "libcupti.so.12"};
	void *h;

	if (env && *env) {
		snprintf(gpc.cupti_path, sizeof gpc.cupti_path, "%s", env);
		return dlopen(env, RTLD_NOW | RTLD_LOCAL);
	}
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		if ((h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL))) {
			snprintf(gpc.cupti_path, sizeof gpc.cupti_path, "%s", names[i]);
			return h;
		}
	}
	const char *dirs[] = {home, "/usr/local/cuda"};
	for (size_t i = 0; i < 2; i++) {
		if (!dirs[i] || !*dirs[i])
			continue;
		snprintf(buf, sizeof buf, "%s/extras/CUPTI/lib64/libcupti.so", dirs[i]);
		if ((h = dlopen(buf, RTLD_NOW | RTLD_LOCAL))) {
			snprintf(gpc.cupti_path, sizeof gpc.cupti_path, "%s", buf);
			return h;
		}
	}
	snprintf(gpc.cupti_path, sizeof gpc.cupti_path, "libcupti.so");
	return NULL;
}

int gpc_load(void)
{
	/* CUPTI first: its symbols decide whether PM sampling exists here,
	 * with or without a GPU. */
	void *cupti = open_cupti();
	if (!cupti) {
		fprintf(stderr, "gpuprobe-counters: cannot load %s: %s (set GPUPROBE_CUPTI to its path)\n",
			gpc.cupti_path, dlerror());
		return GPC_EXIT_NO_API;
	}
	int rc = resolve(cupti, gpc.cupti_path, cupti_syms, sizeof cupti_syms / sizeof cupti_syms[0]);
	if (rc)
		return rc;
	const char *cuda_lib = getenv("GPUPROBE_LIBCUDA");
	if (!cuda_lib || !*cuda_lib)
		cuda_lib = "libcuda.so.1";
	void *cuda = dlopen(cuda_lib, RTLD_NOW | RTLD_GLOBAL);
	if (!cuda) {
		fprintf(stderr, "gpuprobe-counters: cannot load %s: %s (no NVIDIA driver here)\n", cuda_lib, dlerror());
		return GPC_EXIT_NO_API;
	}
	return resolve(cuda, cuda_lib, cuda_syms, sizeof cuda_syms / sizeof cuda_syms[0]);
}

/* hint says what a result usually means for the call that returned it. */
static const char *hint(const char *call, gpc_result r)
{
	switch (r) {
	case GPC_ERROR_INSUFFICIENT_PRIVILEGES:
		return "profiling is restricted to admin users (NVreg_RestrictProfilingToAdminUsers=1): run as root or "
		       "with CAP_SYS_ADMIN, or set the driver option to 0";
	case GPC_ERROR_HARDWARE_BUSY:
	case GPC_ERROR_OLD_PROFILER_API_INITIALIZED:
		return "another profiler holds the device's counters (Nsight Compute, Nsight Systems' GPU metrics, "
		       "DCGM profiling, or an application's own CUPTI profiling)";
	case GPC_ERROR_INVALID_OPERATION:
		if (strstr(call, "Enable") || strstr(call, "Availability"))
			return "PM sampling is already enabled on this device, most likely by another sampler or "
			       "profiler (Nsight Compute, Nsight Systems' GPU metrics, DCGM profiling)";
		return NULL;
	case GPC_ERROR_NOT_SUPPORTED:
		return "this GPU or configuration does not support PM sampling (Turing or newer; not under "
		       "vGPU or confidential computing)";
	default:
		return NULL;
	}
}

int gpc_err(const char *call, gpc_result r)
{
	const char *s = NULL;
	if (!gpc.cuptiGetResultString || gpc.cuptiGetResultString(r, &s) != GPC_SUCCESS || !s)
		s = "unknown CUPTI result";
	const char *h = hint(call, r);
	fprintf(stderr, "gpuprobe-counters: %s: %s (%d)%s%s\n", call, s, r, h ? ": " : "", h ? h : "");
	if (r == GPC_ERROR_HARDWARE_BUSY || r == GPC_ERROR_OLD_PROFILER_API_INITIALIZED ||
	    (r == GPC_ERROR_INVALID_OPERATION && (strstr(call, "Enable") || strstr(call, "Availability"))))
		return GPC_EXIT_BUSY;
	return GPC_EXIT_API;
}

int gpc_cuerr(const char *call, gpc_curesult r)
{
	const char *s = NULL;
	if (!gpc.cuGetErrorName || gpc.cuGetErrorName(r, &s) != 0 || !s)
		s = "unknown CUresult";
	fprintf(stderr, "gpuprobe-counters: %s: %s (%d)\n", call, s, r);
	return GPC_EXIT_API;
}
