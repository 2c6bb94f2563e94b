package conformance

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/jit"
)

// suiteDir finds the bpf_conformance data: $GPUPROBE_CONFORMANCE, else
// testdata/conformance in the repository.
func suiteDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("GPUPROBE_CONFORMANCE")
	if dir == "" {
		dir = filepath.Join("..", "..", "testdata", "conformance")
	}
	if _, err := os.Stat(filepath.Join(dir, "tests")); err != nil {
		t.Fatalf("conformance data not found (set GPUPROBE_CONFORMANCE): %v", err)
	}
	return dir
}

func TestSuiteInterp(t *testing.T) {
	files, err := Files([]string{filepath.Join(suiteDir(t), "tests")})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 200 {
		t.Fatalf("only %d test files found", len(files))
	}
	for _, f := range files {
		o := EvaluateFile(f, Interp{}, Verify)
		if !o.Passed() {
			t.Errorf("%s: %v", filepath.Base(f), o.Err)
		}
	}
}

func TestSuiteNegative(t *testing.T) {
	files, err := Files([]string{filepath.Join(suiteDir(t), "negative")})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		o := EvaluateFile(f, Interp{}, Verify)
		name := filepath.Base(f)
		if !o.Rejected() {
			t.Errorf("%s: accepted (r0 = %#x), want a rejection", name, o.R0)
			continue
		}
		if o.Reason() == nil || len(o.Reason().Error()) < 10 {
			t.Errorf("%s: rejected without a clear reason: %v", name, o.Reason())
		}
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name, text, err string
		check           func(t *testing.T, c *Case)
	}{
		{"full", "# Copyright x\n# SPDX: MIT\n-- asm\nmov %r0, %r2\nexit\n-- mem\n00 01\nff\n-- result\n0x3\n", "", func(t *testing.T, c *Case) {
			if len(c.Header) != 2 || c.Header[0] != "# Copyright x" {
				t.Errorf("header %q", c.Header)
			}
			if string(c.Mem) != "\x00\x01\xff" || c.Result != 3 || !c.HasResult {
				t.Errorf("mem % x result %#x", c.Mem, c.Result)
			}
			if lines := strings.Split(c.Asm, "\n"); len(lines) < 5 || lines[3] != "mov %r0, %r2" {
				t.Errorf("asm does not keep file line numbers: %q", c.Asm)
			}
		}},
		{"error section", "-- asm\nexit\n-- error\nInvalid thing\n", "", func(t *testing.T, c *Case) {
			if !c.HasError || c.Error != "Invalid thing" || c.HasResult {
				t.Errorf("error %q %v", c.Error, c.HasError)
			}
		}},
		{"ignored sections", "-- c\nint x;\n-- asm\nexit\n-- result\n0\n-- no register offset\ncall instruction\n", "", func(t *testing.T, c *Case) {
			if c.C != "int x;" {
				t.Errorf("c = %q", c.C)
			}
		}},
		{"decimal result", "-- asm\nexit\n-- result\n42\n", "", func(t *testing.T, c *Case) {
			if c.Result != 42 {
				t.Errorf("result %d", c.Result)
			}
		}},
		{"crlf", "-- asm\r\nexit\r\n-- result\r\n0x1\r\n", "", nil},
		{"unknown section", "-- asm\nexit\n-- Unknown directive\n", `f.data:3: unknown section "-- Unknown directive"`, nil},
		{"no program", "# only comments\n", "no program", nil},
		{"no result", "-- asm\nexit\n", "neither -- result nor -- error", nil},
		{"bad result", "-- asm\nexit\n-- result\n0xzz\n", "-- result", nil},
		{"bad mem", "-- asm\nexit\n-- mem\n0g\n-- result\n0\n", `"0g" is not a hex byte`, nil},
		{"duplicate", "-- asm\nexit\n-- asm\nexit\n-- result\n0\n", "appears twice", nil},
		{"stray text", "hello\n-- asm\nexit\n-- result\n0\n", "before the first section", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("f.data", []byte(tt.text))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Parse error = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.check != nil {
				tt.check(t, c)
			}
		})
	}
}

// fixedRunner returns a fixed r0 or error, to test Evaluate's logic.
type fixedRunner struct {
	r0  uint64
	err error
}

func (fixedRunner) Name() string                              { return "fixed" }
func (f fixedRunner) Run(*Case, *jit.Program) (uint64, error) { return f.r0, f.err }

