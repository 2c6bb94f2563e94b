/* cupti_pm.h - the part of the CUDA driver and CUPTI ABI that
 * gpuprobe-counters uses: PM sampling (cupti_pmsampling.h, CUPTI 12.6+),
 * the profiler host API (cupti_profiler_host.h), the chip name
 * (cupti_target.h) and profiler initialisation (cupti_profiler_target.h).
 *
 * Declared here, not included, so that the sampler builds with gcc alone
 * on machines whose toolkit lacks those headers; every struct offset and
 * enum value is checked against the real headers on the GPU machine by
 * counters/src/abi_check.cc (scripts/gpu/counters.sh, "abi"). Each
 * params struct is versioned by its structSize: the sampler passes the
 * size of the struct declared here (GPC_SIZE), so a newer CUPTI that
 * appended fields reads only these.
 */
#ifndef GPC_CUPTI_PM_H
#define GPC_CUPTI_PM_H

#include <stddef.h>
#include <stdint.h>

/* CUPTI_PROFILER_STRUCT_SIZE: the struct up to and including its last
 * field. */
#define GPC_SIZE(type, last) (offsetof(type, last) + sizeof(((type *)0)->last))

/* ---- CUDA driver ---------------------------------------------------- */

typedef int gpc_curesult; /* CUresult; 0 is CUDA_SUCCESS */
typedef int gpc_cudevice; /* CUdevice */
typedef void *gpc_cucontext;

/* ---- cupti_result.h --------------------------------------------------- */

typedef int gpc_result; /* CUptiResult */
enum {
	GPC_SUCCESS = 0,
	GPC_ERROR_INVALID_PARAMETER = 1,
	GPC_ERROR_INVALID_OPERATION = 7,
	GPC_ERROR_OUT_OF_MEMORY = 8,
	GPC_ERROR_NOT_INITIALIZED = 15,
	GPC_ERROR_INVALID_METRIC_NAME = 17,
	GPC_ERROR_HARDWARE_BUSY = 26,
	GPC_ERROR_NOT_SUPPORTED = 27,
	GPC_ERROR_INSUFFICIENT_PRIVILEGES = 35,
	GPC_ERROR_OLD_PROFILER_API_INITIALIZED = 36,
};

/* ---- cupti_profiler_host.h -------------------------------------------- */

enum gpc_metric_type { /* CUpti_MetricType */
	GPC_METRIC_TYPE_COUNTER = 0,
	GPC_METRIC_TYPE_RATIO = 1,
	GPC_METRIC_TYPE_THROUGHPUT = 2,
	GPC_METRIC_TYPE__COUNT = 3,
};

enum gpc_profiler_type { /* CUpti_ProfilerType */
	GPC_PROFILER_TYPE_RANGE_PROFILER = 0,
	GPC_PROFILER_TYPE_PM_SAMPLING = 1,
};

typedef struct gpc_host_object gpc_host_object;

typedef struct {
	size_t structSize;
	void *pPriv;
	int profilerType; /* enum gpc_profiler_type */
	const char *pChipName;
	const uint8_t *pCounterAvailabilityImage;
	gpc_host_object *pHostObject; /* out */
} gpc_host_initialize_params;

typedef struct {
	size_t structSize;
	void *pPriv;
	gpc_host_object *pHostObject;
} gpc_host_deinitialize_params;

typedef struct {
	size_t structSize;
	void *pPriv;
	gpc_host_object *pHostObject;
	int metricType; /* enum gpc_metric_type */
	const char **ppMetricNames; /* out */
	size_t numMetrics;          /* out */
} gpc_host_get_base_metrics_params;

typedef struct {
	size_t structSize;
	void *pPriv;
	gpc_host_object *pHostObject;
	int metricType;
	const char *pMetricName;
	size_t numOfSubmetrics;     /* out */
	const char **ppSubMetrics;  /* out */
} gpc_host_get_sub_metrics_params;

typedef struct {
	size_t structSize;
	void *pPriv;
	gpc_host_object *pHostObject;
	const char **ppMetricNames;
	size_t numMetrics;
} gpc_host_config_add_metrics_params;

typedef struct {
	size_t structSize;
	void *pPriv;
	gpc_host_object *pHostObject;
	size_t configImageSize; /* out */
} gpc_host_get_config_image_size_params;

typedef struct {
	size_t structSize;
	void *pPriv;
	gpc_host_object *pHostObject;
	size_t configImageSize;
	uint8_t *pConfigImage; /* out */
} gpc_host_get_config_image_params;

typedef struct {
	size_t structSize;
	void *pPriv;
	size_t configImageSize;
	uint8_t *pConfigImage;
	size_t numOfPasses; /* out */
} gpc_host_get_num_of_passes_params;

