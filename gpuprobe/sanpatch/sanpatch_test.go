package sanpatch

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/probes"
	"github.com/gpuprobe/gpuprobe/jit"
)

// bpfObject loads testdata/bpf/NAME.o.
func bpfObject(t *testing.T, name string) []*jit.Program {
	t.Helper()
	progs, err := jit.LoadELF(filepath.Join("..", "..", "testdata", "bpf", name+".o"))
	if err != nil {
		t.Fatal(err)
	}
	return progs
}

// TestBuildAssembles builds the patch module of user programs of each kind
// and assembles it as the Sanitizer API needs it (ptxas
// --compile-as-tools-patch, 24 registers): every wrapper is in the cubin,
// and every global's magic stands in it once, for the loader to bind. With
// Phases, kernel_phases' functions are in it too, both block wrappers are,
// and each of kernel_phases' three magics stands in it once.
func TestBuildAssembles(t *testing.T) {
	for _, tc := range []struct {
		obj              string
		phases           bool
		enter, exit, mem bool
	}{
		{"threadhist", false, false, true, false},
		{"kernelretsnoop", false, false, true, false},
		{"memcount", false, false, false, true},
		{"launchlate", false, true, false, false},
		{"threadhist", true, true, true, false},
		{"memcount", true, true, true, true},
	} {
		name := tc.obj
		if tc.phases {
			name += "+phases"
		}
		t.Run(name, func(t *testing.T) {
			m, err := Build(bpfObject(t, tc.obj), Options{Phases: tc.phases})
			if err != nil {
				t.Fatal(err)
			}
			if m.Enter != tc.enter || m.Exit != tc.exit || m.Mem != tc.mem || m.Phases != tc.phases {
				t.Fatalf("wrappers enter %v exit %v mem %v phases %v, want %v %v %v %v",
					m.Enter, m.Exit, m.Mem, m.Phases, tc.enter, tc.exit, tc.mem, tc.phases)
			}
			if len(m.Globals) == 0 {
				t.Fatal("no globals: every program here reads a map")
			}
			img := assemble(t, m.PTX)
			for _, f := range []struct {
				name string
				want bool
			}{{EnterFunc, tc.enter}, {ExitFunc, tc.exit}, {MemFunc, tc.mem},
				{PhasesEnterFunc, tc.phases}, {PhasesExitFunc, tc.phases}} {
				if got := bytes.Contains(img, []byte(f.name+"\x00")); got != f.want {
					t.Errorf("%s in the cubin: %v, want %v", f.name, got, f.want)
				}
			}
			for i, g := range m.Globals {
				if g.Magic != MagicBase+uint64(i) {
					t.Errorf("global %d (%s): magic %#x, want %#x", i, g.Name, g.Magic, MagicBase+uint64(i))
				}
				if n := magicCount(img, g.Magic); n != 1 {
					t.Errorf("global %s (%v of %s): its magic %#x stands %d times in the cubin, want once", g.Name, g.Kind, g.Program, g.Magic, n)
				}
			}
			for i, name := range PhasesGlobals {
				want := 0
				if tc.phases {
					want = 1
				}
				if n := magicCount(img, PhasesMagicBase+uint64(i)); n != want {
					t.Errorf("kernel_phases global %s: its magic stands %d times in the cubin, want %d", name, n, want)
				}
			}
		})
	}
}

