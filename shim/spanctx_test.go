package shim

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/record"
)

// ids returns the trace and span ids app_spanctx.c sets: bytes t, t+1, ...
// and s, s+1, ...
func ids(t, s byte) ([16]byte, [8]byte) {
	var tr [16]byte
	var sp [8]byte
	for i := range tr {
		tr[i] = t + byte(i)
	}
	for i := range sp {
		sp[i] = s + byte(i)
	}
	return tr, sp
}

// envTrace is the TRACEPARENT of TestSpanContext's env case.
const envTrace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// TestSpanContext runs app_spanctx.c's launches under the shim: each
// launch carries the context its thread set before it (the thread's
// latest span_context record in the ring), TRACEPARENT where the thread
// set none, and nothing without either.
func TestSpanContext(t *testing.T) {
	b := binaries(t)
	var env record.SpanContext
	env.Source, env.Flags = record.SpanContextEnv, 1
	copy(env.TraceID[:], []byte{0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c})
	copy(env.SpanID[:], []byte{0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31})
	thread := func(tb, sb, flags byte) record.SpanContext {
		tr, sp := ids(tb, sb)
		return record.SpanContext{TraceID: tr, SpanID: sp, Flags: flags, Source: record.SpanContextThread}
	}
	none := record.SpanContext{}
	for _, tc := range []struct {
		name        string
		traceparent string
		fallback    record.SpanContext // launches 1, 5 and 7: no context of their own
		trace       string             // a line GPUPROBE_TRACE=1 must write
	}{
		{"no traceparent", "", none, ""},
		{"traceparent", envTrace, env, "join trace 0af7651916cd43dd8448eb211c80319c"},
		{"invalid traceparent", strings.ToUpper(envTrace), none, "ignored: not lowercase hex"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := startAgent(t, 256, 1024, agent.Options{})
			e := append(preload(b, a.path), "TRACEPARENT="+tc.traceparent, "GPUPROBE_TRACE=1")
			out, errOut, err := run(t, b, e, b.app, "cudart", "spanctx")
			if err != nil || !strings.Contains(out, "spanctx shim=1") {
				t.Fatalf("run: %v\n%s\n%s", err, out, errOut)
			}
			if tc.trace != "" && !strings.Contains(errOut, tc.trace) {
				t.Errorf("trace log lacks %q:\n%s", tc.trace, errOut)
			}
			st := a.waitGone(t, 1)[0].read(t)
			want := []record.SpanContext{tc.fallback, thread(0xa0, 0xb0, 1), thread(0xa0, 0xb0, 1),
				thread(0xc0, 0xd0, 0), tc.fallback, thread(0xe0, 0xf0, 1), tc.fallback}
			if len(st.launches) != len(want) {
				t.Fatalf("%d launches, want %d", len(st.launches), len(want))
			}
			if len(st.memcpys) != 1 {
				t.Fatalf("%d memcpy records, want 1", len(st.memcpys))
			}
			if got := st.copyCtx[0]; got.TraceID != want[3].TraceID || got.SpanID != want[3].SpanID {
				t.Errorf("the copy's context %+v, want context B's", got)
			}
			for i, l := range st.launches {
				got := st.spanCtx[i]
				if got.Source != record.SpanContextNone && (got.PID != l.PID || got.TID != l.TID) {
					t.Errorf("launch %d: context of pid %d tid %d, launch of %d %d", i+1, got.PID, got.TID, l.PID, l.TID)
				}
				got.PID, got.TID = 0, 0
				if l.Grid[0] != uint32(i+1) || got != want[i] {
					t.Errorf("launch %d (grid.x %d): context %+v, want %+v", i+1, l.Grid[0], got, want[i])
				}
			}
		})
	}
}

// TestSpanContextUnused: a process that sets no context and has no
// TRACEPARENT writes no span_context record.
func TestSpanContextUnused(t *testing.T) {
	b := binaries(t)
	a := startAgent(t, 256, 1024, agent.Options{})
	if _, errOut, err := run(t, b, preload(b, a.path), b.app, "cudart", "basic", "5"); err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	st := a.waitGone(t, 1)[0].read(t)
	if len(st.threadSC) != 0 {
		t.Errorf("span_context records %v in a process that uses none", st.threadSC)
	}
}

