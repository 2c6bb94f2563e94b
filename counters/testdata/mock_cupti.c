/* mock_cupti.c - a stand-in libcupti (and, built with -DMOCK_CUDA, a
 * stand-in libcuda) for counters/sampler_test.go: the entry points
 * gpuprobe-counters resolves, with a fake chip whose PM sampler produces
 * one sample per interval of real time.
 *
 * Sample g (counted from Start) spans one interval from 1e12 + g*interval
 * (cuptiGetTimestamp reads 1e12 at Start and runs with real time), and
 * metric k of it evaluates to g + k/10, so a test can tell a lost,
 * repeated or misattributed sample from the output alone.
 *
 * Environment: MOCK_CUPTI_BUSY=1 makes cuptiPmSamplingEnable fail as when
 * another profiler holds the device. Built with -DMOCK_OLD it lacks the PM
 * sampling entry points (a CUPTI older than 12.6). MOCK_CUPTI_DECODE_FAILS=N
 * makes the first N decodes fail; MOCK_CUPTI_DECODE_RESTARTS=1 makes every
 * decode start the image over (only the new samples in it).
 * MOCK_CUPTI_DECODE_US=N and MOCK_CUPTI_EVAL_US=N make each decode, each
 * evaluation of a sample, take N µs more (a sleep), so that a test can
 * tell where the sampler's time went.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/cupti_pm.h"

#ifdef MOCK_CUDA
int cuInit(unsigned f) { (void)f; return 0; }
int cuDeviceGet(int *d, int i) { *d = i; return i == 0 ? 0 : 101; }
int cuDeviceGetName(char *n, int len, int d) { (void)d; strncpy(n, "Mock GPU", (size_t)len); return 0; }
/* The UUID: bytes 0x10, 0x11, ... 0x1f. */
int cuDeviceGetUuid_v2(unsigned char *u, int d)
{
	(void)d;
	for (int i = 0; i < 16; i++)
		u[i] = (unsigned char)(0x10 + i);
	return 0;
}
int cuDevicePrimaryCtxRetain(void **c, int d) { (void)d; *c = (void *)1; return 0; }
int cuCtxSetCurrent(void *c) { (void)c; return 0; }
int cuGetErrorName(int e, const char **s) { (void)e; *s = "CUDA_ERROR_MOCK"; return 0; }
#else

int cuptiGetResultString(int r, const char **s)
{
	*s = r == GPC_ERROR_INVALID_OPERATION ? "CUPTI_ERROR_INVALID_OPERATION"
	     : r == GPC_ERROR_INVALID_METRIC_NAME ? "CUPTI_ERROR_INVALID_METRIC_NAME"
						  : "CUPTI_ERROR_MOCK";
	return 0;
}
int cuptiGetTimestamp(uint64_t *t);
int cuptiProfilerInitialize(gpc_profiler_initialize_params *p) { (void)p; return 0; }
int cuptiDeviceGetChipName(gpc_device_get_chip_name_params *p) { p->pChipName = "MOCK100"; return 0; }

/* The chip: base metrics per type and their submetrics. tensor has only
 * the gmma name, so the default set's first tensor names miss; there is no
 * L2 hit rate; sm__warps_active's submetric needs a second pass. */
static const char *counters[] = {"sm__cycles_active", "dram__bytes_read", "dram__bytes_write",
				 "sm__pipe_tensor_op_gmma_cycles_active", "sm__warps_active"};
static const char *ratios[] = {"sm__average_thing"};
static const char *throughputs[] = {"sm__throughput"};
static const char *counter_subs[] = {"avg", ".avg.pct_of_peak_sustained_elapsed", "sum.per_second",
				     "avg.pct_of_peak_sustained_active"};
static const char *throughput_subs[] = {"avg.pct_of_peak_sustained_elapsed"};

struct gpc_host_object {
	int n;
	int twopass;
};

int cuptiProfilerHostInitialize(gpc_host_initialize_params *p)
{
	p->pHostObject = calloc(1, sizeof(struct gpc_host_object));
	return 0;
}
int cuptiProfilerHostDeinitialize(gpc_host_deinitialize_params *p) { free(p->pHostObject); return 0; }

int cuptiProfilerHostGetBaseMetrics(gpc_host_get_base_metrics_params *p)
{
	switch (p->metricType) {
	case 0: p->ppMetricNames = counters; p->numMetrics = 5; break;
	case 1: p->ppMetricNames = ratios; p->numMetrics = 1; break;
	default: p->ppMetricNames = throughputs; p->numMetrics = 1; break;
	}
	return 0;
}

int cuptiProfilerHostGetSubMetrics(gpc_host_get_sub_metrics_params *p)
{
	if (p->metricType == 2) {
		p->ppSubMetrics = throughput_subs;
		p->numOfSubmetrics = 1;
	} else {
		p->ppSubMetrics = counter_subs;
		p->numOfSubmetrics = 4;
	}
	return 0;
}

int cuptiProfilerHostConfigAddMetrics(gpc_host_config_add_metrics_params *p)
{
	for (size_t i = 0; i < p->numMetrics; i++) {
		const char *m = p->ppMetricNames[i];
		if (strncmp(m, "sm__", 4) && strncmp(m, "dram__", 6))
			return GPC_ERROR_INVALID_METRIC_NAME;
		if (strstr(m, "warps_active"))
			p->pHostObject->twopass = 1;
	}
	p->pHostObject->n += (int)p->numMetrics;
	return 0;
}
int cuptiProfilerHostGetConfigImageSize(gpc_host_get_config_image_size_params *p) { p->configImageSize = 16; return 0; }
int cuptiProfilerHostGetConfigImage(gpc_host_get_config_image_params *p)
{
	memset(p->pConfigImage, p->pHostObject->twopass ? 2 : 1, p->configImageSize);
	return 0;
}
int cuptiProfilerHostGetNumOfPasses(gpc_host_get_num_of_passes_params *p)
{
	p->numOfPasses = p->pConfigImage[0];
	return 0;
}

