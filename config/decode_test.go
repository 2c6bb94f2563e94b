package config

import (
	"strings"
	"testing"
	"time"
)

// TestDecodeDurationUnits: a duration key takes a string with a unit; a
// bare number (nanoseconds to mapstructure) is refused naming the key,
// except 0, which means the same in every unit.
func TestDecodeDurationUnits(t *testing.T) {
	tests := []struct {
		name, yaml, want string
		check            func(*Config) bool
	}{
		{"bare integer", "limits: {launch_timeout: 5}", "limits::launch_timeout: must be a duration with a unit (e.g. 5s or 5ms), got the bare number 5", nil},
		{"bare float", "poll_interval: 1.5", "poll_interval: must be a duration with a unit", nil},
		{"nested key", "agent: {idle_timeout: 30}", "agent::idle_timeout: must be a duration with a unit", nil},
		{"string without a unit", `limits: {launch_timeout: "5"}`, "missing unit", nil},
		{"with a unit", "limits: {launch_timeout: 5s}", "", func(c *Config) bool { return c.Limits.LaunchTimeout == 5*time.Second }},
		{"bare zero", "host_probes: {scan_interval: 0}", "", func(c *Config) bool { return c.HostProbes.ScanInterval == 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := decodeYAML(t, tt.yaml)
			if tt.want == "" {
				if err != nil || !tt.check(c) {
					t.Fatalf("Unmarshal: %v (decoded %+v)", err, c)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Unmarshal error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestDecodeErrorsOnce: every decode problem is one line under its "::"
// key, after one heading: no nested "decoding failed" wrappers, no empty
// names, no mapstructure "a.b" names, each key once.
func TestDecodeErrorsOnce(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"unknown top-level key", "bogus: 1", []string{"bogus: unknown key"}},
		{"unknown nested keys", "agent: {nope: 1}\nsampling: {one_inn: 2}", []string{"agent::nope: unknown key", "sampling::one_inn: unknown key"}},
		{"wrong type", "sampling: {one_in: x}", []string{"sampling::one_in: expected type 'uint32', got unconvertible type 'string'"}},
		{"list element", "programs: [{path: a.o, attach: {x: 1}}]", []string{"programs[0]::attach: "}},
		{"range and decode together", "buffers: {map_entries: 1.5}\nlimits: {launch_timeout: 5}\nbogus: 1",
			[]string{"buffers::map_entries: must be an integer, got 1.5", "limits::launch_timeout: must be a duration", "bogus: unknown key"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeYAML(t, tt.yaml)
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			if n := strings.Count(msg, "gpuprobe config:"); n != 1 {
				t.Errorf("%d headings in %q", n, msg)
			}
			_, body, _ := strings.Cut(msg, "gpuprobe config:\n")
			lines := strings.Split(body, "\n")
			if len(lines) != len(tt.want) {
				t.Fatalf("lines %q, want %d: %q", lines, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(lines[i], w) {
					t.Errorf("line %d = %q, want it to start with %q", i, lines[i], w)
				}
			}
			for _, bad := range []string{"decoding failed", "''", "sampling.", "config.Config"} {
				if strings.Contains(body, bad) {
					t.Errorf("%q in %q", bad, body)
				}
			}
		})
	}
}