func TestEvaluate(t *testing.T) {
	reject := func(*jit.Program, int) error { return errors.New("nope") }
	tests := []struct {
		name     string
		text     string
		r        Runner
		verify   VerifyFunc
		passed   bool
		rejected bool
		stage    Stage
	}{
		{"pass", "-- asm\nexit\n-- result\n0x5\n", fixedRunner{r0: 5}, nil, true, false, StageResult},
		{"wrong r0", "-- asm\nexit\n-- result\n0x5\n", fixedRunner{r0: 6}, nil, false, true, StageResult},
		{"run error", "-- asm\nexit\n-- result\n0x5\n", fixedRunner{err: errors.New("fault")}, nil, false, true, StageRun},
		{"verifier rejects", "-- asm\nexit\n-- result\n0x5\n", fixedRunner{r0: 5}, reject, false, true, StageVerify},
		{"expected error, verifier rejects", "-- asm\nexit\n-- error\nx\n", fixedRunner{}, reject, true, true, StageVerify},
		{"expected error, ran", "-- asm\nexit\n-- error\nx\n", fixedRunner{}, nil, false, false, StageResult},
		{"assembly error", "-- asm\nfoo\n-- result\n0\n", fixedRunner{}, nil, false, true, StageAssemble},
		{"asm and raw agree", "-- asm\nexit\n-- raw\n0x95\n-- result\n0\n", fixedRunner{}, nil, true, false, StageResult},
		{"asm and raw differ", "-- asm\nexit\n-- raw\n0x00000001000000b7\n0x95\n-- result\n0\n", fixedRunner{}, nil, false, true, StageAssemble},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("x.data", []byte(tt.text))
			if err != nil {
				t.Fatal(err)
			}
			o := Evaluate(c, tt.r, tt.verify)
			if o.Passed() != tt.passed || o.Rejected() != tt.rejected || o.Stage != tt.stage {
				t.Fatalf("passed %v rejected %v stage %s (err %v); want %v %v %s", o.Passed(), o.Rejected(), o.Stage, o.Err, tt.passed, tt.rejected, tt.stage)
			}
		})
	}
}

func TestReportAndFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.data", "-- asm\nmov %r0, 1\nexit\n-- result\n0x1\n")
	write("b.data", "-- asm\nmov %r0, 2\nexit\n-- result\n0x1\n")
	write("notes.txt", "ignored")
	files, err := Files([]string{dir})
	if err != nil || len(files) != 2 {
		t.Fatalf("Files = %v, %v", files, err)
	}
	var out strings.Builder
	passed, failed := Report(&out, files, Interp{}, nil, false, false)
	if passed != 1 || failed != 1 {
		t.Fatalf("passed %d failed %d", passed, failed)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "b.data: FAIL: interp: r0 = 0x2, want 0x1") || lines[1] != "1 passed, 1 failed" {
		t.Fatalf("report:\n%s", out.String())
	}
	out.Reset()
	passed, failed = Report(&out, files, Interp{}, nil, true, false)
	if passed != 1 || failed != 1 || !strings.Contains(out.String(), "a.data: FAIL: accepted") {
		t.Fatalf("negative report:\n%s", out.String())
	}
	if _, err := Files([]string{filepath.Join(dir, "missing")}); err == nil {
		t.Fatal("Files of a missing path succeeded")
	}
	if _, err := Files([]string{t.TempDir()}); err == nil {
		t.Fatal("Files of an empty directory succeeded")
	}
}

func TestGPURunnerRegistry(t *testing.T) {
	RegisterGPURunner(nil)
	if _, err := GPURunner(); err == nil {
		t.Fatal("GPURunner without registration succeeded")
	}
	RegisterGPURunner(func() (Runner, error) { return fixedRunner{r0: 1}, nil })
	defer RegisterGPURunner(nil)
	r, err := GPURunner()
	if err != nil || r.Name() != "fixed" {
		t.Fatalf("GPURunner = %v, %v", r, err)
	}
}

func TestUnwindHelper(t *testing.T) {
	tests := []struct {
		src  string
		want uint64
	}{
		{"mov %r1, 0\ncall 5\nmov %r0, 2\nexit", 0},
		{"mov %r1, 7\ncall 5\nexit", 7},
		{"mov %r1, 0\nmov %r2, 5\ncall %r2\nmov %r0, 2\nexit", 0},
	}
	for _, tt := range tests {
		c, err := Parse("u.data", []byte("-- asm\n"+tt.src+"\n-- result\n0\n"))
		if err != nil {
			t.Fatal(err)
		}
		p, err := c.Program()
		if err != nil {
			t.Fatal(err)
		}
		r0, err := Interp{}.Run(c, p)
		if err != nil || r0 != tt.want {
			t.Errorf("%q: r0 = %d, %v; want %d", tt.src, r0, err, tt.want)
		}
	}
}
