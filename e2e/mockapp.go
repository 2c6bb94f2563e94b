package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// MockApp is the shim's test application (shim/testdata/app.c) built with
// the MOCK driver (shim/testdata/mock_libcuda.c): a CUDA application that
// launches kernels through bin/libgpuprobe.so without a GPU.
type MockApp struct {
	// Dir holds libcuda.so.1, the MOCK driver (LD_LIBRARY_PATH).
	Dir string
	// Bin is the application.
	Bin string
}

// BuildMockApp compiles the MOCK driver and the application into dir with
// gcc, with the flags of the shim's own tests (shim/harness_test.go).
func BuildMockApp(ctx context.Context, root, dir string) (MockApp, error) {
	m := MockApp{Dir: dir, Bin: filepath.Join(dir, "app")}
	td := filepath.Join(root, "shim", "testdata")
	// The application is every app*.c there, as the shim's own tests build it.
	apps, err := filepath.Glob(filepath.Join(td, "app*.c"))
	if err != nil || len(apps) == 0 {
		return MockApp{}, fmt.Errorf("building the MOCK application: no %s: %v", filepath.Join(td, "app*.c"), err)
	}
	steps := [][]string{
		mockDriverStep(td, dir),
		append(append([]string{"-O2", "-Wall", "-Wextra", "-Werror", "-I" + filepath.Join(root, "shm", "include"), "-o", m.Bin},
			apps...), "-ldl", "-lpthread"),
	}
	for _, s := range steps {
		if _, err := runTool(ctx, 2*time.Minute, root, "gcc", s...); err != nil {
			return MockApp{}, fmt.Errorf("building the MOCK application: %w", err)
		}
	}
	return m, nil
}

// BuildMockDriver compiles the MOCK driver (libcuda.so.1) and the MOCK
// CUPTI (libcupti.so.13: a device window for every kernel the mock
// "runs") into dir with gcc, for applications that load the driver
// themselves (Python through ctypes); it returns the MOCK CUPTI's path,
// for GPUPROBE_CUPTI.
func BuildMockDriver(ctx context.Context, root, dir string) (cupti string, err error) {
	td := filepath.Join(root, "shim", "testdata")
	cupti = filepath.Join(dir, "libcupti.so.13")
	steps := [][]string{
		mockDriverStep(td, dir),
		{"-O2", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror", "-Wl,-soname,libcupti.so.13",
			"-o", cupti, filepath.Join(td, "mock_libcupti.c"), "-ldl", "-lpthread"},
	}
	for _, s := range steps {
		if _, err := runTool(ctx, 2*time.Minute, root, "gcc", s...); err != nil {
			return "", fmt.Errorf("building the MOCK driver: %w", err)
		}
	}
	return cupti, nil
}

// mockDriverStep is gcc's arguments for the MOCK driver from shim
// testdata td into dir: -Bsymbolic like the real driver, so that its
// calls to its own entry points are not interposed by the shim.
func mockDriverStep(td, dir string) []string {
	return []string{"-O2", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror", "-Wl,-Bsymbolic", "-Wl,-soname,libcuda.so.1",
		"-o", filepath.Join(dir, "libcuda.so.1"), filepath.Join(td, "mock_libcuda.c")}
}

// Command returns a command that runs the application with shim preloaded,
// connecting to the collector's agent socket, with env added (the
// application's OTEL_* variables), in the cgroup open as cgroupFD when it
// is not nil: the child is cloned into it (CLONE_INTO_CGROUP), so it is
// there before it runs any code.
func (m MockApp) Command(ctx context.Context, shim, socket string, cgroup *os.File, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, m.Bin, args...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+m.Dir, "LD_PRELOAD="+shim, "GPUPROBE_SOCKET="+socket,
		"GPUPROBE_TRACE=", "GPUPROBE_DISABLE=", "GPUPROBE_PATCH=", "OTEL_SERVICE_NAME=", "OTEL_RESOURCE_ATTRIBUTES=",
		// Loads wait for their patched image: the checks expect device
		// records of the first launches.
		"GPUPROBE_PATCH_WAIT_MS=600000")
	cmd.Env = append(cmd.Env, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if cgroup != nil {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = int(cgroup.Fd())
	}
	return cmd
}
