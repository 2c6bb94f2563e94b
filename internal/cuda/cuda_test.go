package cuda

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// haveDriver reports whether libcuda.so.1 exists in a usual place.
func haveDriver() bool {
	for _, p := range []string{"/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib64/libcuda.so.1", "/usr/lib/libcuda.so.1"} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}

func TestInitWithoutDriver(t *testing.T) {
	err := Init()
	if haveDriver() {
		if err != nil && errors.Is(err, ErrNoDriver) {
			t.Fatalf("libcuda.so.1 is installed but Init says %v", err)
		}
		if err != nil && !errors.Is(err, ErrNoDevice) {
			var ce *Error
			if !errors.As(err, &ce) || ce.Op != "cuInit" {
				t.Fatalf("Init() = %v, want nil, ErrNoDevice or a cuInit error", err)
			}
		}
		return
	}
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("Init() = %v, want an error wrapping ErrNoDriver", err)
	}
	if !strings.Contains(err.Error(), "no NVIDIA driver: libcuda.so.1 not found") {
		t.Fatalf("error %q does not say that the driver is missing", err)
	}
	// Every entry point reports the same error instead of crashing.
	if _, err := DeviceCount(); !errors.Is(err, ErrNoDriver) {
		t.Fatalf("DeviceCount() error = %v, want ErrNoDriver", err)
	}
	if _, err := GetDevice(0); !errors.Is(err, ErrNoDriver) {
		t.Fatalf("GetDevice(0) error = %v, want ErrNoDriver", err)
	}
	if _, err := DriverVersion(); !errors.Is(err, ErrNoDriver) {
		t.Fatalf("DriverVersion() error = %v, want ErrNoDriver", err)
	}
}

func TestOpenMissingLibrary(t *testing.T) {
	err := open("libcuda-gpuprobe-test-missing.so.1")
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("open(missing) = %v, want ErrNoDriver", err)
	}
	if !strings.Contains(err.Error(), "no NVIDIA driver: libcuda.so.1 not found") || !strings.Contains(err.Error(), "libcuda-gpuprobe-test-missing.so.1") {
		t.Fatalf("error %q should say the driver is missing and name the library", err)
	}
}

func TestErrorText(t *testing.T) {
	tests := []struct {
		err  Error
		want string
	}{
		{Error{Op: "cuInit", Code: 100, Name: "CUDA_ERROR_NO_DEVICE", Msg: "no CUDA-capable device is detected"},
			"cuInit: CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected"},
		{Error{Op: "cuModuleLoadDataEx", Code: 218, Name: "CUDA_ERROR_INVALID_PTX", Log: "ptxas fatal: line 3"},
			"cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX (218)\nptxas fatal: line 3"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}
