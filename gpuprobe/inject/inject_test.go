package inject

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/ptxmod"
	"github.com/gpuprobe/gpuprobe/jit"
)

// programSet is one set of programs the tests inject.
type programSet struct {
	name  string
	progs func(t *testing.T) []*jit.Program
	opts  Options
}

func programSets() []programSet {
	vec := "_Z9vectorAddPKfS0_Pf"
	return []programSet{
		{"kernel_phases", func(t *testing.T) []*jit.Program { return kernelPhases(t) }, Options{}},
		{"kernel_phases global launch id", func(t *testing.T) []*jit.Program { return kernelPhases(t) }, Options{LaunchID: LaunchIDGlobal}},
		{"kernel_phases called", func(t *testing.T) []*jit.Program { return kernelPhases(t) }, Options{NoInline: true}},
		{"empty entry+exit", func(t *testing.T) []*jit.Program {
			return []*jit.Program{emptyProbe(jit.ProbeEntry, "*"), emptyProbe(jit.ProbeExit, "*")}
		}, Options{}},
		{"memcount", func(t *testing.T) []*jit.Program { return bpfObject(t, "memcount") }, Options{}},
		{"memcount generic", func(t *testing.T) []*jit.Program { return bpfObject(t, "memcount") }, Options{Generic: true}},
		{"testdata programs on every kernel", func(t *testing.T) []*jit.Program {
			var all []*jit.Program
			for _, o := range []string{"kernelretsnoop", "threadhist", "launchlate", "allhelpers", "warpagg", "callfunc", "loop"} {
				for _, p := range bpfObject(t, o) {
					if p.IsGPU() {
						all = append(all, p)
					}
				}
			}
			return retarget(all, "*")
		}, Options{}},
		{"threadhist on vectorAdd only", func(t *testing.T) []*jit.Program { return bpfObject(t, "threadhist") }, Options{Kernels: []string{vec}}},
		{"kernel_phases, kernelretsnoop and memcount skipped without a launch id", func(t *testing.T) []*jit.Program {
			return append(append(kernelPhases(t), retarget(bpfObject(t, "kernelretsnoop"), "*")...), bpfObject(t, "memcount")...)
		}, Options{SkipUnidentified: true, Generic: true}},
	}
}

// TestInjectPtxas injects every program set into every sample (nvcc
// output for sm_80 and sm_90, and hand-written PTX) and assembles the result
// with ptxas for sm_90 and for the module's own target.
func TestInjectPtxas(t *testing.T) {
	type module struct {
		name string
		src  []byte
	}
	var modules []module
	for _, s := range []string{"vectoradd", "gemm", "exits"} {
		for _, arch := range []string{"sm_80", "sm_90"} {
			modules = append(modules, module{s + "." + arch, samplePTX(t, s, arch)})
		}
	}
	modules = append(modules, module{"exits.ptx", readTestdata(t, "exits.ptx")})
	for _, mod := range modules {
		for _, ps := range programSets() {
			t.Run(mod.name+"/"+ps.name, func(t *testing.T) {
				out, rep, err := Inject(mod.src, ps.progs(t), ps.opts)
				if errors.Is(err, ErrNoKernel) && len(ps.opts.Kernels) > 0 {
					return // the restricted kernel is not in this module
				}
				if err != nil {
					t.Fatal(err)
				}
				if len(rep.Kernels) == 0 {
					t.Fatal("no kernel patched")
				}
				if bytes.Equal(out, mod.src) {
					t.Fatal("module unchanged")
				}
				ptxas(t, out, "sm_90")
				if rep.Target != "sm_90" {
					ptxas(t, out, rep.Target)
				}
			})
		}
	}
}

// TestUntouchedIdentical checks that kernels no program targets, device
// functions and module-scope declarations keep their exact bytes.
func TestUntouchedIdentical(t *testing.T) {
	tests := []struct {
		name      string
		src       []byte
		progs     []*jit.Program
		opts      Options
		patched   []string
		untouched []string
	}{
		{"hand-written, one kernel", readTestdata(t, "exits.ptx"), []*jit.Program{emptyProbe(jit.ProbeExit, "exits")}, Options{},
			[]string{"exits"}, []string{"untouched", "twice"}},
		{"vectoradd by base name", samplePTX(t, "vectoradd", "sm_90"), kernelPhases(t), Options{Kernels: []string{"vectorAddN"}},
			[]string{"_Z10vectorAddNPKfS0_Pfi"}, []string{"vectorAddC", "_Z9vectorAddPKfS0_Pf"}},
		{"vectoradd by pattern", samplePTX(t, "vectoradd", "sm_90"), retarget(bpfObject(t, "memcount"), "vectorAdd?"), Options{},
			[]string{"vectorAddC", "_Z10vectorAddNPKfS0_Pfi"}, []string{"_Z9vectorAddPKfS0_Pf"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, rep, err := Inject(tc.src, tc.progs, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, k := range rep.Kernels {
				got = append(got, k.Name)
			}
			if strings.Join(got, ",") != strings.Join(tc.patched, ",") {
				t.Fatalf("patched kernels %v, want %v", got, tc.patched)
			}
			orig, patched := parse(t, tc.src), parse(t, out)
			for _, name := range tc.untouched {
				if a, b := funcText(t, orig, name), funcText(t, patched, name); a != b {
					t.Errorf("%s changed:\n%s\n---\n%s", name, a, b)
				}
			}
			for _, name := range tc.patched {
				if funcText(t, orig, name) == funcText(t, patched, name) {
					t.Errorf("%s not patched", name)
				}
			}
			// Every original byte outside the patched kernels' bodies and
			// the .version/.target lines is still there, in order.
			if !subsequence(out, outsideLines(tc.src, orig, tc.patched)) {
				t.Error("module bytes outside the patched kernels changed")
			}
			ptxas(t, out, "sm_90")
		})
	}
}

// outsideLines returns the lines of src outside the patched functions,
// without the .version and .target lines.
func outsideLines(src []byte, m *ptxmod.Module, patched []string) []string {
	skip := map[int]bool{}
	for _, name := range patched {
		f := m.Func(name)
		l1, _ := m.Position(f.Pos)
		l2, _ := m.Position(f.End)
		for l := l1; l <= l2; l++ {
			skip[l] = true
		}
	}
	var out []string
	for i, l := range strings.Split(string(src), "\n") {
		if skip[i+1] || strings.HasPrefix(l, ".version") || strings.HasPrefix(l, ".target") {
			continue
		}
		out = append(out, l)
	}
	return out
}

// subsequence reports whether the lines of want appear in out, in order.
func subsequence(out []byte, want []string) bool {
	lines := strings.Split(string(out), "\n")
	i := 0
	for _, l := range lines {
		if i < len(want) && l == want[i] {
			i++
		}
	}
	return i == len(want)
}
