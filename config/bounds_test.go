package config

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/confmap"
)

// decodeYAML decodes a receiver configuration the way the collector does:
// YAML into a confmap, then Unmarshal onto the defaults.
func decodeYAML(t *testing.T, y string) (*Config, error) {
	t.Helper()
	r, err := confmap.NewRetrievedFromYAML([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	conf, err := r.AsConf()
	if err != nil {
		t.Fatal(err)
	}
	c := Default()
	return c, conf.Unmarshal(c)
}

func TestDecodeRejectsOverflow(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"ring_slots wraps uint32", "buffers: {ring_slots: 4294967360}",
			"buffers::ring_slots: must be ≤ 4294967295 (uint32), got 4294967360"},
		{"slot_size wraps uint32", "buffers: {slot_size: 4294967424}",
			"buffers::slot_size: must be ≤ 4294967295 (uint32), got 4294967424"},
		{"max_kernel_names beyond uint64", "limits: {max_kernel_names: 18446744073709551616}",
			"limits::max_kernel_names: must be ≤ 9223372036854775807 (int), got 18446744073709551616"},
		{"negative uint", "sampling: {one_in: -1}", "sampling::one_in: must be ≥ 0 (uint32), got -1"},
		{"fraction", "buffers: {map_entries: 1.5}", "buffers::map_entries: must be an integer, got 1.5"},
		{"uid wraps", "agent: {allowed_uids: [0, 4294967296]}",
			"agent::allowed_uids[1]: must be ≤ 4294967295 (uint32), got 4294967296"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeYAML(t, tt.yaml)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Unmarshal error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestDecodeKeepsValidValues(t *testing.T) {
	c, err := decodeYAML(t, "buffers: {ring_slots: 4096, slot_size: 256}\nlimits: {max_kernel_names: 7}\nagent: {allowed_uids: [1000]}")
	if err != nil {
		t.Fatal(err)
	}
	if c.Buffers.RingSlots != 4096 || c.Buffers.SlotSize != 256 || c.Limits.MaxKernelNames != 7 ||
		len(c.Agent.AllowedUIDs) != 1 || c.Agent.AllowedUIDs[0] != 1000 {
		t.Fatalf("decoded %+v %+v %+v", c.Buffers, c.Limits, c.Agent)
	}
}

func TestValidateBoundsLists(t *testing.T) {
	many := func(n int, f func(i int) string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = f(i)
		}
		return out
	}
	ids := make([]uint32, maxIDs+1)
	for i := range ids {
		ids[i] = uint32(i)
	}
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   string
	}{
		{"too many uids", func(c *Config) { c.Agent.AllowedUIDs = ids }, "agent::allowed_uids: must list at most 1024 ids, got 1025"},
		{"too many include patterns", func(c *Config) { c.Kernels.Include = many(maxPatterns+1, func(i int) string { return "k" }) },
			"kernels::include: must list at most 256 patterns, got 257"},
		{"pattern too long", func(c *Config) { c.Kernels.Exclude = []string{strings.Repeat("a", maxPatternLen+1)} },
			"kernels::exclude[0]: must be at most 1024 bytes, got 1025"},
		{"too many programs", func(c *Config) {
			c.Programs = make([]ProgramConfig, maxPrograms+1)
			for i := range c.Programs {
				c.Programs[i].Path = "p.o"
			}
		}, "programs: must list at most 64 programs, got 65"},
		{"too many record_types", func(c *Config) {
			rt := map[string]string{}
			for i := range maxProgramMaps + 1 {
				rt[fmt.Sprintf("m%d", i)] = "s"
			}
			c.Programs = []ProgramConfig{{Path: "p.o", RecordTypes: rt}}
		}, "programs[0]::record_types: must name at most 256 maps, got 257"},
		{"too many seed keys", func(c *Config) {
			keys := map[string]any{}
			for i := range maxSeedKeys + 1 {
				keys[strconv.Itoa(i)] = 1
			}
			c.Programs = []ProgramConfig{{Path: "p.o", MapValues: map[string]map[string]any{"cfg": keys}}}
		}, "programs[0]::map_values::cfg: must give at most 65536 keys, got 65537"},
		{"too many library paths", func(c *Config) {
			c.HostProbes.LibraryPaths = many(maxLibraryPaths+1, func(i int) string { return "/lib" })
		},
			"host_probes::library_paths: must list at most 64 paths, got 65"},
		{"service name too long", func(c *Config) { c.Resource.ServiceName = strings.Repeat("s", 257) },
			"resource::service_name: must be at most 256 bytes, got 257"},
		{"launch_timeout too long", func(c *Config) { c.Limits.LaunchTimeout = 25 * time.Hour },
			"limits::launch_timeout: must be between 0s (exclusive) and 24h0m0s, got 25h0m0s"},
		{"min_duration too long", func(c *Config) { c.Sampling.MinDuration = 2 * time.Hour },
			"sampling::min_duration: must be between 0s and 1h0m0s, got 2h0m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validDefault(t)
			tt.mutate(c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// validDefault is Default with its socket in a private temporary directory,
// so that Validate's directory check passes on any machine.
func validDefault(t *testing.T) *Config {
	c := Default()
	c.Agent.Socket = filepath.Join(t.TempDir(), "agent.sock")
	return c
}
