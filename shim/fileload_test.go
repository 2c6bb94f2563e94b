package shim

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin/fatbintest"
	"github.com/gpuprobe/gpuprobe/gpuprobe/patcher"
)

const vectorAdd = "_Z9vectorAddPKfS0_Pf"

// How the MOCK driver logs the options of the test app's library loads
// (cudart mode): CU_JIT_MAX_REGISTERS 64, and with a file
// CU_LIBRARY_HOST_UNIVERSAL_FUNCTION_AND_DATA_TABLE 0x1234 (libOpts), with
// data or with APP_LIB_PRESERVE=1 CU_LIBRARY_BINARY_IS_PRESERVED 1
// (preservedOpts), which the shim leaves out of a patched data load
// (patchedDataOpts): the patched image does not outlive the load.
const (
	libOpts         = "njopt=1 jopt0=0 jval0=0x40 nlopt=1 lopt0=0 lval0=0x1234 "
	preservedOpts   = "njopt=1 jopt0=0 jval0=0x40 nlopt=1 lopt0=1 lval0=0x1 "
	patchedDataOpts = "njopt=1 jopt0=0 jval0=0x40 nlopt=0 "
)

// fileCalls returns the option part of each file load of path the MOCK
// driver logged with result r ("" for cuModuleLoad).
func fileCalls(stderr, path, r string) []string {
	re := regexp.MustCompile(`mock: (?:cuModuleLoad|cuLibraryLoadFromFile) path=` + regexp.QuoteMeta(path) + ` (.*)r=` + r + `\n`)
	var out []string
	for _, m := range re.FindAllStringSubmatch(stderr, -1) {
		out = append(out, m[1])
	}
	return out
}

func wantOpts(mode string) string {
	if mode == "cudart" {
		return libOpts
	}
	return ""
}

// checkFileLoad checks how a TestPatchLoad case reached the driver. The
// collector was sent the PTX once. Loaded by path and patched, the driver
// got a data load of the patched PTX (cuModuleLoadData, or
// cuLibraryLoadData with the app's options) and never the file; loaded by
// path and not patched, it got the app's own file call, options and all.
// Every launch is named vectorAdd (the kernel lookups of the handle the app
// got were recorded, not named later by the driver).
func checkFileLoad(t *testing.T, mode string, byPath, patched bool, path, orig string, sent []string, st *stream, stderr string) {
	t.Helper()
	if len(sent) != 1 || sent[0] != orig {
		t.Errorf("the collector was sent %d vectorAdd images, want 1: the %d-byte PTX", len(sent), len(orig))
	}
	calls := fileCalls(stderr, path, "0")
	dataLoad := func(opts string) bool { return strings.Contains(stderr, "mock: cuLibraryLoadData "+opts+"r=0\n") }
	switch {
	case !byPath:
		if len(calls) != 0 {
			t.Errorf("a file load reached the driver: %q", calls)
		}
		if mode == "cudart" && patched && (!dataLoad(patchedDataOpts) || dataLoad(preservedOpts)) {
			t.Errorf("the patched library was not loaded without CU_LIBRARY_BINARY_IS_PRESERVED:\n%s", stderr)
		}
		if mode == "cudart" && !patched && !dataLoad(preservedOpts) {
			t.Errorf("the original library was not loaded with the app's options:\n%s", stderr)
		}
	case patched:
		if len(calls) != 0 {
			t.Errorf("patched, yet the driver loaded the file itself: %q", calls)
		}
		if mode == "cudart" && !strings.Contains(stderr, "mock: cuLibraryLoadData "+libOpts+"r=0\n") {
			t.Errorf("the patched library was not loaded by cuLibraryLoadData with the app's options:\n%s", stderr)
		}
	default:
		if len(calls) != 1 || calls[0] != wantOpts(mode) {
			t.Errorf("the driver's file loads %q, want the app's one (options %q)", calls, wantOpts(mode))
		}
	}
	for _, l := range st.launches {
		if n := st.names[l.Function]; n != vectorAdd {
			t.Errorf("launch %d of %#x named %q, want %s", l.LaunchID, l.Function, n, vectorAdd)
		}
	}
	if strings.Contains(stderr, "launch of unseen function") {
		t.Errorf("a launched function was not looked up through the shim:\n%s", stderr)
	}
}

