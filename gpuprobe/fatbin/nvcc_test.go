package fatbin_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin"
	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin/fatbintest"
)

// sample is a file built by nvcc from testdata/cuda for the comparison
// with cuobjdump.
type sample struct {
	name string   // test name
	src  string   // in testdata/cuda
	out  string   // output file name
	args []string // nvcc flags
	all  bool     // list with cuobjdump -all (relocatable objects)
	ptx  int      // PTX entries expected
}

func samples(tb testing.TB) []sample {
	tk := fatbintest.Find(tb)
	archs := tk.Archs()
	gen := fatbintest.Gencode(archs...)
	n := len(archs)
	return []sample{
		{"executable, default compression", "vectoradd.cu", "vectoradd", gen, false, n},
		{"executable, -compress-all", "gemm.cu", "gemm", append(gen, "-Xfatbin=-compress-all"), false, n},
		{"executable, no compression", "control.cu", "control", append(gen, "-Xfatbin=-compress=false"), false, n},
		{"shared library", "templates.cu", "libtemplates.so", append(gen, "-shared", "-Xcompiler", "-fPIC"), false, n},
		{"raw fatbin", "control.cu", "control.fatbin", append(gen, "-fatbin"), false, n},
		{"relocatable object", "templates.cu", "templates.o", append(fatbintest.Gencode(archs[1]), "-c", "-rdc=true"), true, 1},
		{"cubin", "vectoradd.cu", "vectoradd.cubin", []string{"-cubin", "-arch", "sm_80"}, false, 0},
		{"PTX only, compute_90", "gemm.cu", "gemm-ptx", []string{"-gencode", "arch=compute_90,code=compute_90"}, false, 1},
	}
}

// cuobjdumpName is the name cuobjdump lists an entry under.
func cuobjdumpName(f *fatbin.File, e *fatbin.Entry, file string, n int) string {
	base := filepath.Base(file)
	if i := strings.LastIndexByte(base, '.'); i > 0 {
		base = base[:i]
	}
	if f.Kind == fatbin.ImageCubin {
		return base + "." + e.ArchName() + ".cubin"
	}
	return e.FileName(base, n)
}

// TestAgainstCuobjdump builds each sample with nvcc and checks that the
// parser finds the entries cuobjdump lists, in the same order, and that
// every PTX and ELF image equals what cuobjdump extracts, byte for byte.
func TestAgainstCuobjdump(t *testing.T) {
	for _, s := range samples(t) {
		t.Run(s.name, func(t *testing.T) {
			file := fatbintest.Build(t, fatbintest.Source(t, s.src), s.out, s.args...)
			f, err := fatbin.Open(file)
			if err != nil {
				t.Fatal(err)
			}
			// cuobjdump shows the executable fatbin, or the relocatable
			// one when there is no executable one (or with -all).
			var entries []*fatbin.Entry
			for i, c := range f.Containers {
				if s.all || f.Kind != fatbin.ImageHostELF || f.Section[i] == fatbin.SectionFatbin {
					entries = append(entries, c.Entries...)
				}
			}
			entries = append(entries, f.Loose...)

			listed := fatbintest.List(t, file, s.all)
			count := map[fatbin.Kind]int{}
			var got []fatbintest.Listed
			for _, e := range entries {
				count[e.Kind]++
				got = append(got, fatbintest.Listed{Kind: e.Kind.String(), N: count[e.Kind], Name: cuobjdumpName(f, e, file, count[e.Kind])})
			}
			if len(got) != len(listed) {
				t.Fatalf("parser lists %d entries %v, cuobjdump %d %v", len(got), got, len(listed), listed)
			}
			for i := range got {
				if got[i] != listed[i] {
					t.Errorf("entry %d: parser %v, cuobjdump %v", i, got[i], listed[i])
				}
			}
			if count[fatbin.KindPTX] != s.ptx {
				t.Errorf("%d PTX entries, want %d", count[fatbin.KindPTX], s.ptx)
			}

			// Extract everything with cuobjdump and compare.
			dir := t.TempDir()
			args := []string{"-xelf", "all", "-xptx", "all", file}
			if s.all {
				args = append([]string{"-all"}, args...)
			}
			log := fatbintest.Cuobjdump(t, dir, args...)
			count = map[fatbin.Kind]int{}
			for _, e := range entries {
				count[e.Kind]++
				name := cuobjdumpName(f, e, file, count[e.Kind])
				want, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil {
					t.Fatalf("cuobjdump did not extract %s: %v\n%s", name, err, log)
				}
				data, err := e.Data()
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if !bytes.Equal(data, want) {
					t.Errorf("%s: parser gives %d bytes, cuobjdump %d; first difference at %d",
						name, len(data), len(want), firstDiff(data, want))
				}
				if e.Kind == fatbin.KindPTX {
					// "Extracting PTX file and ptxas options    1: x.1.sm_80.ptx -arch=sm_80 ..."
					wantOpts := "-arch=" + e.ArchName() + " " + e.Options
					if line := extractLine(log, name); strings.Join(strings.Fields(line), " ") != strings.Join(strings.Fields(wantOpts), " ") {
						t.Errorf("%s: cuobjdump options %q, parser %q", name, line, wantOpts)
					}
				}
			}
			if s.ptx == 0 {
				if _, err := f.PTX(); !errors.Is(err, fatbin.ErrNoPTX) {
					t.Errorf("PTX() = %v, want ErrNoPTX", err)
				}
			}
		})
	}
}

