package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin/fatbintest"
)

// TestInspectMatchesCuobjdump builds samples with nvcc and checks that
// gpuprobe inspect lists every entry cuobjdump --list-elf --list-ptx
// lists, under the same name and number and in the same order, and the
// kernels of each PTX entry with their patchability.
func TestInspectMatchesCuobjdump(t *testing.T) {
	tk := fatbintest.Find(t)
	gen := fatbintest.Gencode(tk.Archs()...)
	tests := []struct {
		name, src, out string
		args           []string
		kernels        []string // kernel lines expected (for each PTX entry)
		noPTX          bool
	}{
		{"executable", "control.cu", "control", gen,
			[]string{"kernel _Z7collatzPiii: patchable (3 params, 1 exits, 2 global ld/st, 0 generic ld/st)",
				"kernel _Z9findFirstPKiiiPi: patchable (4 params, 2 exits, 2 global ld/st, 0 generic ld/st)",
				"kernel _Z7globalsPi: patchable (1 params, 1 exits, 2 global ld/st, 0 generic ld/st)"}, false},
		{"shared library, compressed", "gemm.cu", "libgemm.so", append(gen, "-shared", "-Xcompiler", "-fPIC", "-Xfatbin=-compress-all"),
			[]string{"kernel _Z10sgemmTiledPKfS0_Pfi: patchable", "kernel _Z5copy4PK6float4PS_i: patchable (3 params, 1 exits, 2 global ld/st"}, false},
		{"SASS only", "vectoradd.cu", "vectoradd-sass",
			[]string{"-gencode", fmt.Sprintf("arch=compute_%d,code=sm_%d", tk.Archs()[1], tk.Archs()[1])}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := fatbintest.Build(t, fatbintest.Source(t, tt.src), tt.out, tt.args...)
			rc, out, errOut := runCompileCmd("inspect", "-sass", file)
			if rc != 0 {
				t.Fatalf("exit %d: %s\n%s", rc, errOut, out)
			}
			lines := strings.Split(out, "\n")
			at := 0
			for _, l := range fatbintest.List(t, file, false) {
				want := fmt.Sprintf("%s file %4d: %s  [", l.Kind, l.N, l.Name)
				for at < len(lines) && !strings.HasPrefix(lines[at], want) {
					at++
				}
				if at == len(lines) {
					t.Fatalf("cuobjdump lists %q; inspect has no such line after the previous one:\n%s", want, out)
				}
			}
			ptxEntries := strings.Count(out, "PTX file ")
			for _, k := range tt.kernels {
				if n := strings.Count(out, k); n != ptxEntries {
					t.Errorf("%q appears %d times, want once per PTX entry (%d):\n%s", k, n, ptxEntries, out)
				}
			}
			if got := strings.Contains(out, ": no PTX:"); got != tt.noPTX {
				t.Errorf("no-PTX message present %v, want %v:\n%s", got, tt.noPTX, out)
			}
			if tt.noPTX && !strings.Contains(out, "kernel _Z9vectorAddPKfS0_Pfi: SASS only, not patchable") {
				t.Errorf("-sass did not list the SASS kernel:\n%s", out)
			}
		})
	}
}

func TestInspectErrors(t *testing.T) {
	tk := fatbintest.Find(t)
	fb := fatbintest.Build(t, fatbintest.Source(t, "vectoradd.cu"), "va.fatbin", append(fatbintest.Gencode(tk.Archs()[1]), "-fatbin")...)
	data, err := os.ReadFile(fb)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	truncated := filepath.Join(dir, "truncated.fatbin")
	os.WriteFile(truncated, data[:len(data)/2], 0o644)
	// Corrupt the first entry's LZ4 payload (the PTX entry is compressed)
	// so that the container parses but the entry does not inflate.
	corrupt := bytes.Clone(data)
	for i := len(corrupt) - 40; i < len(corrupt)-8; i++ {
		corrupt[i] = 0xff
	}
	badPayload := filepath.Join(dir, "badpayload.fatbin")
	os.WriteFile(badPayload, corrupt, 0o644)
	garbage := filepath.Join(dir, "garbage.bin")
	os.WriteFile(garbage, []byte("this is not GPU code\x00\x01"), 0o644)

	tests := []struct {
		name string
		args []string
		rc   int
		want string
	}{
		{"no file", []string{"inspect"}, 2, "usage: gpuprobe inspect"},
		{"missing file", []string{"inspect", filepath.Join(dir, "nope")}, 1, "no such file"},
		{"truncated", []string{"inspect", truncated}, 1, "fatbin: offset 0x8: container of"},
		{"bad payload", []string{"inspect", badPayload}, 1, "error: fatbin: offset"},
		{"not GPU code", []string{"inspect", garbage}, 1, "unrecognised code image"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc, out, errOut := runCompileCmd(tt.args...)
			if rc != tt.rc || !strings.Contains(out+errOut, tt.want) {
				t.Errorf("exit %d, output %q %q; want exit %d and %q", rc, out, errOut, tt.rc, tt.want)
			}
		})
	}
}

// TestInspectNoKernels: a host binary without GPU code (this test binary)
// is said to have no CUDA kernels, not SASS-only ones.
func TestInspectNoKernels(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	rc, out, errOut := runCompileCmd("inspect", self)
	if rc != 0 || !strings.Contains(out, self+": no CUDA kernels found") || strings.Contains(out, "SASS only") {
		t.Errorf("exit %d, output %q %q; want exit 0 and %q", rc, out, errOut, "no CUDA kernels found")
	}
}
