// abi_check.cc - checks counters/src/cupti_pm.h against the toolkit's
// CUPTI headers: every field the sampler declares at the offset and size
// of the real one, every enum value equal, every entry point it resolves
// declared. Built and run on the GPU machine (scripts/gpu/counters.sh,
// "abi"); C++ because cupti_profiler_host.h includes <string>.
//
//   g++ -I$CUDA/include -I$CUPTI/include -Icounters/src counters/src/abi_check.cc
#include <cstddef>
#include <cstdio>

#include <cuda.h>
#include <cupti_pmsampling.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_result.h>
#include <cupti_target.h>
#include <cupti_activity.h>
#include <cupti_version.h>

extern "C" {
#include "cupti_pm.h"
}

static int checks, bad;

static void eq(const char *what, long real, long ours)
{
	checks++;
	if (real != ours) {
		std::printf("counters abi: %s: header %ld, cupti_pm.h %ld\n", what, real, ours);
		bad++;
	}
}

// FIELD compares one field's offset and size.
#define FIELD(R, O, rf, of)                                                                                  \
	do {                                                                                                 \
		eq(#R "." #rf " offset", (long)offsetof(R, rf), (long)offsetof(O, of));                      \
		eq(#R "." #rf " size", (long)sizeof(((R *)0)->rf), (long)sizeof(((O *)0)->of));              \
	} while (0)

// SIZE: the sampler passes its struct's size; the header's must not be
// smaller (a newer header may have appended fields the sampler leaves out).
#define SIZE(R, O, last)                                                                                     \
	do {                                                                                                 \
		checks++;                                                                                    \
		long real = (long)R##_STRUCT_SIZE, ours = (long)GPC_SIZE(O, last);                           \
		if (ours > real) {                                                                           \
			std::printf("counters abi: %s: header STRUCT_SIZE %ld < cupti_pm.h %ld\n", #R, real, ours); \
			bad++;                                                                               \
		} else if (ours < real) {                                                                    \
			std::printf("counters abi: note: %s has %ld bytes the sampler does not set\n", #R, real - ours); \
		}                                                                                            \
	} while (0)

#define ENUM(real, ours) eq(#real, (long)(real), (long)(ours))

static void host_api(void)
{
	typedef CUpti_Profiler_Host_Initialize_Params HI;
	FIELD(HI, gpc_host_initialize_params, structSize, structSize);
	FIELD(HI, gpc_host_initialize_params, pPriv, pPriv);
	FIELD(HI, gpc_host_initialize_params, profilerType, profilerType);
	FIELD(HI, gpc_host_initialize_params, pChipName, pChipName);
	FIELD(HI, gpc_host_initialize_params, pCounterAvailabilityImage, pCounterAvailabilityImage);
	FIELD(HI, gpc_host_initialize_params, pHostObject, pHostObject);
	SIZE(CUpti_Profiler_Host_Initialize_Params, gpc_host_initialize_params, pHostObject);

	FIELD(CUpti_Profiler_Host_Deinitialize_Params, gpc_host_deinitialize_params, pHostObject, pHostObject);
	SIZE(CUpti_Profiler_Host_Deinitialize_Params, gpc_host_deinitialize_params, pHostObject);

	typedef CUpti_Profiler_Host_GetBaseMetrics_Params BM;
	FIELD(BM, gpc_host_get_base_metrics_params, pHostObject, pHostObject);
	FIELD(BM, gpc_host_get_base_metrics_params, metricType, metricType);
	FIELD(BM, gpc_host_get_base_metrics_params, ppMetricNames, ppMetricNames);
	FIELD(BM, gpc_host_get_base_metrics_params, numMetrics, numMetrics);
	SIZE(CUpti_Profiler_Host_GetBaseMetrics_Params, gpc_host_get_base_metrics_params, numMetrics);

	typedef CUpti_Profiler_Host_GetSubMetrics_Params SM;
	FIELD(SM, gpc_host_get_sub_metrics_params, pHostObject, pHostObject);
	FIELD(SM, gpc_host_get_sub_metrics_params, metricType, metricType);
	FIELD(SM, gpc_host_get_sub_metrics_params, pMetricName, pMetricName);
	FIELD(SM, gpc_host_get_sub_metrics_params, numOfSubmetrics, numOfSubmetrics);
	FIELD(SM, gpc_host_get_sub_metrics_params, ppSubMetrics, ppSubMetrics);
	SIZE(CUpti_Profiler_Host_GetSubMetrics_Params, gpc_host_get_sub_metrics_params, ppSubMetrics);

	typedef CUpti_Profiler_Host_ConfigAddMetrics_Params AM;
	FIELD(AM, gpc_host_config_add_metrics_params, pHostObject, pHostObject);
	FIELD(AM, gpc_host_config_add_metrics_params, ppMetricNames, ppMetricNames);
	FIELD(AM, gpc_host_config_add_metrics_params, numMetrics, numMetrics);
	SIZE(CUpti_Profiler_Host_ConfigAddMetrics_Params, gpc_host_config_add_metrics_params, numMetrics);

	typedef CUpti_Profiler_Host_GetConfigImageSize_Params CS;
	FIELD(CS, gpc_host_get_config_image_size_params, pHostObject, pHostObject);
	FIELD(CS, gpc_host_get_config_image_size_params, configImageSize, configImageSize);
	SIZE(CUpti_Profiler_Host_GetConfigImageSize_Params, gpc_host_get_config_image_size_params, configImageSize);

	typedef CUpti_Profiler_Host_GetConfigImage_Params CI;
	FIELD(CI, gpc_host_get_config_image_params, pHostObject, pHostObject);
	FIELD(CI, gpc_host_get_config_image_params, configImageSize, configImageSize);
	FIELD(CI, gpc_host_get_config_image_params, pConfigImage, pConfigImage);
	SIZE(CUpti_Profiler_Host_GetConfigImage_Params, gpc_host_get_config_image_params, pConfigImage);

	typedef CUpti_Profiler_Host_GetNumOfPasses_Params NP;
	FIELD(NP, gpc_host_get_num_of_passes_params, configImageSize, configImageSize);
	FIELD(NP, gpc_host_get_num_of_passes_params, pConfigImage, pConfigImage);
	FIELD(NP, gpc_host_get_num_of_passes_params, numOfPasses, numOfPasses);
	SIZE(CUpti_Profiler_Host_GetNumOfPasses_Params, gpc_host_get_num_of_passes_params, numOfPasses);

	typedef CUpti_Profiler_Host_EvaluateToGpuValues_Params EV;
	FIELD(EV, gpc_host_evaluate_params, pHostObject, pHostObject);
	FIELD(EV, gpc_host_evaluate_params, pCounterDataImage, pCounterDataImage);
	FIELD(EV, gpc_host_evaluate_params, counterDataImageSize, counterDataImageSize);
	FIELD(EV, gpc_host_evaluate_params, rangeIndex, rangeIndex);
	FIELD(EV, gpc_host_evaluate_params, ppMetricNames, ppMetricNames);
	FIELD(EV, gpc_host_evaluate_params, numMetrics, numMetrics);
	FIELD(EV, gpc_host_evaluate_params, pMetricValues, pMetricValues);
	SIZE(CUpti_Profiler_Host_EvaluateToGpuValues_Params, gpc_host_evaluate_params, pMetricValues);

	ENUM(CUPTI_METRIC_TYPE_COUNTER, GPC_METRIC_TYPE_COUNTER);
	ENUM(CUPTI_METRIC_TYPE_RATIO, GPC_METRIC_TYPE_RATIO);
	ENUM(CUPTI_METRIC_TYPE_THROUGHPUT, GPC_METRIC_TYPE_THROUGHPUT);
	ENUM(CUPTI_METRIC_TYPE__COUNT, GPC_METRIC_TYPE__COUNT);
	ENUM(CUPTI_PROFILER_TYPE_RANGE_PROFILER, GPC_PROFILER_TYPE_RANGE_PROFILER);
	ENUM(CUPTI_PROFILER_TYPE_PM_SAMPLING, GPC_PROFILER_TYPE_PM_SAMPLING);
}

static void pm_api(void)
{
	typedef CUpti_PmSampling_SetConfig_Params SC;
	FIELD(SC, gpc_pm_set_config_params, pPmSamplingObject, pPmSamplingObject);
	FIELD(SC, gpc_pm_set_config_params, configSize, configSize);
	FIELD(SC, gpc_pm_set_config_params, pConfig, pConfig);
	FIELD(SC, gpc_pm_set_config_params, hardwareBufferSize, hardwareBufferSize);
	FIELD(SC, gpc_pm_set_config_params, samplingInterval, samplingInterval);
	FIELD(SC, gpc_pm_set_config_params, triggerMode, triggerMode);
	FIELD(SC, gpc_pm_set_config_params, hwBufferAppendMode, hwBufferAppendMode);
	SIZE(CUpti_PmSampling_SetConfig_Params, gpc_pm_set_config_params, hwBufferAppendMode);

	typedef CUpti_PmSampling_Enable_Params EN;
	FIELD(EN, gpc_pm_enable_params, deviceIndex, deviceIndex);
	FIELD(EN, gpc_pm_enable_params, pPmSamplingObject, pPmSamplingObject);
	SIZE(CUpti_PmSampling_Enable_Params, gpc_pm_enable_params, pPmSamplingObject);

	FIELD(CUpti_PmSampling_Disable_Params, gpc_pm_object_params, pPmSamplingObject, pPmSamplingObject);
	FIELD(CUpti_PmSampling_Start_Params, gpc_pm_object_params, pPmSamplingObject, pPmSamplingObject);
	FIELD(CUpti_PmSampling_Stop_Params, gpc_pm_object_params, pPmSamplingObject, pPmSamplingObject);
	SIZE(CUpti_PmSampling_Disable_Params, gpc_pm_object_params, pPmSamplingObject);
	SIZE(CUpti_PmSampling_Start_Params, gpc_pm_object_params, pPmSamplingObject);
	SIZE(CUpti_PmSampling_Stop_Params, gpc_pm_object_params, pPmSamplingObject);

	typedef CUpti_PmSampling_DecodeData_Params DD;
	FIELD(DD, gpc_pm_decode_params, pPmSamplingObject, pPmSamplingObject);
	FIELD(DD, gpc_pm_decode_params, pCounterDataImage, pCounterDataImage);
	FIELD(DD, gpc_pm_decode_params, counterDataImageSize, counterDataImageSize);
	FIELD(DD, gpc_pm_decode_params, decodeStopReason, decodeStopReason);
	FIELD(DD, gpc_pm_decode_params, overflow, overflow);
	SIZE(CUpti_PmSampling_DecodeData_Params, gpc_pm_decode_params, overflow);

	typedef CUpti_PmSampling_GetCounterAvailability_Params CA;
	FIELD(CA, gpc_pm_get_counter_availability_params, deviceIndex, deviceIndex);
	FIELD(CA, gpc_pm_get_counter_availability_params, counterAvailabilityImageSize, counterAvailabilityImageSize);
	FIELD(CA, gpc_pm_get_counter_availability_params, pCounterAvailabilityImage, pCounterAvailabilityImage);
	SIZE(CUpti_PmSampling_GetCounterAvailability_Params, gpc_pm_get_counter_availability_params,
	     pCounterAvailabilityImage);

	typedef CUpti_PmSampling_GetCounterDataSize_Params DS;
	FIELD(DS, gpc_pm_get_counter_data_size_params, pPmSamplingObject, pPmSamplingObject);
	FIELD(DS, gpc_pm_get_counter_data_size_params, pMetricNames, pMetricNames);
	FIELD(DS, gpc_pm_get_counter_data_size_params, numMetrics, numMetrics);
	FIELD(DS, gpc_pm_get_counter_data_size_params, maxSamples, maxSamples);
	FIELD(DS, gpc_pm_get_counter_data_size_params, counterDataSize, counterDataSize);
	SIZE(CUpti_PmSampling_GetCounterDataSize_Params, gpc_pm_get_counter_data_size_params, counterDataSize);

	typedef CUpti_PmSampling_CounterDataImage_Initialize_Params DI;
	FIELD(DI, gpc_pm_counter_data_init_params, pPmSamplingObject, pPmSamplingObject);
	FIELD(DI, gpc_pm_counter_data_init_params, counterDataSize, counterDataSize);
	FIELD(DI, gpc_pm_counter_data_init_params, pCounterData, pCounterData);
	SIZE(CUpti_PmSampling_CounterDataImage_Initialize_Params, gpc_pm_counter_data_init_params, pCounterData);

	typedef CUpti_PmSampling_GetCounterDataInfo_Params GI;
	FIELD(GI, gpc_pm_get_counter_data_info_params, pCounterDataImage, pCounterDataImage);
	FIELD(GI, gpc_pm_get_counter_data_info_params, counterDataImageSize, counterDataImageSize);
	FIELD(GI, gpc_pm_get_counter_data_info_params, numTotalSamples, numTotalSamples);
	FIELD(GI, gpc_pm_get_counter_data_info_params, numPopulatedSamples, numPopulatedSamples);
	FIELD(GI, gpc_pm_get_counter_data_info_params, numCompletedSamples, numCompletedSamples);
	SIZE(CUpti_PmSampling_GetCounterDataInfo_Params, gpc_pm_get_counter_data_info_params, numCompletedSamples);

	typedef CUpti_PmSampling_CounterData_GetSampleInfo_Params SI;
	FIELD(SI, gpc_pm_get_sample_info_params, pPmSamplingObject, pPmSamplingObject);
	FIELD(SI, gpc_pm_get_sample_info_params, pCounterDataImage, pCounterDataImage);
	FIELD(SI, gpc_pm_get_sample_info_params, counterDataImageSize, counterDataImageSize);
	FIELD(SI, gpc_pm_get_sample_info_params, sampleIndex, sampleIndex);
	FIELD(SI, gpc_pm_get_sample_info_params, startTimestamp, startTimestamp);
	FIELD(SI, gpc_pm_get_sample_info_params, endTimestamp, endTimestamp);
	SIZE(CUpti_PmSampling_CounterData_GetSampleInfo_Params, gpc_pm_get_sample_info_params, endTimestamp);

	ENUM(CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_SYSCLK_INTERVAL, GPC_TRIGGER_GPU_SYSCLK_INTERVAL);
	ENUM(CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL, GPC_TRIGGER_GPU_TIME_INTERVAL);
	ENUM(CUPTI_PM_SAMPLING_DECODE_STOP_REASON_OTHER, GPC_DECODE_STOP_OTHER);
	ENUM(CUPTI_PM_SAMPLING_DECODE_STOP_REASON_COUNTER_DATA_FULL, GPC_DECODE_STOP_COUNTER_DATA_FULL);
	ENUM(CUPTI_PM_SAMPLING_DECODE_STOP_REASON_END_OF_RECORDS, GPC_DECODE_STOP_END_OF_RECORDS);
	ENUM(CUPTI_PM_SAMPLING_HARDWARE_BUFFER_APPEND_MODE_KEEP_OLDEST, GPC_APPEND_KEEP_OLDEST);
	ENUM(CUPTI_PM_SAMPLING_HARDWARE_BUFFER_APPEND_MODE_KEEP_LATEST, GPC_APPEND_KEEP_LATEST);
}

static void target_api(void)
{
	typedef CUpti_Device_GetChipName_Params CN;
	FIELD(CN, gpc_device_get_chip_name_params, deviceIndex, deviceIndex);
	FIELD(CN, gpc_device_get_chip_name_params, pChipName, pChipName);
	SIZE(CUpti_Device_GetChipName_Params, gpc_device_get_chip_name_params, pChipName);
	FIELD(CUpti_Profiler_Initialize_Params, gpc_profiler_initialize_params, pPriv, pPriv);
	SIZE(CUpti_Profiler_Initialize_Params, gpc_profiler_initialize_params, pPriv);

	ENUM(CUPTI_SUCCESS, GPC_SUCCESS);
	ENUM(CUPTI_ERROR_INVALID_PARAMETER, GPC_ERROR_INVALID_PARAMETER);
	ENUM(CUPTI_ERROR_INVALID_OPERATION, GPC_ERROR_INVALID_OPERATION);
	ENUM(CUPTI_ERROR_OUT_OF_MEMORY, GPC_ERROR_OUT_OF_MEMORY);
	ENUM(CUPTI_ERROR_NOT_INITIALIZED, GPC_ERROR_NOT_INITIALIZED);
	ENUM(CUPTI_ERROR_INVALID_METRIC_NAME, GPC_ERROR_INVALID_METRIC_NAME);
	ENUM(CUPTI_ERROR_HARDWARE_BUSY, GPC_ERROR_HARDWARE_BUSY);
	ENUM(CUPTI_ERROR_NOT_SUPPORTED, GPC_ERROR_NOT_SUPPORTED);
	ENUM(CUPTI_ERROR_INSUFFICIENT_PRIVILEGES, GPC_ERROR_INSUFFICIENT_PRIVILEGES);
	ENUM(CUPTI_ERROR_OLD_PROFILER_API_INITIALIZED, GPC_ERROR_OLD_PROFILER_API_INITIALIZED);
	eq("sizeof(CUresult)", (long)sizeof(CUresult), (long)sizeof(gpc_curesult));
	eq("sizeof(CUdevice)", (long)sizeof(CUdevice), (long)sizeof(gpc_cudevice));
	eq("sizeof(CUptiResult)", (long)sizeof(CUptiResult), (long)sizeof(gpc_result));
}

// Every CUPTI entry point load.c resolves, declared by the headers (a
// missing one fails the build, naming it; unevaluated, so nothing links).
static const size_t entry_points[] = {
	sizeof(&cuptiGetResultString),
	sizeof(&cuptiGetTimestamp),
	sizeof(&cuptiProfilerInitialize),
	sizeof(&cuptiDeviceGetChipName),
	sizeof(&cuptiProfilerHostInitialize),
	sizeof(&cuptiProfilerHostDeinitialize),
	sizeof(&cuptiProfilerHostGetBaseMetrics),
	sizeof(&cuptiProfilerHostGetSubMetrics),
	sizeof(&cuptiProfilerHostConfigAddMetrics),
	sizeof(&cuptiProfilerHostGetConfigImageSize),
	sizeof(&cuptiProfilerHostGetConfigImage),
	sizeof(&cuptiProfilerHostGetNumOfPasses),
	sizeof(&cuptiProfilerHostEvaluateToGpuValues),
	sizeof(&cuptiPmSamplingGetCounterAvailability),
	sizeof(&cuptiPmSamplingEnable),
	sizeof(&cuptiPmSamplingDisable),
	sizeof(&cuptiPmSamplingSetConfig),
	sizeof(&cuptiPmSamplingStart),
	sizeof(&cuptiPmSamplingStop),
	sizeof(&cuptiPmSamplingDecodeData),
	sizeof(&cuptiPmSamplingGetCounterDataSize),
	sizeof(&cuptiPmSamplingCounterDataImageInitialize),
	sizeof(&cuptiPmSamplingGetCounterDataInfo),
	sizeof(&cuptiPmSamplingCounterDataGetSampleInfo),
};

int main(void)
{
	host_api();
	pm_api();
	target_api();
	std::printf("counters abi: %s: %d checks, %d mismatches, %zu entry points declared (CUPTI_API_VERSION %d)\n",
		    bad ? "FAIL" : "ok", checks, bad, sizeof entry_points / sizeof entry_points[0], CUPTI_API_VERSION);
	return bad != 0;
}
