package adversarial

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// testConfigRefused checks that the real binary refuses configurations
// whose values would wrap in their field, and that validate, which checks
// no host state, accepts a missing socket directory without creating it
// (start creates it).
func (s *suite) testConfigRefused(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	tests := []struct {
		name, receiver string
		want           []string // nil: validate accepts
	}{
		{"wrapping values", `    agent: {socket: ` + filepath.Join(dir, "agent.sock") + `}
    buffers: {ring_slots: 4294967360, slot_size: 4294967424}
    limits: {max_kernel_names: 18446744073709551616}`,
			[]string{"buffers::ring_slots: must be ≤ 4294967295 (uint32), got 4294967360",
				"buffers::slot_size: must be ≤ 4294967295 (uint32), got 4294967424",
				"limits::max_kernel_names: must be ≤ 9223372036854775807 (int), got 18446744073709551616"}},
		{"bare duration", `    agent: {socket: ` + filepath.Join(dir, "agent.sock") + `}
    limits: {launch_timeout: 5}`,
			[]string{"limits::launch_timeout: must be a duration with a unit"}},
		{"missing socket directory", `    agent: {socket: ` + filepath.Join(missing, "agent.sock") + `}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := filepath.Join(dir, "otelcol.yaml")
			body := "receivers:\n  gpuprobe:\n" + tt.receiver + `
exporters:
  debug: {}
service:
  pipelines:
    metrics: {receivers: [gpuprobe], exporters: [debug]}
`
			if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.CommandContext(t.Context(), s.otelcol, "validate", "--config", cfg).CombinedOutput()
			if tt.want == nil && err != nil {
				t.Fatalf("otelcol validate refused: %v\n%s\n%s", err, out, body)
			}
			if tt.want != nil && err == nil {
				t.Fatalf("otelcol validate accepted:\n%s", body)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("otelcol validate output lacks %q:\n%s", w, out)
				}
			}
			if _, err := os.Stat(missing); err == nil {
				t.Errorf("%s was created", missing)
			}
		})
	}
}
