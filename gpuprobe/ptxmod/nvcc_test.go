package ptxmod_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin/fatbintest"
	"github.com/gpuprobe/gpuprobe/gpuprobe/ptxmod"
)

// cudaSamples returns the CUDA samples of testdata/cuda.
func cudaSamples(t *testing.T) []string {
	dir := filepath.Dir(fatbintest.Source(t, "vectoradd.cu"))
	files, err := filepath.Glob(filepath.Join(dir, "*.cu"))
	if err != nil || len(files) < 4 {
		t.Fatalf("testdata/cuda: %d samples, %v", len(files), err)
	}
	return files
}

// corpus builds the PTX of every sample for every test arch, optimised
// and with -G (debug sections, .loc, generic loads), and -lineinfo for
// the last arch.
func corpus(t *testing.T) map[string]string {
	tk := fatbintest.Find(t)
	out := map[string]string{}
	archs := tk.Archs()
	for _, src := range cudaSamples(t) {
		base := strings.TrimSuffix(filepath.Base(src), ".cu")
		for _, a := range archs {
			sm := fmt.Sprintf("sm_%d", a)
			out[base+"."+sm+".ptx"] = fatbintest.Build(t, src, base+".ptx", "-ptx", "-arch", sm)
			out[base+"."+sm+".G.ptx"] = fatbintest.Build(t, src, base+".ptx", "-ptx", "-G", "-arch", sm)
		}
		sm := fmt.Sprintf("sm_%d", archs[len(archs)-1])
		out[base+"."+sm+".lineinfo.ptx"] = fatbintest.Build(t, src, base+".ptx", "-ptx", "-lineinfo", "-arch", sm)
	}
	return out
}

// lineCounts counts, line by line (independently of the parser, relying
// on nvcc's one-instruction-per-line output), the ret/exit instructions
// and the explicit global loads and stores.
func lineCounts(src []byte) (exits, globals int) {
	for _, line := range strings.Split(string(src), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && strings.HasPrefix(f[0], "@") {
			f = f[1:]
		}
		if len(f) == 0 {
			continue
		}
		op := strings.TrimSuffix(f[0], ";")
		if op == "ret" || op == "exit" || strings.HasPrefix(op, "ret.") {
			exits++
		}
		for _, p := range []string{"ld.global", "st.global", "ldu.global"} {
			if strings.HasPrefix(op, p) {
				globals++
			}
		}
	}
	return exits, globals
}

// instrument inserts a small valid PTX sequence at every probe point: the
// top of each kernel, before each exit and after each global access.
func instrument(t *testing.T, m *ptxmod.Module) {
	for _, k := range m.Kernels() {
		if err := m.InsertTop(k, "\t{ .reg .u32 %gp_t; mov.u32 %gp_t, %tid.x; }\n"); err != nil {
			t.Fatal(err)
		}
		for _, s := range k.Exits {
			m.InsertBefore(s, "\t{ .reg .u64 %gp_t; mov.u64 %gp_t, %globaltimer; }\n")
		}
		for _, a := range k.GlobalAccesses(false) {
			var probe string
			switch {
			case strings.HasPrefix(a.Addr.Base, "%rd"):
				probe = fmt.Sprintf("\t{ .reg .u64 %%gp_a; add.u64 %%gp_a, %s, %d; }\n", a.Addr.Base, a.Addr.Offset)
			case a.Addr.Base != "" && a.Addr.Base[0] != '%':
				probe = fmt.Sprintf("\t{ .reg .u64 %%gp_a; mov.u64 %%gp_a, %s; }\n", a.Addr.Base)
			default:
				probe = fmt.Sprintf("\t{ .reg .u32 %%gp_s; mov.u32 %%gp_s, %d; }\n", a.Size)
			}
			m.InsertAfter(a.Stmt, probe)
		}
	}
	m.AppendParam(m.Kernels()[0], ".param .u64 gpuprobe_launch_id")
	if err := m.InsertAfterHeader(".global .align 8 .u64 gpuprobe_map_test;\n"); err != nil {
		t.Fatal(err)
	}
}

// TestNvccCorpus parses every PTX module nvcc emits for testdata/cuda and
// checks that it round-trips byte for byte, that the parser finds the
// kernels ptxas compiles and the exits and global accesses a line count
// finds, and that ptxas accepts the module with code inserted at every
// probe point.
func TestNvccCorpus(t *testing.T) {
	files := corpus(t)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(files[name])
			if err != nil {
				t.Fatal(err)
			}
			m, err := ptxmod.Parse(src)
			if err != nil {
				t.Fatal(err)
			}
			out, err := m.Bytes()
			if err != nil || !bytes.Equal(out, src) {
				t.Fatalf("round trip differs (%v)", err)
			}
			arch := m.Target[0]

			exits, globals := lineCounts(src)
			gotExits, gotGlobals := 0, 0
			var kernels []string
			for _, f := range m.Funcs {
				gotExits += len(f.Exits)
				gotGlobals += len(f.GlobalAccesses(false))
				if f.Entry && f.HasBody {
					kernels = append(kernels, f.Name)
					if f.Top == nil {
						t.Errorf("kernel %s: no top statement", f.Name)
					}
				}
			}
			if gotExits != exits || gotGlobals != globals {
				t.Errorf("parser: %d exits, %d global accesses; line count: %d, %d", gotExits, gotGlobals, exits, globals)
			}

			instrument(t, m)
			patched, err := m.Bytes()
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(t.TempDir(), name)
			if err := os.WriteFile(file, patched, 0o644); err != nil {
				t.Fatal(err)
			}
			compiled := fatbintest.Ptxas(t, arch, file)
			slices.Sort(compiled)
			slices.Sort(kernels)
			if !slices.Equal(compiled, kernels) {
				t.Errorf("parser finds kernels %q, ptxas compiles %q", kernels, compiled)
			}
			// The patched module parses again, with the same structure.
			m2, err := ptxmod.Parse(patched)
			if err != nil {
				t.Fatalf("patched module: %v", err)
			}
			if len(m2.Funcs) != len(m.Funcs) || len(m2.Kernels()[0].Params) != len(m.Kernels()[0].Params)+1 {
				t.Errorf("patched module: %d functions, %d params", len(m2.Funcs), len(m2.Kernels()[0].Params))
			}
		})
	}
}
