/* gpc.h - gpuprobe-counters, the per-node PM sampler: what its files
 * share. load.c resolves the CUDA driver and CUPTI entry points,
 * metrics.c picks the metrics the chip offers and builds the config image,
 * sample.c runs PM sampling and writes the samples, main.c ties them to
 * the command line.
 */
#ifndef GPC_H
#define GPC_H

#include <signal.h>
#include <stdio.h>

#include "cupti_pm.h"

/* Exit statuses: each failure class has its own, so a caller (the
 * collector, a script) can tell "not here" from "busy" from "broken". */
enum {
	GPC_EXIT_OK = 0,
	GPC_EXIT_USAGE = 2,
	GPC_EXIT_NO_API = 3,   /* a library or an entry point is missing */
	GPC_EXIT_API = 4,      /* a CUDA or CUPTI call failed */
	GPC_EXIT_BUSY = 5,     /* another profiler holds the device */
	GPC_EXIT_NO_METRIC = 6 /* none of the wanted metrics is offered */
};

/* The entry points, resolved once by gpc_load. */
struct gpc_api {
	gpc_curesult (*cuInit)(unsigned);
	gpc_curesult (*cuDeviceGet)(gpc_cudevice *, int);
	gpc_curesult (*cuDeviceGetName)(char *, int, gpc_cudevice);
	gpc_curesult (*cuDeviceGetUuid_v2)(unsigned char *, gpc_cudevice); /* optional: a MIG instance's own */
	gpc_curesult (*cuDeviceGetUuid)(unsigned char *, gpc_cudevice);    /* optional */
	gpc_curesult (*cuDevicePrimaryCtxRetain)(gpc_cucontext *, gpc_cudevice);
	gpc_curesult (*cuCtxSetCurrent)(gpc_cucontext);
	gpc_curesult (*cuGetErrorName)(gpc_curesult, const char **);

	gpc_result (*cuptiGetResultString)(gpc_result, const char **);
	gpc_result (*cuptiGetTimestamp)(uint64_t *); /* optional */
	gpc_result (*cuptiProfilerInitialize)(gpc_profiler_initialize_params *);
	gpc_result (*cuptiDeviceGetChipName)(gpc_device_get_chip_name_params *);

	gpc_result (*cuptiProfilerHostInitialize)(gpc_host_initialize_params *);
	gpc_result (*cuptiProfilerHostDeinitialize)(gpc_host_deinitialize_params *);
	gpc_result (*cuptiProfilerHostGetBaseMetrics)(gpc_host_get_base_metrics_params *);
	gpc_result (*cuptiProfilerHostGetSubMetrics)(gpc_host_get_sub_metrics_params *);
	gpc_result (*cuptiProfilerHostConfigAddMetrics)(gpc_host_config_add_metrics_params *);
	gpc_result (*cuptiProfilerHostGetConfigImageSize)(gpc_host_get_config_image_size_params *);
	gpc_result (*cuptiProfilerHostGetConfigImage)(gpc_host_get_config_image_params *);
	gpc_result (*cuptiProfilerHostGetNumOfPasses)(gpc_host_get_num_of_passes_params *);
	gpc_result (*cuptiProfilerHostEvaluateToGpuValues)(gpc_host_evaluate_params *);

	gpc_result (*cuptiPmSamplingGetCounterAvailability)(gpc_pm_get_counter_availability_params *);
	gpc_result (*cuptiPmSamplingEnable)(gpc_pm_enable_params *);
	gpc_result (*cuptiPmSamplingDisable)(gpc_pm_object_params *);
	gpc_result (*cuptiPmSamplingSetConfig)(gpc_pm_set_config_params *);
	gpc_result (*cuptiPmSamplingStart)(gpc_pm_object_params *);
	gpc_result (*cuptiPmSamplingStop)(gpc_pm_object_params *);
	gpc_result (*cuptiPmSamplingDecodeData)(gpc_pm_decode_params *);
	gpc_result (*cuptiPmSamplingGetCounterDataSize)(gpc_pm_get_counter_data_size_params *);
	gpc_result (*cuptiPmSamplingCounterDataImageInitialize)(gpc_pm_counter_data_init_params *);
	gpc_result (*cuptiPmSamplingGetCounterDataInfo)(gpc_pm_get_counter_data_info_params *);
	gpc_result (*cuptiPmSamplingCounterDataGetSampleInfo)(gpc_pm_get_sample_info_params *);

	char cupti_path[512];
};

extern struct gpc_api gpc;

/* gpc_load resolves every entry point; on failure it prints which library
 * or symbol is missing and returns GPC_EXIT_NO_API. */
int gpc_load(void);

/* gpc_err prints "gpuprobe-counters: CALL: NAME (CODE)[: HINT]" for a
 * failed CUPTI call and returns the exit status it maps to. */
int gpc_err(const char *call, gpc_result r);
/* gpc_cuerr does the same for a CUDA driver call. */
int gpc_cuerr(const char *call, gpc_curesult r);

#define GPC_MAX_METRICS 16

/* The metrics sampled: names as CUPTI spells them, each with the short
 * key of the default set it stands for ("" when given by the user). */
struct gpc_metrics {
	size_t n;
	const char *name[GPC_MAX_METRICS];
	const char *key[GPC_MAX_METRICS];
	/* Keys of the default set the chip does not offer, and why. */
	size_t nmissing;
	const char *missing[GPC_MAX_METRICS];
	const char *why[GPC_MAX_METRICS];
};

/* One chip's profiler host: the object and what the chip offers. */
struct gpc_host {
	const char *chip;
	uint8_t *avail; /* counter availability image */
	size_t avail_size;
	gpc_host_object *obj; /* with the chosen metrics added */
	uint8_t *config;
	size_t config_size;
};

/* gpc_host_open reads the chip name and counter availability of device
 * dev. */
int gpc_host_open(struct gpc_host *h, int dev);
/* gpc_list prints every base metric the chip offers for PM sampling, one
 * "TYPE NAME" line each, to out. */
int gpc_list(struct gpc_host *h, FILE *out);
/* gpc_choose fills m: the user's list (comma-separated, may be NULL) or
 * the default set picked from what the chip enumerates; then keeps those
 * that fit one pass and builds h's config image. */
int gpc_choose(struct gpc_host *h, const char *user, struct gpc_metrics *m);

struct gpc_opts {
	int device;
	uint64_t interval_ns;
	unsigned decode_ms;
	double duration_s; /* 0: until SIGINT or SIGTERM */
	size_t hw_buffer_mb;
	uint32_t max_samples;
	FILE *out;
};

extern volatile sig_atomic_t gpc_stop;

/* gpc_sample enables PM sampling on the device, samples until gpc_stop
 * or the duration and writes JSON lines to o->out. */
int gpc_sample(struct gpc_host *h, const struct gpc_metrics *m, const struct gpc_opts *o);

#endif
