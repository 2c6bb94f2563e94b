package fatbin_test

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin"
	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin/fatbintest"
)

// nvcc13 returns the path of a file in testdata/cuda/nvcc13: output of
// nvcc 13.0 committed from the GPU machine (see its README.md).
func nvcc13(t *testing.T, name string) string {
	t.Helper()
	return fatbintest.Source(t, filepath.Join("nvcc13", name))
}

// listing13 splits cuobjdump13.txt into one listing per file: a listing
// ends where the numbering of a kind starts again at 1.
func listing13(t *testing.T) [][]fatbintest.Listed {
	t.Helper()
	text, err := os.ReadFile(nvcc13(t, "cuobjdump13.txt"))
	if err != nil {
		t.Fatal(err)
	}
	lines, err := fatbintest.ParseListing(string(text))
	if err != nil {
		t.Fatal(err)
	}
	var out [][]fatbintest.Listed
	seen := map[string]bool{}
	for _, l := range lines {
		if len(out) == 0 || l.N == 1 && seen[l.Kind] {
			out = append(out, nil)
			seen = map[string]bool{}
		}
		seen[l.Kind] = true
		out[len(out)-1] = append(out[len(out)-1], l)
	}
	return out
}

// listed is what the parser lists for a file, numbered and named the
// way cuobjdump --list-elf --list-ptx does (executable fatbins only).
func listed(f *fatbin.File, file string) ([]fatbintest.Listed, []*fatbin.Entry) {
	var entries []*fatbin.Entry
	for i, c := range f.Containers {
		if f.Kind != fatbin.ImageHostELF || f.Section[i] == fatbin.SectionFatbin {
			entries = append(entries, c.Entries...)
		}
	}
	entries = append(entries, f.Loose...)
	count := map[fatbin.Kind]int{}
	var got []fatbintest.Listed
	for _, e := range entries {
		count[e.Kind]++
		got = append(got, fatbintest.Listed{Kind: e.Kind.String(), N: count[e.Kind], Name: cuobjdumpName(f, e, file, count[e.Kind])})
	}
	return got, entries
}

// TestNvcc13Listing checks the parser's listing of nvcc 13 output
// against what CUDA 13's cuobjdump printed for the same files, and that
// the cubins it extracts from the executable and the shared library are
// byte for byte the ones nvcc -cubin wrote.
func TestNvcc13Listing(t *testing.T) {
	want := listing13(t)
	tests := []struct {
		file  string
		group int      // listing in cuobjdump13.txt
		same  []string // nvcc13 cubin equal to each ELF entry, "" for none
	}{
		// The first container of the executable holds the kernel-less
		// cubins CUDA 13 links in from libcudart_static; the second is
		// the one of vectoradd.cu (its wrapper points there).
		{"vectoradd13.exe", 0, []string{"", "", "vectoradd13.sm_80.cubin", "vectoradd13.sm_90.cubin"}},
		{"vectoradd13.sm_80.cubin", 1, []string{"vectoradd13.sm_80.cubin"}},
		{"vectoradd13.so", 2, []string{"", "vectoradd13.sm_90.cubin"}},
	}
	if len(want) != len(tests) {
		t.Fatalf("cuobjdump13.txt holds %d listings, the test knows %d files", len(want), len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			file := nvcc13(t, tt.file)
			f, err := fatbin.Open(file)
			if err != nil {
				t.Fatal(err)
			}
			got, entries := listed(f, file)
			if !slices.Equal(got, want[tt.group]) {
				t.Fatalf("parser lists\n%v\ncuobjdump 13 lists\n%v", got, want[tt.group])
			}
			elf := 0
			for i, e := range entries {
				data, err := e.Data()
				if err != nil {
					t.Fatalf("entry %d (%s): %v", i, got[i].Name, err)
				}
				if e.Kind != fatbin.KindELF {
					if fatbin.Classify(data) != fatbin.ImagePTX || !bytes.Contains(data, []byte(".target "+e.ArchName())) {
						t.Errorf("entry %d (%s): not PTX for %s: %.40q", i, got[i].Name, e.ArchName(), data)
					}
					continue
				}
				if arch, _ := fatbin.CubinArch(data); arch != e.Arch {
					t.Errorf("entry %d (%s): cubin e_flags say sm_%d", i, got[i].Name, arch)
				}
				name := tt.same[elf]
				elf++
				if name == "" {
					continue
				}
				cubin, err := os.ReadFile(nvcc13(t, name))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(data, cubin) {
					t.Errorf("entry %d (%s): %d bytes, differs from %s (%d bytes) at %d",
						i, got[i].Name, len(data), name, len(cubin), firstDiff(data, cubin))
				}
				if k, err := fatbin.CubinKernels(data); err != nil || !slices.Equal(k, []string{"_Z9vectorAddPKfS0_Pfi"}) {
					t.Errorf("entry %d (%s): kernels %v, %v", i, got[i].Name, k, err)
				}
			}
			if elf != len(tt.same) {
				t.Errorf("%d ELF entries, the test expects %d", elf, len(tt.same))
			}
		})
	}
}

