package shim

import (
	"strconv"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
)

// BenchmarkPythonStack: what a launch stack with Python frames costs the
// launching thread, as the self-timing shim times it (ns/stack): a
// CPython loop of b.N launches through ctypes, 20 frames deep, with a
// stack asked for every microsecond (so nearly every launch is sampled).
func BenchmarkPythonStack(b *testing.B) {
	bin := binaries(b)
	py := findPython("python3.11")
	if py == "" {
		py = findPython("python3")
	}
	if py == "" {
		b.Fatal("no python3 with ctypes")
	}
	st, _ := selftimeBinaries(b, bin)
	a := startAgent(b, 256, 1<<16, agent.Options{Settings: agentwire.Settings{StacksPerSecond: 1000000}})
	_, stderr, err := run(b, bin, shimEnv(st, a.path), py, "testdata/stack_loop.py", strconv.Itoa(max(b.N, 100)), "20")
	if err != nil {
		b.Fatalf("%v\n%s", err, stderr)
	}
	lines, err := parseSelftime(stderr)
	if err != nil || len(lines) != 1 || lines[0].stacks == 0 {
		b.Fatalf("selftime lines %+v (%v):\n%s", lines, err, stderr)
	}
	b.ReportMetric(lines[0].stackNS, "ns/stack")
	b.ReportMetric(float64(lines[0].stacks), "stacks")
	b.ReportMetric(0, "ns/op")
}