/* delay sleeps the µs that environment variable name gives, if any; it
 * is read once per name through *us (-1: not read yet). */
static void delay(const char *name, long *us)
{
	if (*us < 0) {
		const char *v = getenv(name);
		*us = v ? atol(v) : 0;
	}
	if (*us > 0) {
		struct timespec ts = {.tv_sec = *us / 1000000, .tv_nsec = (*us % 1000000) * 1000};
		nanosleep(&ts, NULL);
	}
}

/* The counter data image: a header, then nothing (values are computed). */
struct image {
	size_t cap, count;
	uint64_t first; /* global index of sample 0 */
};

int cuptiProfilerHostEvaluateToGpuValues(gpc_host_evaluate_params *p)
{
	static long us = -1;
	delay("MOCK_CUPTI_EVAL_US", &us);
	const struct image *im = (const void *)p->pCounterDataImage;
	if (p->rangeIndex >= im->count)
		return GPC_ERROR_INVALID_PARAMETER;
	for (size_t k = 0; k < p->numMetrics; k++)
		p->pMetricValues[k] = (double)(im->first + p->rangeIndex) + (double)k / 10;
	return 0;
}

#ifndef MOCK_OLD
static struct {
	uint64_t interval, t0, produced_at_stop, decoded;
	int running;
} pm;

static uint64_t now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t produced(void)
{
	return pm.running ? (now() - pm.t0) / pm.interval : pm.produced_at_stop;
}

int cuptiGetTimestamp(uint64_t *t)
{
	*t = 1000000000000ull + (pm.running ? now() - pm.t0 : 0);
	return 0;
}

int cuptiPmSamplingGetCounterAvailability(gpc_pm_get_counter_availability_params *p)
{
	p->counterAvailabilityImageSize = 8;
	return 0;
}
int cuptiPmSamplingEnable(gpc_pm_enable_params *p)
{
	const char *busy = getenv("MOCK_CUPTI_BUSY");
	if (busy && *busy == '1')
		return GPC_ERROR_INVALID_OPERATION;
	p->pPmSamplingObject = (gpc_pm_object *)&pm;
	return 0;
}
int cuptiPmSamplingDisable(gpc_pm_object_params *p) { (void)p; return 0; }
int cuptiPmSamplingSetConfig(gpc_pm_set_config_params *p)
{
	if (p->structSize != GPC_SIZE(gpc_pm_set_config_params, hwBufferAppendMode) || p->configSize != 16 ||
	    p->pConfig[0] != 1 || p->triggerMode != GPC_TRIGGER_GPU_TIME_INTERVAL || !p->samplingInterval)
		return GPC_ERROR_INVALID_PARAMETER;
	pm.interval = p->samplingInterval;
	return 0;
}
int cuptiPmSamplingStart(gpc_pm_object_params *p) { (void)p; pm.t0 = now(); pm.running = 1; return 0; }
int cuptiPmSamplingStop(gpc_pm_object_params *p)
{
	(void)p;
	pm.produced_at_stop = produced();
	pm.running = 0;
	return 0;
}
int cuptiPmSamplingGetCounterDataSize(gpc_pm_get_counter_data_size_params *p)
{
	p->counterDataSize = sizeof(struct image) + p->maxSamples;
	return 0;
}
int cuptiPmSamplingCounterDataImageInitialize(gpc_pm_counter_data_init_params *p)
{
	struct image *im = (void *)p->pCounterData;
	im->cap = p->counterDataSize - sizeof *im;
	im->count = 0;
	im->first = pm.decoded;
	return 0;
}
int cuptiPmSamplingDecodeData(gpc_pm_decode_params *p)
{
	static long fails = -1, us = -1;
	delay("MOCK_CUPTI_DECODE_US", &us);
	if (fails < 0) {
		const char *f = getenv("MOCK_CUPTI_DECODE_FAILS");
		fails = f ? atol(f) : 0;
	}
	if (fails > 0) {
		fails--;
		return 999; /* CUPTI_ERROR_UNKNOWN */
	}
	struct image *im = (void *)p->pCounterDataImage;
	const char *restart = getenv("MOCK_CUPTI_DECODE_RESTARTS");
	if (restart && *restart == '1') {
		im->count = 0;
		im->first = pm.decoded;
	}
	uint64_t avail = produced() - pm.decoded, room = im->cap - im->count;
	uint64_t n = avail < room ? avail : room;
	im->count += n;
	pm.decoded += n;
	p->decodeStopReason = n == room ? GPC_DECODE_STOP_COUNTER_DATA_FULL : GPC_DECODE_STOP_END_OF_RECORDS;
	p->overflow = 0;
	return 0;
}
int cuptiPmSamplingGetCounterDataInfo(gpc_pm_get_counter_data_info_params *p)
{
	const struct image *im = (const void *)p->pCounterDataImage;
	p->numTotalSamples = im->cap;
	p->numPopulatedSamples = p->numCompletedSamples = im->count;
	return 0;
}
int cuptiPmSamplingCounterDataGetSampleInfo(gpc_pm_get_sample_info_params *p)
{
	const struct image *im = (const void *)p->pCounterDataImage;
	if (p->sampleIndex >= im->count)
		return GPC_ERROR_INVALID_PARAMETER;
	p->startTimestamp = 1000000000000ull + (im->first + p->sampleIndex) * pm.interval;
	p->endTimestamp = p->startTimestamp + pm.interval;
	return 0;
}
#endif
#endif
