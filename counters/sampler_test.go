package counters

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// build compiles the sampler and the stand-in libraries into a temporary
// directory: bin, libcupti.so, libcupti-old.so (no PM sampling) and
// libcuda.so.1.
type built struct{ dir, bin string }

func build(t *testing.T) built {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not found")
	}
	dir := t.TempDir()
	srcs, _ := filepath.Glob("src/*.c")
	b := built{dir: dir, bin: filepath.Join(dir, "gpuprobe-counters")}
	lib := []string{"-O2", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared"}
	for _, c := range [][]string{
		append(append([]string{"-O2", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-o", b.bin}, srcs...), "-ldl"),
		append(lib, "-o", filepath.Join(dir, "libcupti.so"), "testdata/mock_cupti.c"),
		append(lib, "-DMOCK_OLD", "-o", filepath.Join(dir, "libcupti-old.so"), "testdata/mock_cupti.c"),
		append(lib, "-DMOCK_CUDA", "-o", filepath.Join(dir, "libcuda.so.1"), "testdata/mock_cupti.c"),
	} {
		if out, err := exec.Command("gcc", c...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", c, err, out)
		}
	}
	return b
}

// run runs the sampler with the stand-ins and env added; it returns
// stdout, stderr and the exit status.
func (b built) run(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(b.bin, args...)
	cmd.Env = append(append(os.Environ(),
		"GPUPROBE_CUPTI="+filepath.Join(b.dir, "libcupti.so"),
		"GPUPROBE_LIBCUDA="+filepath.Join(b.dir, "libcuda.so.1")), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

type line struct {
	Type    string            `json:"type"`
	UUID    string            `json:"uuid"`
	Metrics []string          `json:"metrics"`
	Keys    []string          `json:"keys"`
	LeftOut map[string]string `json:"left_out"`
	Start   uint64            `json:"start"`
	End     uint64            `json:"end"`
	V       []float64         `json:"v"`
	Samples uint64            `json:"samples"`
	Reinits uint64            `json:"image_reinits"`
	Decodes uint64            `json:"decodes"`
	// Where the sampler's time went (the end line).
	DecodeNS    uint64 `json:"decode_ns_total"`
	DecodeNSMax uint64 `json:"decode_ns_max"`
	EvalNS      uint64 `json:"eval_ns_total"`
	ImageBytes  uint64 `json:"image_bytes"`
}

func parse(t *testing.T, out string) []line {
	t.Helper()
	var ls []line
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("not JSON: %q: %v", sc.Text(), err)
		}
		ls = append(ls, l)
	}
	return ls
}

// TestSamplesInOrder: the default set is picked from the stand-in chip's
// enumeration (a tensor metric under its third name, no L2 hit rate,
// occupancy left out for needing a second pass), and every sample the
// stand-in produced is written once, in order, with its own values,
// across several reuses of a 64-sample counter data image.
func TestSamplesInOrder(t *testing.T) {
	for _, c := range []struct {
		name string
		env  []string
	}{{"decodes append", nil}, {"decodes start the image over", []string{"MOCK_CUPTI_DECODE_RESTARTS=1"}}} {
		t.Run(c.name, func(t *testing.T) { samplesInOrder(t, c.env) })
	}
}

func samplesInOrder(t *testing.T, env []string) {
	b := build(t)
	out, errOut, code := b.run(t, env, "-t", "0.3", "-i", "1000000", "--max-samples", "64", "--decode-ms", "5")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	ls := parse(t, out)
	if len(ls) < 3 || ls[0].Type != "meta" || ls[len(ls)-1].Type != "end" {
		t.Fatalf("want meta, samples, end; got %d lines:\n%s", len(ls), out)
	}
	meta, end, samples := ls[0], ls[len(ls)-1], ls[1:len(ls)-1]
	wantKeys := []string{"sm_throughput", "sm_active", "dram_read_bytes_per_second", "dram_write_bytes_per_second", "tensor_active"}
	if strings.Join(meta.Keys, ",") != strings.Join(wantKeys, ",") {
		t.Errorf("keys %v, want %v", meta.Keys, wantKeys)
	}
	if meta.UUID != "101112131415161718191a1b1c1d1e1f" {
		t.Errorf("uuid %q, want the stand-in driver's 10..1f", meta.UUID)
	}
	if meta.Metrics[4] != "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed" {
		t.Errorf("tensor metric %q, want the gmma name the chip offers", meta.Metrics[4])
	}
	if !strings.Contains(meta.LeftOut["l2_hit_rate"], "not enumerated") ||
		!strings.Contains(meta.LeftOut["achieved_occupancy"], "second pass") {
		t.Errorf("left_out %v: want l2_hit_rate not enumerated, achieved_occupancy a second pass", meta.LeftOut)
	}
	// 0.3 s at 1 ms: about 300 samples, more than four images' worth.
	if len(samples) < 150 || end.Samples != uint64(len(samples)) {
		t.Fatalf("%d samples, end says %d: want >= 150", len(samples), end.Samples)
	}
	if env == nil && end.Reinits < 2 {
		t.Errorf("%d image reinits, want >= 2 for 300 samples in 64-sample images", end.Reinits)
	}
	for i, s := range samples {
		g := float64(i)
		if s.Type != "sample" || s.Start != 1e12+uint64(i)*1e6 || s.End != s.Start+1e6 || len(s.V) != len(meta.Metrics) {
			t.Fatalf("sample %d: %+v, want start %d", i, s, 1e12+uint64(i)*1e6)
		}
		for k, v := range s.V {
			if want := g + float64(k)/10; v < want-1e-6 || v > want+1e-6 {
				t.Fatalf("sample %d metric %d = %v, want %v", i, k, v, want)
			}
		}
	}
}

// TestTimings: the end line times decoding and evaluation apart, each
// with the time the stand-in spends in it: a slow decode shows in
// decode_ns_total and decode_ns_max, a slow evaluation in eval_ns_total,
// neither in the other; the stderr summary says the same.
func TestTimings(t *testing.T) {
	const slow = 2 * time.Millisecond
	b := build(t)
	for _, c := range []struct {
		name string
		env  string
	}{{"slow decode", "MOCK_CUPTI_DECODE_US=2000"}, {"slow evaluation", "MOCK_CUPTI_EVAL_US=2000"}} {
		t.Run(c.name, func(t *testing.T) {
			// 0.2 s at 10 ms: about 20 samples in 64-sample images,
			// a decode every 5 ms plus the decode's own time.
			out, errOut, code := b.run(t, []string{c.env}, "-t", "0.2", "-i", "10000000", "--max-samples", "64", "--decode-ms", "5")
			if code != 0 {
				t.Fatalf("exit %d\n%s", code, errOut)
			}
			ls := parse(t, out)
			end := ls[len(ls)-1]
			if end.Type != "end" || end.Samples < 5 || end.Decodes < 5 {
				t.Fatalf("end line %+v: want >= 5 samples and decodes", end)
			}
			// The stand-in's image: a 24-byte header and a byte a sample.
			if end.ImageBytes != 24+64 {
				t.Errorf("image_bytes %d, want the stand-in's 88", end.ImageBytes)
			}
			if end.DecodeNSMax > end.DecodeNS || end.DecodeNSMax*end.Decodes < end.DecodeNS {
				t.Errorf("decode_ns_max %d, total %d over %d decodes: the longest must be between the mean and the total",
					end.DecodeNSMax, end.DecodeNS, end.Decodes)
			}
			decode, eval := end.DecodeNS, end.EvalNS
			slowPart, slowN, other := decode, end.Decodes, eval
			if strings.Contains(c.env, "EVAL") {
				slowPart, slowN, other = eval, end.Samples, decode
			} else if end.DecodeNSMax < uint64(slow) {
				t.Errorf("decode_ns_max %d, want >= %d", end.DecodeNSMax, slow)
			}
			if slowPart < slowN*uint64(slow) || other >= slowPart/4 {
				t.Errorf("%s: decode %d ns over %d decodes, eval %d ns over %d samples: want >= %v each on the slow side, under a quarter of it on the other",
					c.name, decode, end.Decodes, eval, end.Samples, slow)
			}
			if !strings.Contains(errOut, "longest") || !strings.Contains(errOut, "us a sample") {
				t.Errorf("stderr summary %q: want the longest decode and the evaluation per sample", errOut)
			}
		})
	}
}

// TestDecodeFailures: a decode that fails now and then costs no sample
// (the next one decodes what it left); one that keeps failing ends the run
// with the call named.
func TestDecodeFailures(t *testing.T) {
	b := build(t)
	out, errOut, code := b.run(t, []string{"MOCK_CUPTI_DECODE_FAILS=3"}, "-t", "0.2", "-i", "1000000", "--decode-ms", "5")
	ls := parse(t, out)
	if code != 0 || len(ls) < 3 || ls[len(ls)-1].Samples != uint64(len(ls)-2) || !strings.Contains(errOut, "cuptiPmSamplingDecodeData") {
		t.Errorf("three failed decodes: exit %d, %d lines: want exit 0, every sample, the error reported\n%s", code, len(ls), errOut)
	}
	for i, s := range ls[1 : len(ls)-1] {
		if s.Start != 1e12+uint64(i)*1e6 {
			t.Fatalf("sample %d starts at %d: a sample lost or repeated", i, s.Start)
		}
	}
	_, errOut, code = b.run(t, []string{"MOCK_CUPTI_DECODE_FAILS=100000"}, "-t", "5", "--decode-ms", "1")
	if code != 4 || !strings.Contains(errOut, "cuptiPmSamplingDecodeData (persisting)") {
		t.Errorf("decodes always failing: exit %d, stderr %q: want exit 4 naming the call", code, errOut)
	}
}

// TestUserMetrics: a user's list replaces the default set; a name the
// chip does not know is left out, the rest are sampled.
func TestUserMetrics(t *testing.T) {
	b := build(t)
	out, errOut, code := b.run(t, nil, "-t", "0.05", "-m", "dram__bytes_read.sum.per_second,lts__bogus.pct")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	meta := parse(t, out)[0]
	if len(meta.Metrics) != 1 || meta.Metrics[0] != "dram__bytes_read.sum.per_second" || meta.LeftOut["lts__bogus.pct"] == "" {
		t.Errorf("metrics %v left out %v: want only the dram metric, the bogus one left out", meta.Metrics, meta.LeftOut)
	}
}

// TestFailOpen: each case where sampling cannot run exits before any
// sample with its own status and a message naming what is missing.
func TestFailOpen(t *testing.T) {
	b := build(t)
	for _, c := range []struct {
		name string
		env  []string
		args []string
		code int
		msg  string
	}{
		{"old CUPTI", []string{"GPUPROBE_CUPTI=" + filepath.Join(b.dir, "libcupti-old.so")}, nil, 3, "has no cuptiPmSampling"},
		{"no CUPTI", []string{"GPUPROBE_CUPTI=" + filepath.Join(b.dir, "nonexistent.so")}, nil, 3, "cannot load"},
		{"no driver", []string{"GPUPROBE_LIBCUDA=" + filepath.Join(b.dir, "nonexistent.so")}, nil, 3, "no NVIDIA driver"},
		{"device held", []string{"MOCK_CUPTI_BUSY=1"}, nil, 5, "cuptiPmSamplingEnable: CUPTI_ERROR_INVALID_OPERATION"},
		{"no such device", nil, []string{"-d", "3"}, 4, "cuDeviceGet"},
		{"no metric", nil, []string{"-m", "lts__bogus.pct"}, 6, "no metric left"},
		{"bad interval", nil, []string{"-i", "0"}, 2, "must be > 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := b.run(t, c.env, append([]string{"-t", "0.05"}, c.args...)...)
			if code != c.code || !strings.Contains(errOut, c.msg) || strings.Contains(out, `"sample"`) {
				t.Errorf("exit %d, stderr %q, stdout %q: want exit %d, %q and no sample", code, errOut, out, c.code, c.msg)
			}
		})
	}
}
