package sanpatch

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

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
// and every global's magic stands in it once, for the loader to bind.
func TestBuildAssembles(t *testing.T) {
	ptxas, err := exec.LookPath("ptxas")
	if err != nil {
		t.Fatalf("ptxas is needed to assemble patch modules (Debian's nvidia-cuda-toolkit): %v", err)
	}
	for _, tc := range []struct {
		obj              string
		enter, exit, mem bool
	}{
		{"threadhist", false, true, false},
		{"kernelretsnoop", false, true, false},
		{"memcount", false, false, true},
		{"launchlate", true, false, false},
	} {
		t.Run(tc.obj, func(t *testing.T) {
			m, err := Build(bpfObject(t, tc.obj), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if m.Enter != tc.enter || m.Exit != tc.exit || m.Mem != tc.mem {
				t.Fatalf("wrappers enter %v exit %v mem %v, want %v %v %v", m.Enter, m.Exit, m.Mem, tc.enter, tc.exit, tc.mem)
			}
			if len(m.Globals) == 0 {
				t.Fatal("no globals: every program here reads a map")
			}
			dir := t.TempDir()
			src, cubin := filepath.Join(dir, "patch.ptx"), filepath.Join(dir, "patch.cubin")
			if err := os.WriteFile(src, []byte(m.PTX), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(ptxas, "-arch=sm_90", "--compile-as-tools-patch", "-maxrregcount=24", src, "-o", cubin).CombinedOutput()
			if err != nil {
				t.Fatalf("ptxas: %v\n%s\n%s", err, out, m.PTX)
			}
			img, err := os.ReadFile(cubin)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range []struct {
				name string
				want bool
			}{{EnterFunc, tc.enter}, {ExitFunc, tc.exit}, {MemFunc, tc.mem}} {
				if got := bytes.Contains(img, []byte(f.name+"\x00")); got != f.want {
					t.Errorf("%s in the cubin: %v, want %v", f.name, got, f.want)
				}
			}
			for _, g := range m.Globals {
				var w [8]byte
				binary.LittleEndian.PutUint64(w[:], g.Magic)
				if n := bytes.Count(img, w[:]); n != 1 {
					t.Errorf("global %s (%v of %s): its magic %#x stands %d times in the cubin, want once", g.Name, g.Kind, g.Program, g.Magic, n)
				}
			}
		})
	}
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
