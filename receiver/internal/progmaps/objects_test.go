package progmaps

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/jit"
)

// loadFiles is ReadObjects, then Load.
func loadFiles(programs []config.ProgramConfig, o Options) ([]*Def, error) {
	objs, err := ReadObjects(programs)
	if err != nil {
		return nil, err
	}
	return Load(programs, objs, o)
}

// countParses makes parseObject count its calls until the test ends.
func countParses(t *testing.T) *int {
	n := new(int)
	orig := parseObject
	parseObject = func(b []byte) (*jit.Object, error) {
		*n++
		return orig(b)
	}
	t.Cleanup(func() { parseObject = orig })
	return n
}

// TestReadObjects: each object is read and parsed once; one over the size
// limit is refused before it is parsed, and a malformed one by the ELF
// check, each with the config key.
func TestReadObjects(t *testing.T) {
	good := buildObject(t, "usermaps")
	b, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	big := write("big.o", nil)
	if err := os.Truncate(big, MaxObjectBytes+1); err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(b)
	bad[18] = 62 // e_machine: EM_X86_64
	tests := []struct {
		name   string
		paths  []string
		parses int
		want   []string // in the error; nil: no error
		elfErr bool
	}{
		{"two objects", []string{good, write("copy.o", b)}, 2, nil, false},
		{"oversized", []string{good, big}, 1,
			[]string{"programs[1]::path " + big, "16777217 bytes exceeds the 16777216-byte (16 MiB) limit"}, false},
		{"malformed", []string{write("bad.o", bad)}, 1, []string{"programs[0]::path", "malformed ELF", "want EM_BPF"}, true},
		{"missing", []string{filepath.Join(dir, "none.o")}, 0, []string{"programs[0]::path", "no such file"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := countParses(t)
			var pcs []config.ProgramConfig
			for _, p := range tt.paths {
				pcs = append(pcs, config.ProgramConfig{Path: p})
			}
			objs, err := ReadObjects(pcs)
			if *n != tt.parses {
				t.Errorf("%d parses, want %d", *n, tt.parses)
			}
			if tt.want == nil {
				if err != nil || len(objs) != len(pcs) || objs[0].Spec == nil || len(objs[1].Programs) == 0 {
					t.Fatalf("ReadObjects: %v, %v", objs, err)
				}
				return
			}
			for _, w := range tt.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("error %v, want %q in it", err, w)
				}
			}
			var ee *jit.ELFError
			if errors.As(err, &ee) != tt.elfErr {
				t.Errorf("error %v: ELFError %v, want %v", err, !tt.elfErr, tt.elfErr)
			}
		})
	}
}

// TestLoadSharesObjects: Load reads the maps from the objects it is given
// and parses nothing itself.
func TestLoadSharesObjects(t *testing.T) {
	pcs := []config.ProgramConfig{{Path: buildObject(t, "usermaps")}}
	objs, err := ReadObjects(pcs)
	if err != nil {
		t.Fatal(err)
	}
	n := countParses(t)
	defs, err := Load(pcs, objs, Options{MaxThreads: 64})
	if err != nil || len(defs) == 0 {
		t.Fatalf("Load: %d defs, %v", len(defs), err)
	}
	if *n != 0 {
		t.Errorf("Load parsed %d times, want 0", *n)
	}
	if _, err := Load(pcs, nil, Options{}); err == nil {
		t.Error("Load without objects succeeded")
	}
}
