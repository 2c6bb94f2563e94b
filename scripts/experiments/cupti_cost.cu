// cupti_cost.cu - what CUPTI kernel activity costs a launch-bound loop, and
// which way of learning a launch's correlation id is cheapest. An
// experiment; run by scripts/experiments/cupti-cost.sh on the GPU machine.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

__global__ void empty(void) {}

static unsigned long long nrec, nbytes;
static __thread uint32_t last_corr;
static uint64_t first_start, first_end; static uint32_t first_corr;

static void CUPTIAPI buf_req(uint8_t **buf, size_t *size, size_t *maxn)
{
	*size = 8 << 20;
	*buf = (uint8_t *)aligned_alloc(8, *size);
	*maxn = 0;
}

static void CUPTIAPI buf_done(CUcontext c, uint32_t s, uint8_t *buf, size_t size, size_t valid)
{
	CUpti_Activity *r = NULL;
	(void)c; (void)s; (void)size;
	while (cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) {
		if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || r->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
			KT *k = (KT *)r;
			if (nrec == 0) { first_start = k->start; first_end = k->end; first_corr = k->correlationId; }
			nrec++;
		}
	}
	nbytes += valid;
	free(buf);
}

static void CUPTIAPI cb(void *ud, CUpti_CallbackDomain d, CUpti_CallbackId id, const void *data)
{
	(void)ud; (void)d; (void)id;
	const CUpti_CallbackData *cd = (const CUpti_CallbackData *)data;
	if (cd->callbackSite == CUPTI_API_EXIT)
		last_corr = cd->correlationId;
}

static uint64_t now(clockid_t c) { struct timespec t; clock_gettime(c, &t); return (uint64_t)t.tv_sec * 1000000000ull + t.tv_nsec; }
static uint64_t CUPTIAPI ts_mono(void) { return now(CLOCK_MONOTONIC); }

#define CK(x) do { CUptiResult r_ = (x); if (r_ != CUPTI_SUCCESS) { const char *s_; cuptiGetResultString(r_, &s_); printf("%s: %s\n", #x, s_); } } while (0)

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "plain";
	int n = argc > 2 ? atoi(argv[2]) : 200000;
	int act = strstr(mode, "act") != NULL, usecb = strstr(mode, "cb") != NULL, ext = strstr(mode, "ext") != NULL;
	int mono = strstr(mode, "mono") != NULL;
	if (act) {
		if (mono) CK(cuptiActivityRegisterTimestampCallback(ts_mono));
		CK(cuptiActivityRegisterCallbacks(buf_req, buf_done));
		CK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
		if (ext) CK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION));
	}
	if (usecb) {
		CUpti_SubscriberHandle sub;
		CK(cuptiSubscribe(&sub, cb, NULL));
		CK(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel));
		CK(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz));
		CK(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx));
		CK(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz));
	}
	cudaFree(0);
	for (int i = 0; i < 2000; i++) empty<<<1, 1>>>();
	cudaDeviceSynchronize();
	uint64_t corrsum = 0;
	uint64_t t0 = now(CLOCK_MONOTONIC);
	for (int i = 0; i < n; i++) {
		if (ext) cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, (uint64_t)i);
		empty<<<1, 1>>>();
		if (ext) { uint64_t id; cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &id); }
		corrsum += last_corr;
	}
	cudaDeviceSynchronize();
	uint64_t t1 = now(CLOCK_MONOTONIC);
	uint64_t ct = 0, m = now(CLOCK_MONOTONIC), rt = now(CLOCK_REALTIME);
	if (act) { cuptiGetTimestamp(&ct); CK(cuptiActivityFlushAll(1)); }
	printf("mode=%-14s ns/launch=%.0f records=%llu (of %d) bytes=%llu lastcorr=%u corrsum=%llu\n", mode,
	       (double)(t1 - t0) / n, nrec, n + 2000, nbytes, last_corr, (unsigned long long)corrsum);
	if (act)
		printf("  clocks: cupti=%llu mono=%llu real=%llu first: corr=%u start=%llu dur=%llu\n", (unsigned long long)ct,
		       (unsigned long long)m, (unsigned long long)rt, first_corr, (unsigned long long)first_start,
		       (unsigned long long)(first_end - first_start));
	return 0;
}
