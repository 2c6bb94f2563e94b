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