// TestTraceparentParse runs spanctx.c's TRACEPARENT parser, linked into
// testdata/traceparent.c, on valid and invalid values (W3C Trace Context,
// level 1: version 00 is exactly 55 characters, lowercase hex, no all-zero
// id, version ff invalid, a later version may carry more fields).
func TestTraceparentParse(t *testing.T) {
	binaries(t) // gcc is there
	srcs, err := filepath.Glob("src/*.c")
	if err != nil {
		t.Fatal(err)
	}
	var lib []string
	for _, s := range srcs {
		if !strings.HasSuffix(s, "selftime.c") {
			lib = append(lib, s)
		}
	}
	bin := filepath.Join(t.TempDir(), "traceparent")
	args := append([]string{"-O2", "-Wall", "-Wextra", "-Werror", "-Isrc", "-I../shm/include", "-I../record/include",
		"-o", bin, "testdata/traceparent.c"}, lib...)
	if err := gcc(append(args, "-ldl", "-lpthread")...); err != nil {
		t.Fatal(err)
	}
	const tr, sp = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	tests := []struct{ in, want string }{
		{"00-" + tr + "-" + sp + "-01", "ok " + tr + " " + sp + " 01"},
		{"00-" + tr + "-" + sp + "-00", "ok " + tr + " " + sp + " 00"},
		{"01-" + tr + "-" + sp + "-03-later-fields", "ok " + tr + " " + sp + " 03"},
		{"01-" + tr + "-" + sp + "-01", "ok " + tr + " " + sp + " 01"},
		{"00-" + tr + "-" + sp + "-01-extra", "invalid unexpected characters after the flags"},
		{"01-" + tr + "-" + sp + "-01x", "invalid unexpected characters after the flags"},
		{"ff-" + tr + "-" + sp + "-01", "invalid version ff is invalid"},
		{"00-" + strings.ToUpper(tr) + "-" + sp + "-01", "invalid not lowercase hex"},
		{"00-" + tr + "-" + sp + "-0g", "invalid not lowercase hex"},
		{"00-00000000000000000000000000000000-" + sp + "-01", "invalid all-zero trace id"},
		{"00-" + tr + "-0000000000000000-01", "invalid all-zero span id"},
		{"00_" + tr + "_" + sp + "_01", "invalid not version-traceid-spanid-flags"},
		{"zz-" + tr + "-" + sp + "-01", "invalid not version-traceid-spanid-flags"},
		{"00-" + tr + "-" + sp, "invalid shorter than 55 characters"},
		{"garbage", "invalid shorter than 55 characters"},
	}
	var in []string
	for _, tt := range tests {
		in = append(in, tt.in)
	}
	out, err := exec.Command(bin, in...).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(got) != len(tests) {
		t.Fatalf("%d answers for %d values:\n%s", len(got), len(tests), out)
	}
	for i, tt := range tests {
		if got[i] != tt.want {
			t.Errorf("%q: %q, want %q", tt.in, got[i], tt.want)
		}
	}
}

