/* sample.c - PM sampling on one device, written out as JSON lines.
 *
 * The GPU writes a sample of every configured counter each interval into
 * a hardware buffer; this thread decodes the buffer into a counter data
 * image every decode period, evaluates each completed sample to metric
 * values, and writes one line per sample:
 *
 *   {"type":"sample","start":T0,"end":T1,"v":[V0,V1,...]}
 *
 * T0 and T1 are CUPTI's timestamps of the sample (ns), the values in the
 * order of the header's "metrics". The first line is the header
 * ({"type":"meta",...}: device ordinal, its UUID as 32 hex digits
 * (cuDeviceGetUuid_v2's, a MIG instance's own, else cuDeviceGetUuid's;
 * "" when the driver has neither), chip, interval, metrics, the
 * default-set entries left out and why, a clock reading), the last a summary
 * ({"type":"end",...}: samples, decodes, hardware-buffer overflows, the
 * time spent decoding (decode_ns_total, decode_ns_max: all decode calls,
 * the longest) and evaluating and writing samples (eval_ns_total), the
 * image's size in bytes (image_bytes), the sampler's own CPU time, another
 * clock reading). The clock readings pair
 * cuptiGetTimestamp with CLOCK_REALTIME and CLOCK_MONOTONIC, so that a
 * reader can map sample times onto host time.
 *
 * The image holds max_samples samples; when a decode fills it, the
 * completed samples are written and the image is initialised again. A
 * decode is taken to append to the image; should one start the image
 * over instead, the sample last written is no longer where it was, and
 * writing resumes at the first sample after it (resync), so no sample is
 * lost or written twice either way.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "gpc.h"

volatile sig_atomic_t gpc_stop;

#define GPC_MAX_DECODE_FAILURES 50

struct run {
	struct gpc_host *h;
	const struct gpc_metrics *m;
	const struct gpc_opts *o;
	gpc_pm_object *pm;
	uint8_t *image;
	size_t image_size;
	size_t written;      /* samples of the current image already written */
	uint64_t last_start; /* start of the sample last written; 0: none */
	double *values;
	uint64_t samples, decodes, overflows, reinits, eval_errors, decode_errors, resyncs;
	unsigned failing; /* consecutive failed decodes */
	uint64_t decode_ns, decode_ns_max; /* in cuptiPmSamplingDecodeData: all calls, the longest */
	uint64_t eval_ns;                  /* in write_sample and the flush after: evaluating and writing */
};

static uint64_t now_ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* clock_json writes "clock":{...}: CUPTI's timestamp between two
 * CLOCK_REALTIME and CLOCK_MONOTONIC readings. */
static void clock_json(FILE *f)
{
	uint64_t rt0 = now_ns(CLOCK_REALTIME), mo0 = now_ns(CLOCK_MONOTONIC), cu = 0;
	int have = gpc.cuptiGetTimestamp && gpc.cuptiGetTimestamp(&cu) == GPC_SUCCESS;
	uint64_t rt1 = now_ns(CLOCK_REALTIME), mo1 = now_ns(CLOCK_MONOTONIC);
	fprintf(f, "\"clock\":{\"realtime_ns\":%llu,\"monotonic_ns\":%llu", (unsigned long long)(rt0 / 2 + rt1 / 2),
		(unsigned long long)(mo0 / 2 + mo1 / 2));
	if (have)
		fprintf(f, ",\"cupti_ns\":%llu", (unsigned long long)cu);
	fprintf(f, "}");
}

static void names_json(FILE *f, const char *field, const char *const *v, size_t n)
{
	fprintf(f, "\"%s\":[", field);
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%s\"%s\"", i ? "," : "", v[i]);
	fprintf(f, "]");
}

/* uuid_hex writes device dev's UUID as 32 hex digits into out (33
 * bytes), or "" when the driver gives none. */
static void uuid_hex(gpc_cudevice dev, char *out)
{
	unsigned char u[16];
	out[0] = 0;
	if ((gpc.cuDeviceGetUuid_v2 && gpc.cuDeviceGetUuid_v2(u, dev) == 0) ||
	    (gpc.cuDeviceGetUuid && gpc.cuDeviceGetUuid(u, dev) == 0))
		for (int i = 0; i < 16; i++)
			snprintf(out + 2 * i, 3, "%02x", u[i]);
}

