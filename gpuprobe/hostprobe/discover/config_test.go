package discover

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFromConfig(t *testing.T) {
	b := artifacts(t)
	tmp := t.TempDir()
	text := filepath.Join(tmp, "notes.txt")
	fakeCuda := filepath.Join(tmp, "fake", "libcuda.so.1")
	emptyDir := filepath.Join(tmp, "empty")
	for _, p := range []string{text, fakeCuda, filepath.Join(emptyDir, "libfoo.so")} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("not ELF\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	missing := filepath.Join(tmp, "missing")
	drv, rt := mustID(t, b.driver), mustID(t, b.runtime)
	type want struct {
		key  Key
		kind Kind
		path string
		src  int // index of host_probes::library_paths
	}
	tests := []struct {
		name    string
		paths   []string
		want    []want
		wantErr []string // substrings; every one must be in the error
	}{
		{"directory: symlinks resolved, one per file", []string{filepath.Dir(b.driver)},
			[]want{{drv, KindDriver, b.driver, 0}, {rt, KindRuntime, b.runtime, 0}}, nil},
		{"file by name", []string{b.runtime}, []want{{rt, KindRuntime, b.runtime, 0}}, nil},
		{"symlink by name", []string{b.driverLink}, []want{{drv, KindDriver, b.driver, 0}}, nil},
		{"driver under another name, by symbols", []string{b.renamedDrv},
			[]want{{mustID(t, b.renamedDrv), KindDriver, b.renamedDrv, 0}}, nil},
		{"static runtime executable", []string{b.staticApp},
			[]want{{mustID(t, b.staticApp), KindStaticRuntime, b.staticApp, 0}}, nil},
		{"a file twice: first key wins", []string{b.driver, filepath.Dir(b.driver)},
			[]want{{drv, KindDriver, b.driver, 0}, {rt, KindRuntime, b.runtime, 1}}, nil},
		{"missing path", []string{b.runtime, missing},
			[]want{{rt, KindRuntime, b.runtime, 0}},
			[]string{"host_probes::library_paths[1]: ", missing, "no such file or directory"}},
		{"text file", []string{text}, nil,
			[]string{"host_probes::library_paths[0]: ", text, "not an ELF file"}},
		{"text file with a CUDA name", []string{fakeCuda}, nil,
			[]string{"host_probes::library_paths[0]: ", fakeCuda, "not an ELF file"}},
		{"ELF without CUDA", []string{b.plainLib}, nil,
			[]string{"host_probes::library_paths[0]: ", b.plainLib, "not a CUDA library", "cudaLaunchKernel"}},
		{"stripped static runtime is not recognised", []string{b.strippedApp}, nil,
			[]string{"host_probes::library_paths[0]: ", b.strippedApp, "not a CUDA library"}},
		{"directory without CUDA libraries", []string{emptyDir}, nil,
			[]string{"host_probes::library_paths[0]: ", emptyDir, "holds no libcuda.so* or libcudart.so*"}},
		{"two bad paths, both named", []string{missing, b.driver, text},
			[]want{{drv, KindDriver, b.driver, 1}},
			[]string{"host_probes::library_paths[0]: ", "host_probes::library_paths[2]: ", text}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			libs, err := FromConfig(tt.paths)
			if len(tt.wantErr) == 0 && err != nil {
				t.Fatal(err)
			}
			if len(tt.wantErr) > 0 && (err == nil || !containsAll(err.Error(), tt.wantErr...)) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
			if len(libs) != len(tt.want) {
				t.Fatalf("got %v, want %d libraries", libs, len(tt.want))
			}
			for _, w := range tt.want {
				l, ok := byKey(libs, w.key)
				if !ok {
					t.Fatalf("%s not found in %v", w.path, libs)
				}
				if l.Kind != w.kind || l.Path != w.path || l.Source != "config "+configKey(w.src) || len(l.PIDs) != 0 {
					t.Errorf("got %v, want %s %s from %s", l, w.kind, w.path, configKey(w.src))
				}
			}
			if err != nil && strings.Count(err.Error(), "host_probes::") != strings.Count(strings.Join(tt.wantErr, " "), "host_probes::") {
				t.Errorf("error %q names other paths than %q", err, tt.wantErr)
			}
		})
	}
}