// TestPythonSpanProcessor runs python/gpuprobe_otel's span processor in
// a Python process under the shim (CUDA through ctypes, the MOCK driver):
// each launch carries the span open on its thread, as
// tests/launch_under_spans.py lists them.
func TestPythonSpanProcessor(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on this machine: the Python package is tested where there is one")
	}
	b := binaries(t)
	a := startAgent(t, 256, 1024, agent.Options{})
	script, _ := filepath.Abs("../python/gpuprobe_otel/tests/launch_under_spans.py")
	out, errOut, err := run(t, b, preload(b, a.path), py, script)
	if err != nil || !strings.Contains(out, "shim=1") {
		t.Fatalf("python: %v\n%s\n%s", err, out, errOut)
	}
	st := a.waitGone(t, 1)[0].read(t)
	span := func(trace byte, sp byte, flags uint8) record.SpanContext {
		var sc record.SpanContext
		for i := range sc.TraceID {
			sc.TraceID[i] = trace
		}
		for i := range sc.SpanID {
			sc.SpanID[i] = sp
		}
		sc.Flags, sc.Source = flags, record.SpanContextThread
		return sc
	}
	req, fwd := span(0xa1, 0xb1, 1), span(0xa1, 0xb2, 1)
	want := []record.SpanContext{{}, req, fwd, req, {}, span(0xa2, 0xb3, 0)}
	if len(st.launches) != len(want) {
		t.Fatalf("%d launches, want %d", len(st.launches), len(want))
	}
	for i, l := range st.launches {
		got := st.spanCtx[i]
		got.PID, got.TID = 0, 0
		if l.Grid[0] != uint32(i+1) || got != want[i] {
			t.Errorf("launch %d (grid.x %d): context %+v, want %+v", i+1, l.Grid[0], got, want[i])
		}
	}
}

// TestPythonPackageUnit runs python/gpuprobe_otel's own unit tests (the
// processor against a stand-in shim; the binding without the shim), so
// that the Go test run covers the package.
func TestPythonPackageUnit(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on this machine: the Python package is tested where there is one")
	}
	cmd := exec.Command(py, "-m", "unittest", "discover", "-s", "../python/gpuprobe_otel/tests", "-p", "test_*.py")
	cmd.Env = append(os.Environ(), "LD_PRELOAD=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("python unit tests: %v\n%s", err, out)
	}
}

// TestShimHeaderWeak builds testdata/weak_api.c against
// include/gpuprobe_shim.h with weak references (C and C++): without the
// shim the functions are absent and the program runs; preloaded, they are
// the shim's.
func TestShimHeaderWeak(t *testing.T) {
	b := binaries(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "weak")
	if err := gcc("-O2", "-Wall", "-Wextra", "-Werror", "-Iinclude", "-o", bin, "testdata/weak_api.c"); err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("g++"); err == nil {
		if out, err := exec.Command("g++", "-fsyntax-only", "-Wall", "-Werror", "-x", "c++", "include/gpuprobe_shim.h").CombinedOutput(); err != nil {
			t.Errorf("the header in C++: %v\n%s", err, out)
		}
	}
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{nil, "shim=0\n"},
		{[]string{"LD_PRELOAD=" + b.shim, "GPUPROBE_DISABLE=1"}, "shim=1 set=0 bad=-1\n"},
	} {
		out, errOut, err := run(t, b, tc.env, bin)
		if err != nil || out != tc.want {
			t.Errorf("env %v: %q (%v), want %q\n%s", tc.env, out, err, tc.want, errOut)
		}
	}
}

// TestSpanContextReconnect: after a collector restart the new session
// gets the thread's span context again before its first launch: every
// launch of both sessions carries it.
func TestSpanContextReconnect(t *testing.T) {
	b := binaries(t)
	path := filepath.Join(t.TempDir(), "agent.sock")
	a1 := startAgentAt(t, path, 128, 1024, agent.Options{})
	app := exec.Command(b.app, "cudart", "spanctxslow", "60")
	app.Env = append(os.Environ(), "LD_LIBRARY_PATH="+b.dir, "GPUPROBE_TRACE=", "TRACEPARENT=")
	app.Env = append(app.Env, preload(b, path)...)
	a2, _ := restartAfterFirstLine(t, app, a1, path, 128, agent.Options{})
	tr, sp := ids(0xa0, 0xb0)
	for i, a := range []*testAgent{a1, a2} {
		st := a.waitGone(t, 1)[0].read(t)
		if len(st.launches) == 0 || (i == 1 && len(st.launches) < 10) {
			t.Fatalf("session %d: %d launches", i+1, len(st.launches))
		}
		for j, sc := range st.spanCtx {
			if sc.TraceID != tr || sc.SpanID != sp || sc.Source != record.SpanContextThread {
				t.Errorf("session %d launch %d: context %+v, want trace a0.. span b0..", i+1, j+1, sc)
				break
			}
		}
	}
}