static void header(const struct run *r, const char *devname, const char *uuid)
{
	FILE *f = r->o->out;
	fprintf(f, "{\"type\":\"meta\",\"device\":%d,\"uuid\":\"%s\",\"name\":\"%s\",\"chip\":\"%s\",\"cupti\":\"%s\",\"interval_ns\":%llu,",
		r->o->device, uuid, devname, r->h->chip, gpc.cupti_path, (unsigned long long)r->o->interval_ns);
	names_json(f, "metrics", r->m->name, r->m->n);
	fprintf(f, ",");
	names_json(f, "keys", r->m->key, r->m->n);
	fprintf(f, ",\"left_out\":{");
	for (size_t i = 0; i < r->m->nmissing; i++)
		fprintf(f, "%s\"%s\":\"%s\"", i ? "," : "", r->m->missing[i], r->m->why[i]);
	fprintf(f, "},");
	clock_json(f);
	fprintf(f, "}\n");
	fflush(f);
}

static void footer(const struct run *r, uint64_t wall_ns)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	double cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
		     ru.ru_stime.tv_usec / 1e6;
	FILE *f = r->o->out;
	fprintf(f,
		"{\"type\":\"end\",\"samples\":%llu,\"decodes\":%llu,\"overflows\":%llu,\"image_reinits\":%llu,"
		"\"eval_errors\":%llu,\"decode_errors\":%llu,\"resyncs\":%llu,\"decode_ns_total\":%llu,\"decode_ns_max\":%llu,"
		"\"eval_ns_total\":%llu,\"image_bytes\":%zu,\"wall_s\":%.3f,\"cpu_s\":%.3f,\"max_rss_kib\":%ld,",
		(unsigned long long)r->samples, (unsigned long long)r->decodes, (unsigned long long)r->overflows,
		(unsigned long long)r->reinits, (unsigned long long)r->eval_errors, (unsigned long long)r->decode_errors,
		(unsigned long long)r->resyncs, (unsigned long long)r->decode_ns, (unsigned long long)r->decode_ns_max,
		(unsigned long long)r->eval_ns, r->image_size, wall_ns / 1e9, cpu, ru.ru_maxrss);
	clock_json(f);
	fprintf(f, "}\n");
	fflush(f);
	fprintf(stderr,
		"gpuprobe-counters: %llu samples in %.2f s, %llu decodes (%.0f us each, longest %.0f us), "
		"evaluation %.1f us a sample, %llu overflows, cpu %.3f s (%.2f%% of one core), max rss %ld KiB, "
		"image %zu bytes\n",
		(unsigned long long)r->samples, wall_ns / 1e9, (unsigned long long)r->decodes,
		r->decodes ? r->decode_ns / 1e3 / r->decodes : 0.0, r->decode_ns_max / 1e3,
		r->samples ? r->eval_ns / 1e3 / r->samples : 0.0, (unsigned long long)r->overflows, cpu,
		wall_ns ? 100.0 * cpu / (wall_ns / 1e9) : 0.0, ru.ru_maxrss, r->image_size);
}

static int image_init(struct run *r)
{
	gpc_pm_counter_data_init_params p = {
		.structSize = GPC_SIZE(gpc_pm_counter_data_init_params, pCounterData),
		.pPmSamplingObject = r->pm,
		.counterDataSize = r->image_size,
		.pCounterData = r->image};
	gpc_result e = gpc.cuptiPmSamplingCounterDataImageInitialize(&p);
	r->written = 0;
	return e == GPC_SUCCESS ? 0 : gpc_err("cuptiPmSamplingCounterDataImageInitialize", e);
}

/* write_sample evaluates sample i of the image and writes its line. */
static void write_sample(struct run *r, size_t i)
{
	gpc_pm_get_sample_info_params si = {.structSize = GPC_SIZE(gpc_pm_get_sample_info_params, endTimestamp),
					    .pPmSamplingObject = r->pm,
					    .pCounterDataImage = r->image,
					    .counterDataImageSize = r->image_size,
					    .sampleIndex = i};
	gpc_host_evaluate_params ev = {.structSize = GPC_SIZE(gpc_host_evaluate_params, pMetricValues),
				       .pHostObject = r->h->obj,
				       .pCounterDataImage = r->image,
				       .counterDataImageSize = r->image_size,
				       .rangeIndex = i,
				       .ppMetricNames = (const char **)r->m->name,
				       .numMetrics = r->m->n,
				       .pMetricValues = r->values};
	gpc_result e;
	if ((e = gpc.cuptiPmSamplingCounterDataGetSampleInfo(&si)) != GPC_SUCCESS ||
	    (e = gpc.cuptiProfilerHostEvaluateToGpuValues(&ev)) != GPC_SUCCESS) {
		if (r->eval_errors++ == 0)
			gpc_err("cuptiPmSamplingCounterDataGetSampleInfo/cuptiProfilerHostEvaluateToGpuValues", e);
		return;
	}
	FILE *f = r->o->out;
	fprintf(f, "{\"type\":\"sample\",\"start\":%llu,\"end\":%llu,\"v\":[", (unsigned long long)si.startTimestamp,
		(unsigned long long)si.endTimestamp);
	/* A ratio over an idle sample (occupancy of no active cycles) is
	 * NaN: JSON has no NaN, so it is written as null. */
	for (size_t k = 0; k < r->m->n; k++) {
		if (isfinite(r->values[k]))
			fprintf(f, k ? ",%.6g" : "%.6g", r->values[k]);
		else
			fprintf(f, k ? ",null" : "null");
	}
	fprintf(f, "]}\n");
	r->samples++;
	r->last_start = si.startTimestamp;
}

