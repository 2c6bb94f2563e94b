package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/zap"
)

// buildSampler compiles gpuprobe-counters and the stand-in libcupti and
// libcuda of counters/testdata into a temporary directory, and points the
// sampler at them through the environment.
func buildSampler(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not found: the sampler is C")
	}
	dir := t.TempDir()
	srcs, _ := filepath.Glob("../../counters/src/*.c")
	mock := "../../counters/testdata/mock_cupti.c"
	bin := filepath.Join(dir, "gpuprobe-counters")
	lib := []string{"-O2", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared"}
	for _, c := range [][]string{
		append(append([]string{"-O2", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-o", bin}, srcs...), "-ldl"),
		append(lib, "-o", filepath.Join(dir, "libcupti.so"), mock),
		append(lib, "-DMOCK_CUDA", "-o", filepath.Join(dir, "libcuda.so.1"), mock),
	} {
		if out, err := exec.Command("gcc", c...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", c, err, out)
		}
	}
	t.Setenv("GPUPROBE_CUPTI", filepath.Join(dir, "libcupti.so"))
	t.Setenv("GPUPROBE_LIBCUDA", filepath.Join(dir, "libcuda.so.1"))
	return bin
}

// TestSuperviseSampler: every sample of a real sampler run (against the
// stand-in CUPTI) is published in order, and a sampler that cannot run
// passes its own exit status on.
func TestSuperviseSampler(t *testing.T) {
	bin := buildSampler(t)
	var pub fakePublisher
	o := &countersOpts{sampler: bin, args: []string{"-t", "0.2", "-i", "1000000", "--decode-ms", "5"}}
	st, code := superviseSampler(context.Background(), o, &pub, zap.NewNop(), io.Discard)
	if code != 0 || st.bad != 0 || len(pub.sets) != 1 || len(pub.samples) < 100 {
		t.Fatalf("exit %d, %+v, %d sets, %d samples: want exit 0, one set, >= 100 samples", code, st, len(pub.sets), len(pub.samples))
	}
	for i, s := range pub.samples {
		if s.Values[0] != float64(i) || (i > 0 && s.StartNS != pub.samples[i-1].EndNS) || s.EndNS-s.StartNS != 1000000 {
			t.Fatalf("sample %d = %+v: lost, repeated or moved", i, s)
		}
	}
	t.Setenv("MOCK_CUPTI_BUSY", "1")
	if _, code := superviseSampler(context.Background(), o, &fakePublisher{}, zap.NewNop(), io.Discard); code != 5 {
		t.Errorf("device held by another profiler: exit %d, want the sampler's 5", code)
	}
	o.sampler = filepath.Join(os.TempDir(), "no-such-sampler")
	if _, code := superviseSampler(context.Background(), o, &fakePublisher{}, zap.NewNop(), io.Discard); code != 1 {
		t.Errorf("no sampler binary: exit %d, want 1", code)
	}
}
