package inject

import (
	"testing"

	"github.com/gpuprobe/gpuprobe/jit"
)

// TestSampleKernels patches each kernel of the samples the GPU check
// (cmd/gpuprobe-gpucheck) launches, alone, with the program sets it uses,
// and assembles the result: the symbols and program targets must agree.
func TestSampleKernels(t *testing.T) {
	tests := []struct {
		sample, kernel string
		progs          []*jit.Program
	}{
		{"vectoradd", "_Z10vectorAddNPKfS0_Pfi", kernelPhases(t)},
		{"vectoradd", "_Z11vectorAddGSPKfS0_Pfi", kernelPhases(t)},
		{"vectoradd", "_Z9vectorAddPKfS0_Pf", kernelPhases(t)},
		{"vectoradd", "_Z9vectorAddPKfS0_Pf", bpfObject(t, "threadhist")},
		{"vectoradd", "_Z9vectorAddPKfS0_Pf", bpfObject(t, "kernelretsnoop")},
		{"vectoradd", "_Z10vectorAddNPKfS0_Pfi", bpfObject(t, "memcount")},
		{"gemm", "_Z5sgemmPKfS0_Pfi", kernelPhases(t)},
		{"exits", "_ZN6sample9multiExitEPKiPii", kernelPhases(t)},
	}
	for _, tc := range tests {
		t.Run(tc.kernel+"/"+tc.progs[0].Name, func(t *testing.T) {
			src := samplePTX(t, tc.sample, "sm_90")
			out, rep, err := Inject(src, tc.progs, Options{Kernels: []string{tc.kernel}, Strict: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Kernels) != 1 || rep.Kernels[0].Name != tc.kernel {
				t.Fatalf("patched %+v, want %s only", rep.Kernels, tc.kernel)
			}
			ptxas(t, out, "sm_90")
		})
	}
}