/* sample_start is sample i's start timestamp, 0 when CUPTI has none. */
static uint64_t sample_start(const struct run *r, size_t i)
{
	gpc_pm_get_sample_info_params si = {.structSize = GPC_SIZE(gpc_pm_get_sample_info_params, endTimestamp),
					    .pPmSamplingObject = r->pm,
					    .pCounterDataImage = r->image,
					    .counterDataImageSize = r->image_size,
					    .sampleIndex = i};
	return gpc.cuptiPmSamplingCounterDataGetSampleInfo(&si) == GPC_SUCCESS ? si.startTimestamp : 0;
}

/* resync finds where writing resumes in an image of n completed samples:
 * after the sample last written, wherever the decode left it. */
static void resync(struct run *r, size_t n)
{
	if (!r->written || !r->last_start)
		return;
	if (r->written <= n && sample_start(r, r->written - 1) == r->last_start)
		return; /* appended, as expected */
	size_t i = 0;
	while (i < n && sample_start(r, i) <= r->last_start)
		i++;
	if (r->resyncs++ == 0)
		fprintf(stderr, "gpuprobe-counters: a decode started the counter data image over; resuming at sample %zu\n", i);
	r->written = i;
}

/* drain decodes the hardware buffer until it is empty, writing every
 * completed sample. */
static int drain(struct run *r)
{
	for (int round = 0; round < 64; round++) {
		uint64_t t0 = now_ns(CLOCK_MONOTONIC);
		gpc_pm_decode_params d = {.structSize = GPC_SIZE(gpc_pm_decode_params, overflow),
					  .pPmSamplingObject = r->pm,
					  .pCounterDataImage = r->image,
					  .counterDataImageSize = r->image_size};
		gpc_result e = gpc.cuptiPmSamplingDecodeData(&d);
		uint64_t dt = now_ns(CLOCK_MONOTONIC) - t0;
		r->decode_ns += dt;
		if (dt > r->decode_ns_max)
			r->decode_ns_max = dt;
		r->decodes++;
		if (e == GPC_ERROR_OUT_OF_MEMORY || d.overflow) {
			if (r->overflows++ == 0)
				fprintf(stderr, "gpuprobe-counters: the hardware buffer overflowed: samples lost "
						"(raise --hw-buffer-mb or --interval-ns, or lower --decode-ms)\n");
		} else if (e != GPC_SUCCESS) {
			/* Reported once; fatal only when it persists (a second of
			 * decode periods at the default). */
			if (r->decode_errors++ == 0)
				gpc_err("cuptiPmSamplingDecodeData", e);
			if (++r->failing >= GPC_MAX_DECODE_FAILURES)
				return gpc_err("cuptiPmSamplingDecodeData (persisting)", e);
			return 0;
		}
		r->failing = 0;
		gpc_pm_get_counter_data_info_params ci = {
			.structSize = GPC_SIZE(gpc_pm_get_counter_data_info_params, numCompletedSamples),
			.pCounterDataImage = r->image,
			.counterDataImageSize = r->image_size};
		if ((e = gpc.cuptiPmSamplingGetCounterDataInfo(&ci)) != GPC_SUCCESS)
			return gpc_err("cuptiPmSamplingGetCounterDataInfo", e);
		resync(r, ci.numCompletedSamples);
		/* Timed apart from the decode, so that the end line tells whether
		 * the sampler's time goes to decoding or to evaluating samples. */
		t0 = now_ns(CLOCK_MONOTONIC);
		for (size_t i = r->written; i < ci.numCompletedSamples; i++)
			write_sample(r, i);
		if (ci.numCompletedSamples > r->written)
			r->written = ci.numCompletedSamples;
		fflush(r->o->out);
		r->eval_ns += now_ns(CLOCK_MONOTONIC) - t0;
		int full = d.decodeStopReason == GPC_DECODE_STOP_COUNTER_DATA_FULL ||
			   (ci.numTotalSamples && ci.numCompletedSamples >= ci.numTotalSamples);
		if (!full)
			return 0;
		r->reinits++;
		int rc = image_init(r);
		if (rc)
			return rc;
	}
	return 0;
}

