//go:build cgo

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin/fatbintest"
	"github.com/gpuprobe/gpuprobe/gpuprobe/inject"
	"github.com/gpuprobe/gpuprobe/jit/ptx"
)

func TestParseBenchConfigs(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{in: "uninstrumented,empty,kernel_phases", want: "uninstrumented empty kernel_phases"},
		{in: "kernelretsnoop, threadhist", want: "uninstrumented kernelretsnoop threadhist"},
		{in: "uninstrumented,gpuhash,hostmaps", want: "uninstrumented gpuhash hostmaps"},
		{in: "", want: "uninstrumented"},
		{in: "empty,bogus", err: `unknown config "bogus"`},
		{in: "gpu_hash", err: `unknown config "gpu_hash"`},
		{in: "empty,uninstrumented", err: "must come first"},
	}
	for _, tt := range tests {
		got, err := parseBenchConfigs(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: error %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || strings.Join(got, " ") != tt.want {
			t.Errorf("%q: %v %v, want %s", tt.in, got, err, tt.want)
		}
	}
}

// TestBenchConfigsInject: every bench config's programs inject into the
// bench kernels (PTX from nvcc 11.8 here), the second injection is a cache
// hit with the same output, and ptxas accepts the result for sm_90. Needs
// nvcc, ptxas and clang.
func TestBenchConfigsInject(t *testing.T) {
	ptxas, err := exec.LookPath("ptxas")
	if err != nil {
		t.Fatalf("ptxas is needed: %v", err)
	}
	clang, err := exec.LookPath("clang")
	if err != nil {
		t.Fatalf("clang is needed: %v", err)
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "compat"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, o := range benchObjectList() {
		src := filepath.Join("..", "..", "testdata", "bpf", o+".c")
		if out, err := exec.Command(clang, "-target", "bpf", "-O2", "-g", "-Wall", "-Werror", "-mcpu=v3", "-I", "../../jit/include", "-c", src, "-o", filepath.Join(dir, o+".o")).CombinedOutput(); err != nil {
			t.Fatalf("clang %s: %v\n%s", src, err, out)
		}
	}
	read := func(name string) []byte {
		b, err := os.ReadFile(fatbintest.Build(t, fatbintest.Source(t, "inject/"+name+".cu"), name+".ptx", "-ptx", "-arch=sm_90"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	r := &runner{bpfDir: dir, modes: []ringMode{{"device", true}}, configs: benchConfigNames}
	kernels := map[string][]byte{"_Z10vectorAddNPKfS0_Pfi": read("vectoradd"), "_Z5sgemmPKfS0_Pfi": read("gemm")}
	for _, cf := range r.benchConfigs() {
		if cf.progs == nil {
			continue
		}
		for k, mod := range kernels {
			progs, err := cf.progs(k)
			if err != nil {
				t.Fatalf("%s: %v", cf.name, err)
			}
			inj, err := inject.NewInjector(16, 64<<20)
			if err != nil {
				t.Fatal(err)
			}
			opts := inject.Options{Kernels: []string{k}, Strict: true, PTX: ptx.Options{RingDevice: cf.device}}
			a, _, err := inj.Inject(mod, progs, opts)
			if err != nil {
				t.Fatalf("%s / %s: %v", cf.name, k, err)
			}
			b, rep, err := inj.Inject(mod, progs, opts)
			if err != nil || string(a) != string(b) || inj.Stats().Hits != 1 || len(rep.Kernels) != 1 || rep.Kernels[0].Name != k {
				t.Fatalf("%s / %s: cached injection differs or missed: %v %+v", cf.name, k, err, inj.Stats())
			}
			f := filepath.Join(dir, "p.ptx")
			os.WriteFile(f, a, 0o644)
			if out, err := exec.Command(ptxas, "-arch=sm_90", "-o", f+".cubin", f).CombinedOutput(); err != nil {
				t.Errorf("%s / %s: ptxas: %v\n%s", cf.name, k, err, out)
			}
		}
	}
}
