package receiver

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/internal/procread"
	"go.uber.org/zap"
)

// procDriverVersion is where the NVIDIA kernel driver reports its version.
var procDriverVersion = "/proc/driver/nvidia/version"

// defaultLibDirs are searched for libcuda.so.1 after host_probes::library_paths
// and LD_LIBRARY_PATH.
var defaultLibDirs = []string{
	"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
	"/usr/local/nvidia/lib64", "/usr/lib/wsl/lib",
}

// maxDriverVersion bounds the read of procDriverVersion, of which the
// first line (about 100 bytes: "NVRM version: NVIDIA UNIX ... Kernel
// Module  570.86.15  ...") is kept.
const maxDriverVersion = 4 << 10

// driverStatus is what detectDriver found.
type driverStatus struct {
	found   bool
	version string   // first line of /proc/driver/nvidia/version
	libcuda string   // path of libcuda.so.1
	missing []string // what was not found, in words
}

// detectDriver looks for the NVIDIA kernel driver and libcuda.so.1 without
// loading anything (pure Go; the receiver links no CUDA).
func detectDriver(libPaths []string) driverStatus {
	var st driverStatus
	if b, err := procread.File(procDriverVersion, maxDriverVersion); err == nil || errors.Is(err, procread.ErrTruncated) {
		st.version = strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
	} else {
		st.missing = append(st.missing, procDriverVersion+" is absent")
	}
	dirs := append([]string(nil), libPaths...)
	dirs = append(dirs, filepath.SplitList(os.Getenv("LD_LIBRARY_PATH"))...)
	dirs = append(dirs, defaultLibDirs...)
	for _, d := range dirs {
		if d == "" {
			continue
		}
		p := d
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			p = filepath.Join(d, "libcuda.so.1")
		}
		if filepath.Base(p) != "libcuda.so.1" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			st.libcuda = p
			break
		}
	}
	if st.libcuda == "" {
		st.missing = append(st.missing, "libcuda.so.1 not found in "+strings.Join(dirs, ":"))
	}
	st.found = st.version != "" && st.libcuda != ""
	return st
}

var driverLogOnce sync.Once

// logDriverOnce tells, once per process, whether a driver was found and which
// probes are idle and which are active.
func logDriverOnce(log *zap.Logger, st driverStatus, cfg *config.Config) {
	driverLogOnce.Do(func() {
		active := []string{"agent socket " + cfg.Agent.Socket, "host launch/memcpy/sync records from the shim", "self-metrics"}
		var idle []string
		if cfg.Probes.KernelPhases {
			if st.found {
				active = append(active, "kernel_phases device probes")
			} else {
				idle = append(idle, "kernel_phases device probes (per-warp timing)")
			}
		}
		if len(cfg.Programs) > 0 {
			if st.found {
				active = append(active, "GPU programs")
			} else {
				idle = append(idle, "GPU programs")
			}
		}
		if cfg.HostProbes.Enabled {
			if st.found {
				active = append(active, "host probes")
			} else {
				idle = append(idle, "host probes (no libcuda.so.1 to attach to)")
			}
		}
		if !st.found {
			log.Warn("gpuprobe: no NVIDIA driver found; serving without device telemetry",
				zap.String("reason", strings.Join(st.missing, "; ")),
				zap.Strings("probes_active", active), zap.Strings("probes_idle", idle))
			return
		}
		log.Info("gpuprobe: NVIDIA driver found", zap.String("driver", st.version), zap.String("libcuda", st.libcuda),
			zap.Strings("probes_active", active), zap.Strings("probes_idle", idle))
	})
}
