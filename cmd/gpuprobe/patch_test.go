package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin/fatbintest"
	"github.com/gpuprobe/gpuprobe/jit/ptx"
)

func TestPatch(t *testing.T) {
	src := fatbintest.Source(t, filepath.Join("inject", "vectoradd.cu"))
	ptxFile := fatbintest.Build(t, src, "vectoradd.ptx", "-ptx", "-O3", "-arch", "sm_90")
	old := fatbintest.Build(t, src, "vectoradd52.ptx", "-ptx", "-O3", "-arch", "sm_52")
	exe := fatbintest.Build(t, src, "vectoradd.o", append([]string{"-c"}, fatbintest.Gencode(90)...)...)
	sass := fatbintest.Build(t, src, "vectoradd_sass.o", "-c", "-gencode", "arch=compute_90,code=sm_90")
	threadhist := filepath.Join("..", "..", "testdata", "bpf", "threadhist.o")
	memcount := filepath.Join("..", "..", "testdata", "bpf", "memcount.o")
	tests := []struct {
		name   string
		args   []string
		rc     int
		stdout []string
		stderr string
		ptxas  bool
	}{
		{"kernel_phases by default", []string{ptxFile}, 0, []string{
			"kernel _Z10vectorAddNPKfS0_Pfi: entry [kernel_phases_entry] exit [kernel_phases_exit] (1 sites)",
			"kernel vectorAddC:", "launch id: parameter 4 at offset 32",
			"global gpuprobe_kernel_phases_exit_map_kp_exec (map kp_exec) of kernel_phases_exit",
		}, "", true},
		{"one kernel, programs from objects", []string{"-prog", threadhist + "," + memcount, "-kernel", "vectorAdd", ptxFile}, 0, []string{
			"kernel _Z9vectorAddPKfS0_Pf: entry [] exit [threadhist] (1 sites) memcapture [memcount] (3 sites)",
		}, "", true},
		{"global launch id", []string{"-launch-id", "global", "-kernel", "vectorAddGS", ptxFile}, 0, []string{
			"global gpuprobe_kernel_phases_exit_launch_id (launch_id)",
		}, "", true},
		{"fatbin in an object", []string{exe}, 0, []string{"PTX entry 0 (sm_90)"}, "", false},
		{"old target raised", []string{"-arch", "sm_90", "-raise", old}, 0, []string{".target sm_90 (raised)"}, "", true},
		{"old target refused", []string{old}, 1, nil, "module targets sm_52", false},
		{"SASS only", []string{sass}, 1, nil, "no PTX (SASS only)", false},
		{"kernel not found", []string{"-kernel", "gemm", ptxFile}, 1, []string{"not patched", "the module has kernels: vectorAddC, _Z9vectorAddPKfS0_Pf (vectorAdd)"}, "no module has a kernel", false},
		{"unknown probe", []string{"-probe", "nope", ptxFile}, 2, nil, `no built-in probe set "nope"`, false},
		{"launchlate: its host programs are left out", []string{"-prog", filepath.Join("..", "..", "testdata", "bpf", "launchlate.o"), ptxFile}, 0, nil, "", false},
		{"bad launch mode", []string{"-launch-id", "x", ptxFile}, 2, nil, `-launch-id "x"`, false},
		{"no file", nil, 2, nil, "usage: gpuprobe patch", false},
		{"missing file", []string{"/nonexistent.ptx"}, 1, nil, "nonexistent", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rc, out, errs := runCompileCmd(append([]string{"patch"}, tc.args...)...)
			if rc != tc.rc {
				t.Fatalf("rc %d, want %d\nstderr: %s", rc, tc.rc, errs)
			}
			for _, w := range tc.stdout {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%.2000s", w, out)
				}
			}
			if !strings.Contains(errs, tc.stderr) {
				t.Errorf("stderr %q lacks %q", errs, tc.stderr)
			}
			if tc.ptxas {
				if _, err := ptx.Assemble(context.Background(), out, "sm_90"); err != nil {
					t.Errorf("ptxas: %v", err)
				}
			}
		})
	}
}
