package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/internal/bpftest"
	"github.com/gpuprobe/gpuprobe/jit/ptx"
)

// buildTestObject is bpftest.Object.
func buildTestObject(t *testing.T, rel string) string { t.Helper(); return bpftest.Object(t, rel) }

func runCompileCmd(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	rc := run(args, &out, &errb)
	return rc, out.String(), errb.String()
}

func TestCompile(t *testing.T) {
	tests := []struct {
		name     string
		object   string
		flags    []string
		rc       int
		stdout   []string // substrings of stdout
		stderr   []string // substrings of stderr
		absent   []string // must not be in stdout
		assemble bool     // stdout must pass ptxas
	}{
		{
			name: "GPU and host halves", object: "launchlate", rc: 0,
			stdout: []string{
				"// program launch_gpu: section \"kprobe/vectorAdd\", entry probe of kernel vectorAdd",
				"verifier: accepted (63 instructions, 1 function, 1 loop",
				".func (.param .b64 __ret) gpuprobe_launch_gpu(",
				"// program launch_host: section \"uprobe/libcudart.so:cudaLaunchKernel\", uprobe on libcudart.so:cudaLaunchKernel",
				"host program: loaded into Linux",
			},
			absent:   []string{"gpuprobe_launch_host"},
			assemble: true,
		},
		{
			name: "bpf-to-bpf call", object: "callfunc", rc: 0,
			stdout:   []string{"2 functions", "call depth 2", ".version 7.8", ".target sm_90"},
			assemble: true,
		},
		{
			name: "memory probe, other arch", object: "memcount", flags: []string{"-arch", "sm_80"}, rc: 0,
			stdout:   []string{"memory-access probe of every kernel", ".target sm_80"},
			assemble: true,
		},
		{
			name: "test entries", object: "warpagg", flags: []string{"-entry"}, rc: 0,
			stdout:   []string{"test entry gpuprobe_warpagg_test", ".entry gpuprobe_warpagg_test("},
			assemble: true,
		},
		{
			name: "selected program", object: "launchlate", flags: []string{"-prog", "launch_host"}, rc: 0,
			stdout: []string{"program launch_host"},
			absent: []string{"program launch_gpu", ".func"},
		},
		{
			name: "rejected program", object: "bad/unchecked", rc: 1,
			stdout: []string{"verifier: REJECTED: insn ", `"*v += 1;"`, "null-check", "program host_side"},
			stderr: []string{"unchecked.o: program unchecked rejected: insn "},
			absent: []string{".func"},
		},
		{
			name: "unknown program", object: "launchlate", flags: []string{"-prog", "nope"}, rc: 2,
			stderr: []string{`-prog: no program "nope" (the object has launch_gpu, launch_host)`},
		},
		{
			name: "unsupported section", object: "bad/badsection", rc: 1,
			stderr: []string{"badsection.o", `unsupported section "xdp"`},
		},
		{
			name: "bad arch", object: "threadhist", flags: []string{"-arch", "sm_60"}, rc: 1,
			stderr: []string{"sm_70 or newer"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := buildTestObject(t, tt.object)
			args := append(append([]string{"compile"}, tt.flags...), obj)
			rc, stdout, stderr := runCompileCmd(args...)
			if rc != tt.rc {
				t.Errorf("exit status %d, want %d\nstderr: %s", rc, tt.rc, stderr)
			}
			for _, w := range tt.stdout {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout)
				}
			}
			for _, w := range tt.stderr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			for _, w := range tt.absent {
				if strings.Contains(stdout, w) {
					t.Errorf("stdout has %q", w)
				}
			}
			if tt.assemble {
				arch := ptx.DefaultArch
				for i, f := range tt.flags {
					if f == "-arch" {
						arch = tt.flags[i+1]
					}
				}
				assembleOutput(t, stdout, arch)
			}
		})
	}
}

// assembleOutput runs ptxas on the output; a missing ptxas fails the test (CI
// installs it with nvidia-cuda-toolkit).
func assembleOutput(t *testing.T, module, arch string) {
	t.Helper()
	if _, err := ptx.PtxasPath(); err != nil {
		t.Fatalf("ptxas is needed to check the output: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := ptx.Assemble(ctx, module, arch); err != nil {
		t.Errorf("ptxas rejects the output: %v", err)
	}
}

func TestCompileUsage(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		rc     int
		stderr string
	}{
		{"no file", []string{"compile"}, 2, "usage: gpuprobe compile"},
		{"two files", []string{"compile", "a.o", "b.o"}, 2, "usage: gpuprobe compile"},
		{"bad flag", []string{"compile", "-x", "a.o"}, 2, "flag provided but not defined: -x"},
		{"missing file", []string{"compile", "/nonexistent/p.o"}, 1, "/nonexistent/p.o"},
		{"not an object", []string{"compile", writeTempFile(t, "junk.o", "junk")}, 1, "parse eBPF object"},
		{"unsupported map type", []string{"compile", badObject(t, "badmaptype")}, 1, `map "odd" has type 1599, not a map type`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc, _, stderr := runCompileCmd(tt.args...)
			if rc != tt.rc || !strings.Contains(stderr, tt.stderr) {
				t.Errorf("got %d %q, want %d and %q", rc, stderr, tt.rc, tt.stderr)
			}
		})
	}
}

func writeTempFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCompileAcceptsEveryObject: gpuprobe compile accepts every object
// of testdata/bpf and of the compatibility suite (our programs in
// bpftime's idioms, its map types 1501..1513 and 1527 among them), and
// refuses bpftime's kprobe/__directly_run by decision, saying why.
func TestCompileAcceptsEveryObject(t *testing.T) {
	for _, dir := range []string{"", "compat"} {
		srcs, err := filepath.Glob(filepath.Join("..", "..", "testdata", "bpf", dir, "*.c"))
		if err != nil || len(srcs) == 0 {
			t.Fatalf("no sources in testdata/bpf/%s: %v", dir, err)
		}
		for _, src := range srcs {
			name := strings.TrimSuffix(filepath.Base(src), ".c")
			t.Run(filepath.Join(dir, name), func(t *testing.T) {
				rc, _, stderr := runCompileCmd("compile", buildObject(t, dir, name))
				if rc != 0 {
					t.Errorf("rc %d: %s", rc, stderr)
				}
			})
		}
	}
	rc, _, stderr := runCompileCmd("compile", badObject(t, "directrun"))
	if rc != 1 || !strings.Contains(stderr, "kernel of its own") {
		t.Errorf("directrun: rc %d %q, want 1 and the reason", rc, stderr)
	}
}

// badObject compiles testdata/bpf/bad/<name>.c with clang.
func badObject(t *testing.T, name string) string {
	t.Helper()
	return buildObject(t, "bad", name)
}

// buildObject compiles testdata/bpf/<dir>/<name>.c with clang.
func buildObject(t *testing.T, dir, name string) string {
	t.Helper()
	clang, err := exec.LookPath("clang")
	if err != nil {
		t.Fatalf("clang is needed to build testdata/bpf/%s/%s.c: %v", dir, name, err)
	}
	out := filepath.Join(t.TempDir(), name+".o")
	src := filepath.Join("..", "..", "testdata", "bpf", dir, name+".c")
	if b, err := exec.Command(clang, "-target", "bpf", "-O2", "-g", "-mcpu=v3", "-I", "../../jit/include", "-c", src, "-o", out).CombinedOutput(); err != nil {
		t.Fatalf("clang %s.c: %v\n%s", name, err, b)
	}
	return out
}
