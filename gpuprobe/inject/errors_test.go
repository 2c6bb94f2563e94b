package inject

import (
	"errors"
	"strings"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
)

// TestErrors checks that bad input gets an error that says what and where.
func TestErrors(t *testing.T) {
	exits := readTestdata(t, "exits.ptx")
	old := []byte(strings.Replace(string(exits), ".target sm_80", ".target sm_52", 1))
	patched, _, err := Inject(exits, []*jit.Program{emptyProbe(jit.ProbeEntry, "exits")}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	bad := &jit.Program{Name: "bad", Section: "kprobe/exits", Kind: jit.ProbeEntry, Target: "exits",
		Insns: asm.Instructions{asm.Mov.Reg(asm.R0, asm.R3), asm.Return()}}
	host := &jit.Program{Name: "host", Section: "uprobe/libcuda.so:cuLaunchKernel", Kind: jit.ProbeUprobe, Target: "libcuda.so:cuLaunchKernel",
		Insns: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}}
	tests := []struct {
		name   string
		src    []byte
		progs  []*jit.Program
		opts   Options
		want   []string
		noKern bool
	}{
		{"kernel not found lists kernels", exits, []*jit.Program{emptyProbe(jit.ProbeEntry, "vectorAdd")}, Options{},
			[]string{`kernel "vectorAdd" (program empty_entry) not found`, "the module has kernels: exits, untouched"}, true},
		{"demangled names listed", samplePTX(t, "exits", "sm_90"), []*jit.Program{emptyProbe(jit.ProbeEntry, "nope")}, Options{},
			[]string{"_ZN6sample9multiExitEPKiPii (sample::multiExit)"}, true},
		{"strict: one program unmatched", exits, []*jit.Program{emptyProbe(jit.ProbeEntry, "exits"), emptyProbe(jit.ProbeExit, "gone")}, Options{Strict: true},
			[]string{`"gone" (program empty_exit)`}, true},
		{"restricted away", exits, []*jit.Program{emptyProbe(jit.ProbeEntry, "*")}, Options{Kernels: []string{"other"}},
			[]string{`kernel "*" (program empty_entry) not found among the kernels selected by other`}, true},
		{"target too old", old, []*jit.Program{emptyProbe(jit.ProbeEntry, "exits")}, Options{},
			[]string{"module targets sm_52; the probes need sm_70 or newer"}, false},
		{"raise without arch", old, []*jit.Program{emptyProbe(jit.ProbeEntry, "exits")}, Options{RaiseTarget: true},
			[]string{"set RaiseTarget and Arch"}, false},
		{"patched twice", patched, []*jit.Program{emptyProbe(jit.ProbeEntry, "exits")}, Options{},
			[]string{"module already has a symbol gpuprobe_empty_entry", "patched already"}, false},
		{"verifier rejects", exits, []*jit.Program{bad}, Options{},
			[]string{"program bad: verifier:", "insn 0"}, false},
		{"host program", exits, []*jit.Program{host}, Options{},
			[]string{"program host", "uprobe program, not a GPU probe"}, false},
		{"bad pattern", exits, []*jit.Program{emptyProbe(jit.ProbeEntry, "[x")}, Options{},
			[]string{`target "[x"`}, false},
		{"bad kernels option", exits, []*jit.Program{emptyProbe(jit.ProbeEntry, "exits")}, Options{Kernels: []string{"[x"}},
			[]string{`Options.Kernels: pattern "[x"`}, false},
		{"not PTX", []byte("\x7fELF\x02\x01"), []*jit.Program{emptyProbe(jit.ProbeEntry, "exits")}, Options{},
			[]string{"inject: parse module: ptx: 1:1"}, false},
		{"32-bit", []byte(strings.Replace(string(exits), ".address_size 64", ".address_size 32", 1)), []*jit.Program{emptyProbe(jit.ProbeEntry, "exits")}, Options{},
			[]string{".address_size 32; only 64-bit"}, false},
		{"nil program", exits, []*jit.Program{nil}, Options{}, []string{"program 0 is nil"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Inject(tc.src, tc.progs, tc.opts)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if errors.Is(err, ErrNoKernel) != tc.noKern {
				t.Errorf("errors.Is(ErrNoKernel) = %v, want %v", !tc.noKern, tc.noKern)
			}
		})
	}
}

// TestRaiseTarget checks .target and .version reconciliation.
func TestRaiseTarget(t *testing.T) {
	exits := string(readTestdata(t, "exits.ptx")) // .version 7.0, .target sm_80
	tests := []struct {
		name, src     string
		opts          Options
		target, ver   string
		tRaise, vRais bool
	}{
		{"keep sm_80, raise 7.0", exits, Options{}, "sm_80", "7.8", false, true},
		{"keep newer version", strings.Replace(exits, ".version 7.0", ".version 8.0", 1), Options{}, "sm_80", "8.0", false, false},
		{"raise sm_52 to the device", strings.Replace(exits, ".target sm_80", ".target sm_52", 1), Options{Arch: "sm_90", RaiseTarget: true}, "sm_90", "7.8", true, true},
		{"arch suffix", strings.Replace(exits, ".target sm_80", ".target sm_90a", 1), Options{}, "sm_90a", "7.8", false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, rep, err := Inject([]byte(tc.src), []*jit.Program{emptyProbe(jit.ProbeEntry, "exits")}, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			m := parse(t, out)
			if rep.Target != tc.target || m.Target[0] != tc.target || rep.TargetRaised != tc.tRaise {
				t.Errorf("target %s (module %v, raised %v), want %s (raised %v)", rep.Target, m.Target, rep.TargetRaised, tc.target, tc.tRaise)
			}
			if rep.Version != tc.ver || rep.VersionRaised != tc.vRais {
				t.Errorf("version %s (raised %v), want %s (%v)", rep.Version, rep.VersionRaised, tc.ver, tc.vRais)
			}
			if tc.ver == "7.8" && tc.target != "sm_90a" { // CUDA 11.8: PTX 7.8, no sm_90a
				ptxas(t, out, tc.target)
			}
		})
	}
}
