package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Pinned backend versions; the Makefile's JAEGER_VERSION and
// PROMETHEUS_VERSION must agree.
const (
	// JaegerVersion is the Jaeger module version (v1.76.0 is Jaeger v2.13.0).
	JaegerVersion = "v1.76.0"
	// PrometheusVersion is the Prometheus module version (Prometheus 3.15).
	PrometheusVersion = "v0.315.0"
)

// Tool names accepted by Find.
const (
	ToolOtelcol     = "otelcol-gpuprobe"      // the full ocb-built collector distribution
	ToolOtelcolLean = "otelcol-gpuprobe-lean" // the lean one: no cloud or Kubernetes components
	ToolHarness     = "gpuprobe-harness"      // bin/gpuprobe-harness (loadgen)
	ToolShim        = "libgpuprobe.so"        // bin/libgpuprobe.so, the in-application shim
	ToolJaeger      = "jaeger"
	ToolPrometheus  = "prometheus"
)

// RepoRoot returns the directory of the gpuprobe module's go.mod, searching
// upward from the current directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("repo root: %w", err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(data, []byte("module github.com/gpuprobe/gpuprobe\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repo root: no go.mod of module github.com/gpuprobe/gpuprobe above the current directory")
		}
		dir = parent
	}
}

// FindBinary returns $envVar when it is set (it must name an executable
// file); otherwise it runs build, which returns the path it built.
func FindBinary(envVar string, build func() (string, error)) (string, error) {
	if p := os.Getenv(envVar); p != "" {
		st, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("$%s: %w", envVar, err)
		}
		if st.IsDir() || st.Mode()&0o111 == 0 {
			return "", fmt.Errorf("$%s=%s is not an executable file", envVar, p)
		}
		return p, nil
	}
	return build()
}

// MakeTarget runs `make TARGET` in the repo root (make decides whether the
// target is stale) and returns the target's absolute path.
func MakeTarget(ctx context.Context, root, target string, timeout time.Duration) (string, error) {
	if _, err := runTool(ctx, timeout, root, "make", "--no-print-directory", target); err != nil {
		return "", err
	}
	return filepath.Join(root, target), nil
}

// BuildBackend builds (or reuses from the cache) a backend with
// scripts/build-backend.sh and returns the binary's path.
func BuildBackend(ctx context.Context, root, name, version string, timeout time.Duration) (string, error) {
	out, err := runTool(ctx, timeout, root, filepath.Join(root, "scripts", "build-backend.sh"), name, version)
	if err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	path := strings.TrimSpace(lines[len(lines)-1])
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("build-backend.sh %s %s printed %q, which is not a file: %w", name, version, path, err)
	}
	return path, nil
}

// Find returns the path of tool: from its environment variable when set,
// else built (bounded by timeout; a cold Jaeger build takes about 5 minutes
// on 2 cores, and make or the backend cache make warm calls cheap).
func Find(ctx context.Context, tool string, timeout time.Duration) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	switch tool {
	case ToolOtelcol:
		return FindBinary("GPUPROBE_OTELCOL", func() (string, error) {
			return MakeTarget(ctx, root, "bin/otelcol-gpuprobe", timeout)
		})
	case ToolOtelcolLean:
		// $GPUPROBE_OTELCOL names the collector under test for either
		// tool: the full distribution has every lean component.
		return FindBinary("GPUPROBE_OTELCOL", func() (string, error) {
			return MakeTarget(ctx, root, "bin/otelcol-gpuprobe-lean", timeout)
		})
	case ToolHarness:
		return FindBinary("GPUPROBE_HARNESS", func() (string, error) {
			return MakeTarget(ctx, root, "bin/gpuprobe-harness", timeout)
		})
	case ToolShim:
		return FindBinary("GPUPROBE_SHIM", func() (string, error) {
			return MakeTarget(ctx, root, "bin/libgpuprobe.so", timeout)
		})
	case ToolJaeger:
		return FindBinary("GPUPROBE_JAEGER", func() (string, error) {
			return BuildBackend(ctx, root, "jaeger", JaegerVersion, timeout)
		})
	case ToolPrometheus:
		return FindBinary("GPUPROBE_PROMETHEUS", func() (string, error) {
			return BuildBackend(ctx, root, "prometheus", PrometheusVersion, timeout)
		})
	}
	return "", fmt.Errorf("find: unknown tool %q", tool)
}

// runTool runs a build command, bounded by timeout, and returns its stdout;
// on failure the error carries the command's output.
func runTool(ctx context.Context, timeout time.Duration, dir, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w\n%s%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}
