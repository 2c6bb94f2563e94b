package shim

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
)

// TestSettingsExtremes takes each WELCOME-carried key to its extremes end
// to end: the configuration is validated (a value the wire cannot carry
// is refused, naming the key), turned into the WELCOME settings
// (config.AgentSettings), sent by the agent server, and read by the shim,
// whose trace says what it took: the SASS route's rate and its bursts'
// spacing (10 launches every 10/rate s; 0: no limit) and the flush period.
func TestSettingsExtremes(t *testing.T) {
	b := binaries(t)
	for _, tc := range []struct {
		name   string
		rate   uint32
		poll   time.Duration
		refuse string // the error Validate must give ("": valid)
	}{
		{"no limit", 0, 10 * time.Millisecond, ""},
		{"one a second", 1, 10 * time.Millisecond, ""},
		{"default", config.DefaultDeviceMaxPerSecond, 10 * time.Millisecond, ""},
		{"u16 max", 65535, 10 * time.Millisecond, ""},
		{"over u16", 70000, 10 * time.Millisecond, ""},
		{"largest rate", 1000000, 10 * time.Millisecond, ""},
		{"rate too high", 1000001, 10 * time.Millisecond, "sampling::device_max_per_second: must be ≤ 1000000"},
		{"shortest poll", 100, 100 * time.Microsecond, ""},
		{"longest poll", 100, time.Minute, ""},
		{"poll too short", 100, 99 * time.Microsecond, "poll_interval: must be between"},
		{"poll too long", 100, time.Minute + time.Microsecond, "poll_interval: must be between"},
		{"poll not in µs", 100, time.Millisecond + 500*time.Nanosecond, "poll_interval: must be a whole number of microseconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Agent.Socket = filepath.Join(t.TempDir(), "agent.sock")
			cfg.Probes.SASS, cfg.Windows.Enabled = true, false
			cfg.Sampling.DeviceMaxPerSecond, cfg.PollInterval = tc.rate, tc.poll
			err := cfg.Validate()
			if tc.refuse != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refuse) {
					t.Fatalf("Validate: %v, want an error with %q", err, tc.refuse)
				}
				return
			}
			if err != nil {
				t.Fatalf("Validate: %v", err)
			}
			a := startAgent(t, 256, 1024, agent.Options{Settings: cfg.AgentSettings()})
			trace := filepath.Join(t.TempDir(), "trace.log")
			env := append(preload(b, a.path), "GPUPROBE_SASS=1", "GPUPROBE_SANITIZER="+b.sanitizer,
				"MOCK_SANITIZER_LOG="+filepath.Join(t.TempDir(), "sanitizer.txt"), "GPUPROBE_TRACE="+trace)
			if _, errOut, err := run(t, b, env, b.appDirect, "direct", "basic", "3"); err != nil {
				t.Fatalf("%v\n%s", err, errOut)
			}
			a.waitGone(t, 1)
			log, err := os.ReadFile(trace)
			if err != nil {
				t.Fatal(err)
			}
			gap := uint64(0)
			if tc.rate > 0 {
				gap = 10 * 1000000 / uint64(tc.rate)
			}
			for _, want := range []string{
				fmt.Sprintf("sass: settings: at most %d launches a second (0: no limit), records every %d us", tc.rate, tc.poll/time.Microsecond),
				fmt.Sprintf("sass: on, bursts of 10 launches every %d us", gap),
			} {
				if !strings.Contains(string(log), want) {
					t.Errorf("the shim's trace lacks %q:\n%s", want, log)
				}
			}
		})
	}
}

// TestProtocolConstants: the shim's reader (src/gp.h, src/session.c)
// speaks the version and sizes of the schema (package agentwire).
func TestProtocolConstants(t *testing.T) {
	var h []byte
	for _, f := range []string{"src/gp.h", "src/session.c"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		h = append(h, b...)
	}
	for _, c := range []struct {
		name string
		want int
	}{{"GP_PROTO", agentwire.Version}, {"GP_SETTINGS_SIZE", agentwire.SettingsSize}, {"GP_DESC_SIZE", agentwire.DescriptorSize}} {
		m := regexp.MustCompile(`(?m)^#define ` + c.name + `\s+(\d+)u?\b`).FindSubmatch(h)
		if m == nil {
			t.Errorf("the shim defines no %s", c.name)
		} else if got, _ := strconv.Atoi(string(m[1])); got != c.want {
			t.Errorf("the shim's %s is %d, agentwire's %d", c.name, got, c.want)
		}
	}
}
