package ptx

import (
	"context"
	"encoding/binary"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/verifier"
)

// joinPrograms compiles jit/testdata/joins.c (pointers that point into
// different regions on different paths) and returns its programs that the
// verifier accepts, by name, compiled with the verifier's proofs.
func joinPrograms(t *testing.T) map[string]*Func {
	t.Helper()
	clang, err := exec.LookPath("clang")
	if err != nil {
		t.Fatal("clang not installed: the join tests need clang -target bpf")
	}
	obj := filepath.Join(t.TempDir(), "joins.o")
	cmd := exec.Command(clang, "-target", "bpf", "-O2", "-g", "-Wall", "-Werror", "-mcpu=v3", "-I", "../include", "-c", "../testdata/joins.c", "-o", obj)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("clang: %v\n%s", err, out)
	}
	progs, err := jit.LoadELF(obj)
	if err != nil {
		t.Fatal(err)
	}
	funcs := map[string]*Func{}
	for _, p := range progs {
		if strings.HasPrefix(p.Name, "bad_") || !p.IsGPU() {
			continue
		}
		ctx := 0
		if p.Kind == jit.ProbeMemCapture {
			ctx = jit.MemCtxSize
		}
		res, err := verifier.Verify(p, verifier.Options{CtxSize: ctx})
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		f, err := Compile(p, Options{Verified: res, Prefix: "join_" + p.Name})
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		funcs[p.Name] = f
	}
	return funcs
}

// TestJoinedPointersPTX assembles the join programs with ptxas: their
// accesses through joined pointers use generic addressing.
func TestJoinedPointersPTX(t *testing.T) {
	funcs := joinPrograms(t)
	if len(funcs) < 6 {
		t.Fatalf("%d join programs compiled, want 6", len(funcs))
	}
	if !needPtxas(t) {
		return
	}
	var all []*Func
	for _, f := range funcs {
		all = append(all, f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := Assemble(ctx, TestModule(all...), DefaultArch); err != nil {
		t.Fatal(err)
	}
}

// TestJoinedAtomic runs block_counter in the PTX emulator: its atomic add
// goes through a pointer into the block's shared memory (even lanes) or
// the stack (odd lanes), so it must not use the .shared space, and must
// not be a PTX atomic on .local memory (the emulator rejects both).
func TestJoinedAtomic(t *testing.T) {
	f := joinPrograms(t)["block_counter"]
	if f == nil {
		t.Fatal("no block_counter")
	}
	shared := strings.Contains(f.Body, "atom.shared") || strings.Contains(f.Body, "red.shared") ||
		strings.Contains(f.Body, "ld.shared") || strings.Contains(f.Body, "st.shared")
	if shared || !strings.Contains(f.Body, "isspacep.local") {
		t.Fatalf("the joined atomic is not generic with a .local guard:\n%s", f.Body)
	}
	e, err := newEmu(TestModule(f))
	if err != nil {
		t.Fatal(err)
	}
	res := e.alloc(8, false, "result")
	for _, tc := range []struct{ lane, want uint64 }{{0, 1}, {1, 1}, {0, 2}, {1, 1}, {0, 3}} {
		e.geom = map[string]uint64{"%laneid": tc.lane}
		if _, err := e.call(TestEntry(f), []uint64{0, 0, res.base}); err != nil {
			t.Fatalf("lane %d: %v", tc.lane, err)
		}
		if got := binary.LittleEndian.Uint64(res.data); got != tc.want {
			t.Errorf("lane %d: r0 = %d, want %d", tc.lane, got, tc.want)
		}
	}
	if got := binary.LittleEndian.Uint64(sharedBytes(t, e, "blk")); got != 3 {
		t.Errorf("blk[0] = %d after 3 even-lane runs, want 3", got)
	}
}