// extractLine returns what follows the file name on cuobjdump's
// "Extracting ..." line for name.
func extractLine(log, name string) string {
	for _, l := range strings.Split(log, "\n") {
		if _, rest, ok := strings.Cut(l, ": "+name); ok {
			return rest
		}
	}
	return "(no line for " + name + ")"
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestWrappers checks that the wrappers in .nvFatBinSegment of an
// executable and of a shared library (where the pointer is also a
// relative relocation) lead to the container that holds the kernels.
// nvcc 11.8 writes one wrapper; CUDA 13 also links in a container of
// kernel-less cubins from libcudart_static, which may carry its own.
func TestWrappers(t *testing.T) {
	tk := fatbintest.Find(t)
	gen := fatbintest.Gencode(tk.Archs()[1])
	for _, s := range []struct{ name, out string }{{"executable", "va"}, {"shared library", "libva.so"}} {
		t.Run(s.name, func(t *testing.T) {
			args := gen
			if strings.HasSuffix(s.out, ".so") {
				args = append(args, "-shared", "-Xcompiler", "-fPIC")
			}
			f, err := fatbin.Open(fatbintest.Build(t, fatbintest.Source(t, "vectoradd.cu"), s.out, args...))
			if err != nil {
				t.Fatal(err)
			}
			checkWrappers(t, f)
		})
	}
}

// checkWrappers checks that a host file has wrappers, each of version 1
// leading to a container of its own, that the container holding the
// PTX entry is reached by one, and that every container with a kernel
// (a PTX .entry or a cubin kernel) is reached by one.
func checkWrappers(t *testing.T, f *fatbin.File) {
	t.Helper()
	if len(f.Wrappers) == 0 {
		t.Fatalf("no wrappers in %d containers", len(f.Containers))
	}
	reached := map[*fatbin.Container]int{}
	for i, w := range f.Wrappers {
		if w.Version != 1 || w.Container == nil {
			t.Fatalf("wrapper %d %+v: want version 1 pointing at a container", i, w)
		}
		if reached[w.Container]++; reached[w.Container] > 1 {
			t.Errorf("wrapper %d: a second wrapper for the container at %#x", i, w.Container.Offset)
		}
	}
	ptx, err := f.PTX()
	if err != nil {
		t.Fatal(err)
	}
	for ci, c := range f.Containers {
		kernels := 0
		for _, e := range c.Entries {
			data, err := e.Data()
			if err != nil {
				t.Fatalf("container %d, entry at %#x: %v", ci, e.Offset, err)
			}
			if e.Kind == fatbin.KindPTX {
				kernels += bytes.Count(data, []byte(".entry "))
				continue
			}
			k, err := fatbin.CubinKernels(data)
			if err != nil {
				t.Fatalf("container %d, entry at %#x: %v", ci, e.Offset, err)
			}
			kernels += len(k)
		}
		if kernels > 0 && reached[c] == 0 {
			t.Errorf("container %d at %#x holds %d kernels but no wrapper leads to it", ci, c.Offset, kernels)
		}
		if slices.Contains(c.Entries, ptx[0]) && reached[c] == 0 {
			t.Errorf("no wrapper leads to the container at %#x that holds the PTX entry at %#x", c.Offset, ptx[0].Offset)
		}
	}
}

// TestExternalFiles checks files named in GPUPROBE_FATBIN_FILES (a
// colon-separated list; for the GPU machine: nvcc 13 output,
// libtorch_cuda.so) against cuobjdump's listing. It is skipped, saying
// so, when the variable is unset.
func TestExternalFiles(t *testing.T) {
	list := os.Getenv("GPUPROBE_FATBIN_FILES")
	if list == "" {
		t.Skip("set GPUPROBE_FATBIN_FILES=file1:file2 to check files from another toolkit")
	}
	for _, file := range strings.Split(list, ":") {
		t.Run(filepath.Base(file), func(t *testing.T) {
			f, err := fatbin.Open(file)
			if err != nil {
				t.Fatal(err)
			}
			var entries []*fatbin.Entry
			for i, c := range f.Containers {
				if f.Kind != fatbin.ImageHostELF || f.Section[i] == fatbin.SectionFatbin {
					entries = append(entries, c.Entries...)
				}
			}
			listed := fatbintest.List(t, file, false)
			count := map[fatbin.Kind]int{}
			bad := 0
			for i, e := range entries {
				count[e.Kind]++
				if i >= len(listed) {
					continue
				}
				name := cuobjdumpName(f, e, file, count[e.Kind])
				if l := listed[i]; l.Kind != e.Kind.String() || l.Name != name {
					if bad++; bad < 10 {
						// The header in hex, to find fields this
						// parser does not read yet (such as the "a"
						// of sm_100a entries).
						t.Errorf("entry %d: parser %s %s, cuobjdump %v; entry header % x", i, e.Kind, name, l, e.Header())
					}
				}
				if _, err := e.Data(); err != nil {
					t.Errorf("entry %d (%s): %v", i, name, err)
				}
			}
			if len(entries) != len(listed) {
				t.Errorf("parser finds %d entries, cuobjdump lists %d", len(entries), len(listed))
			}
			_, err = f.PTX()
			t.Logf("%s: %d containers, %d ELF, %d PTX entries; PTX(): %v", file, len(f.Containers), count[fatbin.KindELF], count[fatbin.KindPTX], err)
		})
	}
}

func TestCubinKernels(t *testing.T) {
	tk := fatbintest.Find(t)
	sm := fmt.Sprintf("sm_%d", tk.Archs()[1])
	tests := []struct {
		src  string
		want []string
	}{
		{"control.cu", []string{"_Z7collatzPiii", "_Z7globalsPi", "_Z9findFirstPKiiiPi"}},
		{"vectoradd.cu", []string{"_Z9vectorAddPKfS0_Pfi"}},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			file := fatbintest.Build(t, fatbintest.Source(t, tt.src), "k.cubin", "-cubin", "-arch", sm)
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			got, err := fatbin.CubinKernels(data)
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("kernels %q, want %q", got, tt.want)
			}
			// Truncated: a clear error, never a panic.
			if _, err := fatbin.CubinKernels(data[:len(data)/2]); err == nil || !strings.Contains(err.Error(), "offset") {
				t.Errorf("truncated cubin: %v, want an error with an offset", err)
			}
		})
	}
}