// TestPatchFileLoad: file loads (cuModuleLoad, cuLibraryLoadFromFile) under
// the shim with patching on, against a real agent whose Patch callback is
// gpuprobe/patcher. A PTX-bearing fatbin file is patched; a cubin, a
// missing file, a directory, a file over the shim's 256 MiB bound, or any
// file with patching off is never sent to the collector and reaches the
// driver as the app's own call (its result, e.g. CUDA_ERROR_FILE_NOT_FOUND,
// is the app's). PTX files are covered by TestPatchLoad's -file cases.
func TestPatchFileLoad(t *testing.T) {
	b := binaries(t)
	src := fatbintest.Source(t, filepath.Join("inject", "vectoradd.cu"))
	cubin := fatbintest.Build(t, src, "vectoradd.sm_80.cubin", "-cubin", "-O3", "-arch", "sm_80")
	fatbin := fatbintest.Build(t, src, "vectoradd.compute_80.fatbin", "-fatbin", "-O3",
		"-gencode", "arch=compute_80,code=compute_80")
	ptxFile := fatbintest.Build(t, src, "vectoradd.sm_80.ptx", "-ptx", "-O3", "-arch", "sm_80")
	dir := t.TempDir()
	// A sparse file one byte over the bound, PTX text at its start (the
	// MOCK driver loads it: it reads the file and stops at the first NUL).
	big := filepath.Join(dir, "big.ptx")
	ptx, err := os.ReadFile(ptxFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(big, ptx, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, 256<<20+1); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.ptx")
	tests := []struct {
		name, mode, file string
		env              []string
		result           string // the load's result the app prints
		patched          bool
		trace            string // in the shim's trace
	}{
		{"fatbin", "dlsym", fatbin, nil, "0", true, "cuModuleLoad: loaded the patched image"},
		{"fatbin-library", "cudart", fatbin, nil, "0", true, "cuLibraryLoadFromFile: loaded the patched image"},
		{"cubin", "dlsym", cubin, nil, "0", false, "image kind elf"},
		{"cubin-library", "cudart", cubin, nil, "0", false, "image kind elf"},
		{"cubin-direct", "direct", cubin, nil, "0", false, "image kind elf"},
		{"missing", "dlsym", missing, nil, "301", false, "not read for patching (open, -2)"},
		{"missing-library", "cudart", missing, nil, "301", false, "not read for patching (open, -2)"},
		{"directory", "dlsym", dir, nil, "200", false, "not read for patching (not a regular file"},
		{"oversize", "dlsym", big, nil, "0", false, "not read for patching (larger than GP_IMAGE_MAX"},
		{"patch-off", "dlsym", ptxFile, []string{"GPUPROBE_PATCH=0"}, "0", false, ""},
		{"preserved-library", "cudart", ptxFile, []string{"APP_LIB_PRESERVE=1"}, "1", false,
			"CU_LIBRARY_BINARY_IS_PRESERVED: not patched"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var sent [][]byte // what the collector was sent, but the app's empty 16-byte fatbin
			a := startPatchAgent(t, func(p *patcher.Patcher, r *agentwire.PatchRequest, bind patcher.Binder) (*agentwire.Patched, error) {
				if len(r.Image) != 16 {
					mu.Lock()
					sent = append(sent, r.Image)
					mu.Unlock()
				}
				return p.Patch(r, bind)
			})
			imgOut := filepath.Join(t.TempDir(), "loaded.ptx")
			env := append(preload(b, a.path), "MOCK_IMAGE_OUT="+imgOut, "GPUPROBE_TRACE=1")
			env = append(env, tc.env...)
			stdout, stderr, err := run(t, b, env, b.program(tc.mode), tc.mode, "loadfile", tc.file)
			if err != nil {
				t.Fatalf("app: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
			}
			ss := a.waitGone(t, 1)
			st := ss[0].read(t)
			if !strings.Contains(stdout, "app: file-load r="+tc.result+"\n") {
				t.Errorf("want the load's result %s:\n%s", tc.result, stdout)
			}
			if tc.trace != "" && !strings.Contains(stderr, tc.trace) {
				t.Errorf("no %q in the trace:\n%s", tc.trace, stderr)
			}
			mu.Lock()
			defer mu.Unlock()
			calls := fileCalls(stderr, tc.file, tc.result)
			opts := wantOpts(tc.mode)
			if tc.name == "preserved-library" {
				opts = preservedOpts
			}
			if !tc.patched {
				if len(sent) != 0 {
					t.Errorf("the collector was sent %d images", len(sent))
				}
				if len(calls) != 1 || calls[0] != opts {
					t.Errorf("the driver's file loads %q, want the app's one (options %q)\n%s", calls, opts, stderr)
				}
				if strings.Contains(stderr, "loaded the patched image") {
					t.Errorf("patched:\n%s", stderr)
				}
				if tc.result == "0" && !strings.Contains(stdout, "app: params-launch same=1\n") {
					t.Errorf("the launch of an unpatched kernel was changed:\n%s", stdout)
				}
			} else {
				orig, err := os.ReadFile(tc.file)
				if err != nil {
					t.Fatal(err)
				}
				if len(sent) != 1 || string(sent[0]) != string(orig) {
					t.Errorf("the collector was sent %d images, want the %d-byte file", len(sent), len(orig))
				}
				if len(calls) != 0 {
					t.Errorf("patched, yet the driver loaded the file itself: %q", calls)
				}
				a.mu.Lock()
				answers := a.answers
				a.mu.Unlock()
				loaded, err := os.ReadFile(imgOut)
				if err != nil || len(answers) != 1 || string(loaded) != strings.TrimRight(string(answers[0].Image), "\x00") {
					t.Errorf("the driver did not load the patched PTX (%d answers, %v)", len(answers), err)
				}
				if !strings.Contains(stdout, "app: params-launch same=0\n") {
					t.Errorf("the patched kernel's launch got no launch id:\n%s", stdout)
				}
				if tc.mode == "cudart" && !strings.Contains(stderr, "mock: cuLibraryLoadData "+libOpts+"r=0\n") {
					t.Errorf("the patched library was not loaded by cuLibraryLoadData with the app's options:\n%s", stderr)
				}
			}
			if tc.result != "0" {
				if len(st.launches) != 0 {
					t.Errorf("%d launches after a failed load", len(st.launches))
				}
				return
			}
			if len(st.launches) != 1 || st.names[st.launches[0].Function] != vectorAdd {
				t.Errorf("launch records %+v, names %v: want one of %s", st.launches, st.names, vectorAdd)
			}
			if !strings.Contains(stdout, "app: unloaded\n") {
				t.Errorf("the app did not unload:\n%s", stdout)
			}
		})
	}
}