// TestNvcc13Wrappers checks that the one wrapper of nvcc 13's executable
// and shared library leads to the container of vectoradd.cu (the second
// one: the first comes from libcudart_static and has no kernels).
func TestNvcc13Wrappers(t *testing.T) {
	for _, file := range []string{"vectoradd13.exe", "vectoradd13.so"} {
		t.Run(file, func(t *testing.T) {
			f, err := fatbin.Open(nvcc13(t, file))
			if err != nil {
				t.Fatal(err)
			}
			if len(f.Containers) != 2 || len(f.Wrappers) != 1 {
				t.Fatalf("%d containers, %d wrappers; want 2 and 1", len(f.Containers), len(f.Wrappers))
			}
			if f.Wrappers[0].Container != f.Containers[1] {
				t.Errorf("wrapper leads to %p, want the second container %p", f.Wrappers[0].Container, f.Containers[1])
			}
			checkWrappers(t, f)
		})
	}
}

// TestCubinArch checks both cubin e_flags layouts: ABI version 7 (CUDA
// 11 and 12) and 8 (CUDA 13), with and without the arch-specific "a".
func TestCubinArch(t *testing.T) {
	cubin := func(abi byte, flags uint32) []byte {
		b := make([]byte, 64)
		copy(b, "\x7fELF\x02\x01\x01")
		b[8] = abi
		binary.LittleEndian.PutUint16(b[18:], 190)
		binary.LittleEndian.PutUint32(b[48:], flags)
		return b
	}
	read := func(name string) []byte {
		b, err := os.ReadFile(nvcc13(t, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name     string
		image    []byte
		sm       uint32
		specific bool
		archName string
	}{
		{"nvcc 13 sm_80", read("vectoradd13.sm_80.cubin"), 80, false, "sm_80"},
		{"nvcc 13 sm_90", read("vectoradd13.sm_90.cubin"), 90, false, "sm_90"},
		{"ABI 7 sm_80", cubin(7, 0x00500550), 80, false, "sm_80"},
		{"ABI 7 sm_90a", cubin(7, 0x005a0d5a), 90, true, "sm_90a"},
		{"ABI 8 sm_100a, LLVM's flag", cubin(8, 0x06006408), 100, true, "sm_100a"},
		// nvcc 13.0 writes 0x06006402 for both -arch sm_100 and sm_100a
		// (seen on the GPU machine): the header cannot tell them apart.
		{"ABI 8 sm_100 or sm_100a as nvcc 13 writes it", cubin(8, 0x06006402), 100, false, "sm_100"},
		{"ABI 8 sm_121 family", cubin(8, 0x06007902), 121, false, "sm_121"},
		{"ABI 8 accelerator flag 0x8", cubin(8, 0x06005a08), 90, true, "sm_90a"},
		{"ABI 8 sm_120", cubin(8, 0x06007804), 120, false, "sm_120"},
		{"unknown ABI 9", cubin(9, 0x06005004), 0, false, "sm_0"},
		{"not an ELF", []byte("//\n.version 9.0\n.target sm_90\n.address_size 64\n.........................."), 0, false, "sm_0"},
		{"truncated", cubin(8, 0x06005004)[:40], 0, false, "sm_0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sm, specific := fatbin.CubinArch(tt.image)
			if sm != tt.sm || specific != tt.specific {
				t.Errorf("CubinArch = %d, %v; want %d, %v", sm, specific, tt.sm, tt.specific)
			}
			if fatbin.Classify(tt.image) != fatbin.ImageCubin {
				return
			}
			f, err := fatbin.ParseImage(tt.image)
			if err != nil {
				t.Fatal(err)
			}
			if got := f.Loose[0].ArchName(); got != tt.archName {
				t.Errorf("ArchName = %s, want %s", got, tt.archName)
			}
		})
	}
}