// assemble compiles patch module PTX as the node does and returns the cubin.
func assemble(t *testing.T, text string) []byte {
	t.Helper()
	ptxas, err := exec.LookPath("ptxas")
	if err != nil {
		t.Fatalf("ptxas is needed to assemble patch modules (Debian's nvidia-cuda-toolkit): %v", err)
	}
	dir := t.TempDir()
	src, cubin := filepath.Join(dir, "patch.ptx"), filepath.Join(dir, "patch.cubin")
	if err := os.WriteFile(src, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(ptxas, "-arch=sm_90", "--compile-as-tools-patch", "-maxrregcount=24", src, "-o", cubin).CombinedOutput()
	if err != nil {
		t.Fatalf("ptxas: %v\n%s\n%s", err, out, text)
	}
	img, err := os.ReadFile(cubin)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// magicCount counts the little-endian 8-byte magic in img.
func magicCount(img []byte, magic uint64) int {
	var w [8]byte
	binary.LittleEndian.PutUint64(w[:], magic)
	return bytes.Count(img, w[:])
}

// TestBuildRefuses: what a patch function cannot run is an error naming
// the program and the reason.
func TestBuildRefuses(t *testing.T) {
	kp, err := probes.Load(probes.KernelPhases)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		progs []*jit.Program
		want  string
	}{
		{"per-block map", kp, `per-block map "kp_block"`},
		{"nothing to run", nil, "no entry, exit or memcapture program"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build(tc.progs, Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Build: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestPhasesRenamed: a Phases module keeps none of sass_phases.cu's gp_sp_
// names (they would clash with nothing today, but a missed one would not
// be bound by the loader), declares kernel_phases' globals with the
// built-in image's magics, calls its functions first from both block
// wrappers, and has phases.ptx's .version.
func TestPhasesRenamed(t *testing.T) {
	m, err := Build(bpfObject(t, "threadhist"), Options{Phases: true})
	if err != nil {
		t.Fatal(err)
	}
	if i := strings.Index(m.PTX, phasesSrcPrefix); i >= 0 {
		t.Fatalf("%q left in the module at offset %d: %q", phasesSrcPrefix, i, m.PTX[i:min(len(m.PTX), i+40)])
	}
	if !strings.Contains(phasesPTX, phasesSrcPrefix+"enter(") || !strings.Contains(phasesPTX, phasesSrcPrefix+"exit(") {
		t.Fatalf("phases.ptx defines no %senter/%sexit: the rename has nothing to rename", phasesSrcPrefix, phasesSrcPrefix)
	}
	for i, g := range PhasesGlobals {
		decl := fmt.Sprintf(".global .align 8 .u64 %s = %d;", g, PhasesMagicBase+uint64(i))
		if n := strings.Count(m.PTX, decl); n != 1 {
			t.Errorf("%q stands %d times in the module, want once", decl, n)
		}
	}
	for _, f := range []string{PhasesEnterFunc, PhasesExitFunc} {
		if n := strings.Count(m.PTX, ".visible .func  (.param .b32 func_retval0) "+f+"("); n != 1 {
			t.Errorf("%s defined %d times, want once", f, n)
		}
		if n := strings.Count(m.PTX, "call (__kr), "+f+", "); n != 1 {
			t.Errorf("%s called %d times, want once", f, n)
		}
	}
	v, _, err := phases()
	if err != nil {
		t.Fatal(err)
	}
	if want := ".version " + v + "\n"; !strings.HasPrefix(m.PTX, want) {
		t.Errorf("module starts %q, want %q", m.PTX[:min(len(m.PTX), 20)], want)
	}
}

// TestPhasesOnly: with no user programs a Phases module is kernel_phases
// alone (for a device the shim's built-in image has no cubin for): both
// block wrappers, no globals of its own, no targets; it assembles with
// each phase magic once. Without Phases, no programs is an error.
func TestPhasesOnly(t *testing.T) {
	if _, err := Build(nil, Options{}); err == nil || !strings.Contains(err.Error(), "no entry, exit or memcapture program") {
		t.Fatalf("Build without Phases: %v, want an error", err)
	}
	m, err := Build(nil, Options{Phases: true})
	if err != nil {
		t.Fatal(err)
	}
	if !m.Enter || !m.Exit || m.Mem || len(m.Globals) != 0 || len(m.Targets) != 0 {
		t.Fatalf("module enter %v exit %v mem %v, %d globals, %d targets: want both block wrappers only", m.Enter, m.Exit, m.Mem, len(m.Globals), len(m.Targets))
	}
	img := assemble(t, m.PTX)
	for i := range PhasesGlobals {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], PhasesMagicBase+uint64(i))
		if n := bytes.Count(img, w[:]); n != 1 {
			t.Errorf("phase magic %d stands %d times in the cubin, want once", i, n)
		}
	}
}

// TestMagicBase pins the magic that agentwire.APISASS documents.
func TestMagicBase(t *testing.T) {
	const want = 0x4750534700000000
	if MagicBase != want || agentwire.SASSMagicBase != want {
		t.Fatalf("MagicBase %#x, agentwire.SASSMagicBase %#x, want 0x4750534700000000", MagicBase, agentwire.SASSMagicBase)
	}
}

// TestMaxVersion compares PTX ISA versions numerically.
func TestMaxVersion(t *testing.T) {
	for _, tc := range []struct{ a, b, want string }{
		{"7.8", "7.8", "7.8"}, {"7.8", "8.0", "8.0"}, {"7.10", "7.8", "7.10"}, {"8.1", "7.9", "8.1"},
	} {
		if got, err := maxVersion(tc.a, tc.b); err != nil || got != tc.want {
			t.Errorf("maxVersion(%s, %s) = %s, %v; want %s", tc.a, tc.b, got, err, tc.want)
		}
	}
	if _, err := maxVersion("7", "7.8"); err == nil {
		t.Error("maxVersion(7, 7.8): no error")
	}
}

// TestTargets: each program gets the next bit, its target is its
// section's kernel ("*" for a memcapture program), and its call in the
// wrapper is skipped unless the userdata has that bit; the phases and the
// programs get the launch id without the bits.
func TestTargets(t *testing.T) {
	progs := append(bpfObject(t, "threadhist"), bpfObject(t, "memcount")...)
	m, err := Build(progs, Options{Phases: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"_Z9vectorAddPKfS0_Pf", "*"}
	if !reflect.DeepEqual(m.Targets, want) {
		t.Fatalf("targets %q, want %q", m.Targets, want)
	}
	for bit := range want {
		mask := fmt.Sprintf("and.b64 %%bit, %%ud, %d;", uint64(1)<<(agentwire.SASSTargetShift+bit))
		if strings.Count(m.PTX, mask) != 1 || !strings.Contains(m.PTX, fmt.Sprintf("$skip%d:", bit)) {
			t.Errorf("program bit %d: its test %q or label is not in the module once", bit, mask)
		}
	}
	if n := strings.Count(m.PTX, fmt.Sprintf("and.b64 %%id, %%ud, %d;", uint64(1)<<agentwire.SASSTargetShift-1)); n != 3 {
		t.Errorf("%d wrappers strip the program bits from the launch id, want 3 (enter, exit, mem)", n)
	}
	many := make([]*jit.Program, agentwire.SASSMaxPrograms+1)
	for i := range many {
		many[i] = progs[0]
	}
	if _, err := Build(many, Options{}); err == nil || !strings.Contains(err.Error(), "at most 15") {
		t.Errorf("%d programs: %v, want an error naming the limit", len(many), err)
	}
}