static int pm_call(gpc_result (*fn)(gpc_pm_object_params *), gpc_pm_object *pm, const char *name)
{
	gpc_pm_object_params p = {.structSize = GPC_SIZE(gpc_pm_object_params, pPmSamplingObject), .pPmSamplingObject = pm};
	gpc_result e = fn(&p);
	return e == GPC_SUCCESS ? 0 : gpc_err(name, e);
}

/* setup enables and configures PM sampling and allocates the image. */
static int setup(struct run *r)
{
	gpc_pm_enable_params en = {.structSize = GPC_SIZE(gpc_pm_enable_params, pPmSamplingObject),
				   .deviceIndex = (size_t)r->o->device};
	gpc_result e = gpc.cuptiPmSamplingEnable(&en);
	if (e != GPC_SUCCESS)
		return gpc_err("cuptiPmSamplingEnable", e);
	r->pm = en.pPmSamplingObject;

	gpc_pm_set_config_params sc = {.structSize = GPC_SIZE(gpc_pm_set_config_params, hwBufferAppendMode),
				       .pPmSamplingObject = r->pm,
				       .configSize = r->h->config_size,
				       .pConfig = r->h->config,
				       .hardwareBufferSize = r->o->hw_buffer_mb << 20,
				       .samplingInterval = r->o->interval_ns,
				       .triggerMode = GPC_TRIGGER_GPU_TIME_INTERVAL,
				       .hwBufferAppendMode = GPC_APPEND_KEEP_OLDEST};
	if ((e = gpc.cuptiPmSamplingSetConfig(&sc)) == GPC_ERROR_INVALID_PARAMETER) {
		/* CUPTI 12.6 and 12.7: the struct ends before the append mode. */
		sc.structSize = GPC_SET_CONFIG_SIZE_12_6;
		e = gpc.cuptiPmSamplingSetConfig(&sc);
	}
	if (e != GPC_SUCCESS)
		return gpc_err("cuptiPmSamplingSetConfig", e);

	gpc_pm_get_counter_data_size_params cs = {
		.structSize = GPC_SIZE(gpc_pm_get_counter_data_size_params, counterDataSize),
		.pPmSamplingObject = r->pm,
		.pMetricNames = (const char **)r->m->name,
		.numMetrics = r->m->n,
		.maxSamples = r->o->max_samples};
	if ((e = gpc.cuptiPmSamplingGetCounterDataSize(&cs)) != GPC_SUCCESS)
		return gpc_err("cuptiPmSamplingGetCounterDataSize", e);
	r->image_size = cs.counterDataSize;
	r->image = malloc(r->image_size);
	r->values = calloc(r->m->n, sizeof *r->values);
	if (!r->image || !r->values) {
		fprintf(stderr, "gpuprobe-counters: cannot allocate a %zu-byte counter data image\n", r->image_size);
		return GPC_EXIT_API;
	}
	return image_init(r);
}

/* nap sleeps ms milliseconds or until a signal sets gpc_stop. */
static void nap(unsigned ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
	while (!gpc_stop && nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

int gpc_sample(struct gpc_host *h, const struct gpc_metrics *m, const struct gpc_opts *o)
{
	struct run r = {.h = h, .m = m, .o = o};
	char devname[128] = "", uuid[33] = "";
	gpc_cudevice dev;
	if (gpc.cuDeviceGet(&dev, o->device) == 0) {
		gpc.cuDeviceGetName(devname, sizeof devname, dev);
		uuid_hex(dev, uuid);
	}
	int rc = setup(&r);
	if (!rc)
		rc = pm_call(gpc.cuptiPmSamplingStart, r.pm, "cuptiPmSamplingStart");
	if (rc) {
		if (r.pm)
			pm_call(gpc.cuptiPmSamplingDisable, r.pm, "cuptiPmSamplingDisable");
		return rc;
	}
	header(&r, devname, uuid);
	uint64_t t0 = now_ns(CLOCK_MONOTONIC);
	uint64_t until = o->duration_s > 0 ? t0 + (uint64_t)(o->duration_s * 1e9) : 0;
	while (!gpc_stop && !rc && (!until || now_ns(CLOCK_MONOTONIC) < until)) {
		nap(o->decode_ms);
		rc = drain(&r);
	}
	int src = pm_call(gpc.cuptiPmSamplingStop, r.pm, "cuptiPmSamplingStop");
	if (!rc)
		rc = drain(&r);
	if (!rc)
		rc = src;
	footer(&r, now_ns(CLOCK_MONOTONIC) - t0);
	pm_call(gpc.cuptiPmSamplingDisable, r.pm, "cuptiPmSamplingDisable");
	free(r.image);
	free(r.values);
	return rc;
}
