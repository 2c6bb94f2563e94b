package config

import (
	"strings"
	"testing"
)

// TestCountersValidate: each bad counters value is named by its key.
func TestCountersValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func(*Config)
		want string
	}{
		{"defaults", func(*Config) {}, ""},
		{"enabled", func(c *Config) { c.Counters.Enabled = true }, ""},
		{"no windows", func(c *Config) { c.Counters.Enabled, c.Windows.Enabled = true, false }, "counters::enabled: needs windows::enabled"},
		{"no samples", func(c *Config) { c.Counters.MaxSamplesPerGPU = 0 }, "counters::max_samples_per_gpu: must be between 1 and"},
		{"too many windows", func(c *Config) { c.Counters.MaxWindowsPerGPU = 1 << 23 }, "counters::max_windows_per_gpu: must be between 1 and"},
		{"too many uids", func(c *Config) { c.Counters.TrustedUIDs = make([]uint32, 1025) }, "counters::trusted_uids: must list at most 1024"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := Default()
			c.set(cfg)
			err := cfg.Validate()
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Fatalf("Validate = %v, want %q", err, c.want)
			}
		})
	}
}

func TestCountersTrusted(t *testing.T) {
	c := CountersConfig{TrustedUIDs: []uint32{1000}}
	for uid, want := range map[uint32]bool{0: true, 1000: true, 1001: false} {
		if got := c.Trusted(uid); got != want {
			t.Errorf("Trusted(%d) = %v, want %v", uid, got, want)
		}
	}
}
