package translate

import "strconv"

// error.type of a failed CUDA call (semantic conventions: a low-
// cardinality name of the error class): the enumerator's name of the
// codes below, else the code in decimal. Codes from cuda.h (CUresult) and
// driver_types.h (cudaError_t); the common ones only, as the rest stay
// readable by number.
var (
	cuResultNames = map[int64]string{
		1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY", 3: "CUDA_ERROR_NOT_INITIALIZED",
		4: "CUDA_ERROR_DEINITIALIZED", 100: "CUDA_ERROR_NO_DEVICE", 101: "CUDA_ERROR_INVALID_DEVICE",
		200: "CUDA_ERROR_INVALID_IMAGE", 201: "CUDA_ERROR_INVALID_CONTEXT", 209: "CUDA_ERROR_NO_BINARY_FOR_GPU",
		218: "CUDA_ERROR_INVALID_PTX", 400: "CUDA_ERROR_INVALID_HANDLE", 500: "CUDA_ERROR_NOT_FOUND",
		600: "CUDA_ERROR_NOT_READY", 700: "CUDA_ERROR_ILLEGAL_ADDRESS", 701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
		702: "CUDA_ERROR_LAUNCH_TIMEOUT", 719: "CUDA_ERROR_LAUNCH_FAILED", 720: "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
		800: "CUDA_ERROR_NOT_PERMITTED", 801: "CUDA_ERROR_NOT_SUPPORTED", 999: "CUDA_ERROR_UNKNOWN",
	}
	cudaErrorNames = map[int64]string{
		1: "cudaErrorInvalidValue", 2: "cudaErrorMemoryAllocation", 3: "cudaErrorInitializationError",
		4: "cudaErrorCudartUnloading", 9: "cudaErrorInvalidConfiguration", 98: "cudaErrorInvalidDeviceFunction",
		100: "cudaErrorNoDevice", 101: "cudaErrorInvalidDevice", 209: "cudaErrorNoKernelImageForDevice",
		400: "cudaErrorInvalidResourceHandle", 600: "cudaErrorNotReady", 700: "cudaErrorIllegalAddress",
		701: "cudaErrorLaunchOutOfResources", 719: "cudaErrorLaunchFailure", 801: "cudaErrorNotSupported",
		999: "cudaErrorUnknown",
	}
)

// errorType names a nonzero return code of a driver (CUresult) or runtime
// (cudaError_t) call.
func errorType(code int64, driver bool) string {
	names := cudaErrorNames
	if driver {
		names = cuResultNames
	}
	if n, ok := names[code]; ok {
		return n
	}
	return strconv.FormatInt(code, 10)
}
