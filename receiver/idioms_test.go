package receiver

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/config"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// buildIdioms compiles testdata/bpf/idioms.c, an object written as
// bpftime's GPU examples are, with clang (required).
func buildIdioms(t *testing.T) string {
	t.Helper()
	clang, err := exec.LookPath("clang")
	if err != nil {
		t.Fatalf("clang is needed to build testdata/bpf/idioms.c: %v", err)
	}
	out := filepath.Join(t.TempDir(), "idioms.o")
	cmd := exec.Command(clang, "-target", "bpf", "-O2", "-g", "-Wall", "-Werror", "-mcpu=v3",
		"-c", "../testdata/bpf/idioms.c", "-o", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("clang idioms.c: %v\n%s", err, b)
	}
	return out
}

// TestTargetlessHostProgramWarnsOnce: a host program in a bare
// SEC("uprobe") is skipped with one warning naming it and the reason when
// selected, and silently left out when attach names only the GPU program.
func TestTargetlessHostProgramWarnsOnce(t *testing.T) {
	obj := buildIdioms(t)
	tests := []struct {
		attach []string
		warns  int
	}{
		{nil, 1},
		{[]string{"cuda__exit", "host_manual"}, 1},
		{[]string{"cuda__exit"}, 0},
	}
	for _, tt := range tests {
		core, logs := observer.New(zap.InfoLevel)
		h := &hostSide{log: zap.New(core), libs: map[string]string{}, cancel: func() {}}
		cfg := config.Default()
		cfg.Programs = []config.ProgramConfig{{Path: obj, Attach: tt.attach}}
		h.loadPrograms(cfg)
		if n := logs.FilterLevelExact(zap.ErrorLevel).Len(); n != 0 {
			t.Errorf("attach %v: %d errors: %v", tt.attach, n, logs.All())
		}
		warns := logs.FilterLevelExact(zap.WarnLevel).All()
		if len(warns) != tt.warns {
			t.Fatalf("attach %v: %d warnings, want %d: %v", tt.attach, len(warns), tt.warns, warns)
		}
		for _, w := range warns {
			f := w.ContextMap()
			if f["program"] != "host_manual" || !strings.Contains(f["error"].(string), "names no <binary>:<symbol>") {
				t.Errorf("attach %v: warning %q %v", tt.attach, w.Message, f)
			}
		}
		if err := h.close(); err != nil {
			t.Error(err)
		}
	}
}