typedef struct {
	size_t structSize;
	void *pPriv;
	gpc_host_object *pHostObject;
	const uint8_t *pCounterDataImage;
	size_t counterDataImageSize;
	size_t rangeIndex; /* the sample index for PM sampling */
	const char **ppMetricNames;
	size_t numMetrics;
	double *pMetricValues; /* out, numMetrics values */
} gpc_host_evaluate_params;

/* ---- cupti_target.h / cupti_profiler_target.h -------------------------- */

typedef struct {
	size_t structSize;
	void *pPriv;
	size_t deviceIndex;
	const char *pChipName; /* out */
} gpc_device_get_chip_name_params;

typedef struct {
	size_t structSize;
	void *pPriv;
} gpc_profiler_initialize_params;

/* ---- cupti_pmsampling.h ------------------------------------------------ */

typedef struct gpc_pm_object gpc_pm_object;

enum gpc_trigger_mode { /* CUpti_PmSampling_TriggerMode */
	GPC_TRIGGER_GPU_SYSCLK_INTERVAL = 0,
	GPC_TRIGGER_GPU_TIME_INTERVAL = 1,
};

enum gpc_decode_stop_reason { /* CUpti_PmSampling_DecodeStopReason */
	GPC_DECODE_STOP_OTHER = 0,
	GPC_DECODE_STOP_COUNTER_DATA_FULL = 1,
	GPC_DECODE_STOP_END_OF_RECORDS = 2,
};

enum gpc_append_mode { /* CUpti_PmSampling_HardwareBuffer_AppendMode */
	GPC_APPEND_KEEP_OLDEST = 0,
	GPC_APPEND_KEEP_LATEST = 1,
};

typedef struct {
	size_t structSize;
	void *pPriv;
	gpc_pm_object *pPmSamplingObject;
	size_t configSize;
	const uint8_t *pConfig;
	size_t hardwareBufferSize;
	uint64_t samplingInterval; /* ns with GPC_TRIGGER_GPU_TIME_INTERVAL */
	int triggerMode;           /* enum gpc_trigger_mode */
	int hwBufferAppendMode;    /* enum gpc_append_mode (CUPTI 12.8+) */
} gpc_pm_set_config_params;

/* The set-config struct of CUPTI 12.6 and 12.7, before hwBufferAppendMode. */
#define GPC_SET_CONFIG_SIZE_12_6 GPC_SIZE(gpc_pm_set_config_params, triggerMode)

typedef struct {
	size_t structSize;
	void *pPriv;
	size_t deviceIndex;
	gpc_pm_object *pPmSamplingObject; /* out */
} gpc_pm_enable_params;

/* Disable, Start and Stop take the same three fields. */
typedef struct {
	size_t structSize;
	void *pPriv;
	gpc_pm_object *pPmSamplingObject;
} gpc_pm_object_params;

typedef struct {
	size_t structSize;
	void *pPriv;
	gpc_pm_object *pPmSamplingObject;
	uint8_t *pCounterDataImage;
	size_t counterDataImageSize;
	int decodeStopReason; /* out, enum gpc_decode_stop_reason */
	uint8_t overflow;     /* out */
} gpc_pm_decode_params;

typedef struct {
	size_t structSize;
	void *pPriv;
	size_t deviceIndex;
	size_t counterAvailabilityImageSize; /* in/out */
	uint8_t *pCounterAvailabilityImage;  /* NULL: query the size */
} gpc_pm_get_counter_availability_params;

typedef struct {
	size_t structSize;
	void *pPriv;
	gpc_pm_object *pPmSamplingObject;
	const char **pMetricNames;
	size_t numMetrics;
	uint32_t maxSamples;
	size_t counterDataSize; /* out */
} gpc_pm_get_counter_data_size_params;

typedef struct {
	size_t structSize;
	void *pPriv;
	gpc_pm_object *pPmSamplingObject;
	size_t counterDataSize;
	uint8_t *pCounterData;
} gpc_pm_counter_data_init_params;

typedef struct {
	size_t structSize;
	void *pPriv;
	const uint8_t *pCounterDataImage;
	size_t counterDataImageSize;
	size_t numTotalSamples;     /* out */
	size_t numPopulatedSamples; /* out */
	size_t numCompletedSamples; /* out */
} gpc_pm_get_counter_data_info_params;

typedef struct {
	size_t structSize;
	void *pPriv;
	gpc_pm_object *pPmSamplingObject;
	const uint8_t *pCounterDataImage;
	size_t counterDataImageSize;
	size_t sampleIndex;
	uint64_t startTimestamp; /* out, ns */
	uint64_t endTimestamp;   /* out, ns */
} gpc_pm_get_sample_info_params;

#endif
