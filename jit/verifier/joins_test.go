package verifier_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/interp"
	"github.com/gpuprobe/gpuprobe/jit/verifier"
)

// joinsSrc holds the pointer-join programs, shared with jit/ptx's tests.
const joinsSrc = "../testdata/joins.c"

// joinPrograms compiles joins.c with clang as bpf.mk does and returns its
// programs by name.
func joinPrograms(t *testing.T) map[string]*jit.Program {
	t.Helper()
	clang, err := exec.LookPath("clang")
	if err != nil {
		t.Fatal("clang not installed: the join tests need clang -target bpf")
	}
	obj := filepath.Join(t.TempDir(), "joins.o")
	cmd := exec.Command(clang, "-target", "bpf", "-O2", "-g", "-Wall", "-Werror", "-mcpu=v3", "-I", "../include", "-c", joinsSrc, "-o", obj)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("clang: %v\n%s", err, out)
	}
	progs, err := jit.LoadELF(obj)
	if err != nil {
		t.Fatal(err)
	}
	byName := make(map[string]*jit.Program, len(progs))
	for _, p := range progs {
		byName[p.Name] = p
	}
	return byName
}

// markerLine returns the line of joins.c that ends with the comment
// "// <marker>".
func markerLine(t *testing.T, marker string) int {
	t.Helper()
	src, err := os.ReadFile(joinsSrc)
	if err != nil {
		t.Fatal(err)
	}
	for n, line := range strings.Split(string(src), "\n") {
		if strings.HasSuffix(line, "// "+marker) {
			return n + 1
		}
	}
	t.Fatalf("no line of %s ends with // %s", joinsSrc, marker)
	return 0
}

// TestPointerJoins verifies programs whose registers point into different
// regions on different paths: accepted when every path is safe, rejected
// naming the instruction and its source line otherwise.
func TestPointerJoins(t *testing.T) {
	progs := joinPrograms(t)
	tests := []struct {
		prog   string
		reason string // "" = accepted
	}{
		{"idiom", ""},
		{"counter", ""},
		{"two_maps", ""},
		{"ctx_or_value", ""},
		{"loop_join", ""},
		{"block_counter", ""},
		{"stack_or_null", ""},
		{"bad_scalar", "r0 is a number (scalar), not a pointer"},
		{"bad_scalar_arg", "value argument r3 must point to memory (stack, map value or context), got scalar"},
		{"bad_bounds", "map value access at offset 8 size 8 exceeds value size 8"},
		{"bad_stack_bounds", "stack access at offset 8 size 8 is outside the 512-byte stack"},
		{"bad_null", "may be NULL here"},
		{"bad_stack_null", "is a number (scalar 0), not a pointer"},
	}
	for _, tc := range tests {
		t.Run(tc.prog, func(t *testing.T) {
			p := progs[tc.prog]
			if p == nil {
				t.Fatalf("no program %s in %s", tc.prog, joinsSrc)
			}
			res, err := verifier.Verify(p, verifier.Options{CtxSize: ctxSize(p.Kind)})
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				t.Logf("%d insns: %d steps, %d states", len(p.Insns), res.Steps, res.States)
				return
			}
			checkRejection(t, err, tc.reason, markerLine(t, tc.prog))
		})
	}
}

// checkRejection checks that err is an *Error with reason, at an
// instruction whose BTF line is line of joins.c.
func checkRejection(t *testing.T, err error, reason string, line int) {
	t.Helper()
	var ve *verifier.Error
	if !errors.As(err, &ve) {
		t.Fatalf("got %v, want a rejection: %s", err, reason)
	}
	at := fmt.Sprintf("insn %d (joins.c:%d ", ve.Index, line)
	if ve.Index < 0 || !strings.HasPrefix(err.Error(), at) || !strings.Contains(ve.Reason, reason) {
		t.Fatalf("got %q\nwant %q... with %q", err, at, reason)
	}
	t.Log(err)
}

// TestPointerJoinsRun runs the accepted counters in the reference
// interpreter: the joined pointer reaches the map value or the stack.
func TestPointerJoinsRun(t *testing.T) {
	progs := joinPrograms(t)
	maps := interp.NewMaps()
	for n := uint64(1); n <= 3; n++ {
		if got := run(t, progs["counter"], &interp.Env{Maps: maps}); got != n {
			t.Errorf("counter run %d: r0 = %d, want %d", n, got, n)
		}
		run(t, progs["idiom"], &interp.Env{Maps: maps})
	}
	wantHash(t, maps, 1, 3) // counter: one per run
	wantHash(t, maps, 0, 1) // idiom: 1 stored, then stored over itself
	for n := uint64(1); n <= 3; n++ {
		if got := run(t, progs["block_counter"], &interp.Env{Maps: maps}); got != n {
			t.Errorf("block_counter lane 0, run %d: r0 = %d, want %d", n, got, n)
		}
		if got := run(t, progs["block_counter"], &interp.Env{Maps: maps, LaneID: 1}); got != 1 {
			t.Errorf("block_counter lane 1 (stack), run %d: r0 = %d, want 1", n, got)
		}
	}
}

func run(t *testing.T, p *jit.Program, env *interp.Env) uint64 {
	t.Helper()
	r0, err := interp.Run(p, nil, env)
	if err != nil {
		t.Fatalf("%s: %v", p.Name, err)
	}
	return r0
}

// wantHash checks the u64 stored under key in the hash map hits.
func wantHash(t *testing.T, maps *interp.Maps, key uint32, want uint64) {
	t.Helper()
	v, ok, err := maps.HashValue("hits", binary.LittleEndian.AppendUint32(nil, key))
	if err != nil || !ok || binary.LittleEndian.Uint64(v) != want {
		t.Errorf("hits[%d] = %x (found %v, %v), want %d", key, v, ok, err, want)
	}
}
