package translate

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// fakeProc makes a proc root in which process pid maps, at 0x10000000,
// a shared object (built with the C compiler) whose function
// stack_marker is there; it returns the root and a return address inside
// stack_marker.
func fakeProc(t *testing.T, pid uint32) (string, uint64) {
	t.Helper()
	dir := t.TempDir()
	pd := filepath.Join(dir, fmt.Sprint(pid))
	if err := os.MkdirAll(filepath.Join(pd, "root"), 0o755); err != nil {
		t.Fatal(err)
	}
	src, so := filepath.Join(dir, "m.c"), filepath.Join(pd, "root", "libm.so")
	if err := os.WriteFile(src, []byte("int stack_marker(int x) { return x * 3 + 1; }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cc", "-O1", "-shared", "-fPIC", "-o", so, src).CombinedOutput(); err != nil {
		t.Fatalf("cc (the stack test needs a C compiler): %v\n%s", err, out)
	}
	f, err := elf.Open(so)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, _ := f.DynamicSymbols()
	var off uint64
	for _, y := range syms {
		for _, p := range f.Progs {
			if y.Name == "stack_marker" && p.Type == elf.PT_LOAD && y.Value >= p.Vaddr && y.Value < p.Vaddr+p.Filesz {
				off = y.Value - p.Vaddr + p.Off
			}
		}
	}
	if off == 0 {
		t.Fatal("no stack_marker in the shared object")
	}
	maps := "10000000-10100000 r-xp 00000000 00:00 0 /libm.so\n"
	if err := os.WriteFile(filepath.Join(pd, "maps"), []byte(maps), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, 0x10000000 + off + 2
}

// stackOf adds launch id's stack of process pid (thread pid+1) in two
// parts of one return address each.
func (s *stream) stackOf(id uint64, pid uint32, pc uint64) {
	s.add(&record.Stack{LaunchID: id, PID: pid, TID: pid + 1, Native: []uint64{pc}})
	s.add(&record.Stack{LaunchID: id, PID: pid, TID: pid + 1, Part: 1, Flags: record.StackLast, Native: []uint64{pc}})
}

// stackSpans returns the launch spans of td that carry code.stacktrace.
func stackSpans(td ptrace.Traces) []ptrace.Span {
	var out []ptrace.Span
	roots, _ := launchRoots(td)
	for _, r := range roots {
		if _, ok := r.Attributes().Get(AttrStacktrace); ok {
			out = append(out, r)
		}
	}
	return out
}

// TestStackPolicy: of 100 launches of one kernel under a bound of one
// trace a second per kernel, the 10 that carry a stack are kept (reason
// "stack") besides the one the kernel's bucket allows, and their spans
// hold the stack, symbolised from the process's maps and mapped files;
// a stack whose launch id is not the next launch's is not taken by it.
func TestStackPolicy(t *testing.T) {
	pid := uint32(42)
	root, pc := fakeProc(t, pid)
	now := time.Unix(5000, 0)
	tr := newTr(Options{ExpectWarps: true, Sampling: SamplingOptions{Traces: TracePolicyOptions{PerKernel: 1}}})
	tr.spans.sym.Proc = root
	var s stream
	s.calibrate(0)
	s.add(&record.KernelName{Function: 1, Name: "k", PID: pid})
	for id := range uint64(100) {
		switch {
		case id%10 == 0:
			s.stackOf(id+1, pid, pc)
		case id == 55:
			s.stackOf(1000, pid, pc) // another launch's: its record was lost
		}
		s.policyLaunch(id+1, 1, 10_000*(id+1), pid, 0, 1000)
	}
	feed(t, tr, &s, now)
	td := tr.TakeTraces()
	got := reasonCounts(td)
	if got["stack"] != 10 || got["head"] != 1 || len(got) != 2 {
		t.Fatalf("kept traces by reason %v, want 10 stack and 1 head", got)
	}
	sp := stackSpans(td)
	if len(sp) != 10 {
		t.Fatalf("%d launch spans with a stack, want 10", len(sp))
	}
	st, _ := sp[0].Attributes().Get(AttrStacktrace)
	if lines := strings.Split(strings.TrimSpace(st.Str()), "\n"); len(lines) != 2 || !strings.Contains(lines[0], "at stack_marker (libm.so+") {
		t.Fatalf("code.stacktrace %q, want stack_marker twice", st.Str())
	}
}

// TestStackBound: past maxThreadContexts threads gathering a stack, a new
// thread's stack is left out; a part without its first is dropped.
func TestStackBound(t *testing.T) {
	tr := newTr(Options{})
	now := time.Now()
	for tid := range uint32(maxThreadContexts + 1) {
		r := record.Stack{LaunchID: 1, PID: 42, TID: tid, Native: []uint64{1}}
		if err := tr.Handle(1, r.Append(nil), now); err != nil {
			t.Fatal(err)
		}
	}
	c := tr.clients.get(1)
	if len(c.stacks) != maxThreadContexts {
		t.Fatalf("%d threads' stacks kept, want %d", len(c.stacks), maxThreadContexts)
	}
	late := record.Stack{LaunchID: 9, PID: 42, TID: 0, Part: 1, Flags: record.StackLast}
	if err := tr.Handle(1, late.Append(nil), now); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.stacks[0]; ok || tr.clients.takeStack(1, 0, 9) != nil {
		t.Fatal("a stack without its first part was kept")
	}
}

// TestStackPIDReuse: a client's disconnect drops what the symboliser
// keeps of its pid, so a later process with that pid is resolved from
// its own maps, not the gone one's.
func TestStackPIDReuse(t *testing.T) {
	pid := uint32(42)
	root, pc := fakeProc(t, pid)
	now := time.Unix(5000, 0)
	tr := newTr(Options{ExpectWarps: true})
	tr.spans.sym.Proc = root
	top := func(src uint32) string {
		tr.Connect(src, Peer{PID: pid, UID: 1, Exe: "app", Start: uint64(src)})
		var s stream
		s.calibrate(0)
		s.add(&record.KernelName{Function: 1, Name: "k", PID: pid})
		s.stackOf(1, pid, pc)
		s.policyLaunch(1, 1, 10_000, pid, 0, 1000)
		feedSrc(t, tr, src, &s, now)
		sp := stackSpans(tr.TakeTraces())
		if len(sp) != 1 {
			t.Fatalf("source %d: %d spans with a stack, want 1", src, len(sp))
		}
		st, _ := sp[0].Attributes().Get(AttrStacktrace)
		return strings.SplitN(st.Str(), "\n", 2)[0]
	}
	if got := top(1); !strings.Contains(got, "stack_marker") {
		t.Fatalf("first process: top frame %q", got)
	}
	// The next process with pid 42 maps nothing there.
	if err := os.WriteFile(filepath.Join(root, fmt.Sprint(pid), "maps"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tr.Disconnect(1, now)
	if got := top(2); strings.Contains(got, "stack_marker") {
		t.Fatalf("after the disconnect, top frame %q resolved through the gone process's maps", got)
	}
}
