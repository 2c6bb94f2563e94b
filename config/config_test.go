package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"
)

func TestDefaultIsValid(t *testing.T) {
	if err := validDefault(t).Validate(); err != nil {
		t.Fatalf("default config invalid: %v", err)
	}
	// And it passes the collector's recursive validation.
	if err := confmap.Validate(validDefault(t)); err != nil {
		t.Fatalf("confmap.Validate(default): %v", err)
	}
}

func TestLoadYAML(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		id      string
		want    func() *Config
		wantErr string
	}{
		{id: "gpuprobe/defaults", want: Default},
		{id: "gpuprobe", want: func() *Config {
			c := Default()
			c.Agent = AgentConfig{Socket: "/tmp/gpuprobe-test/agent.sock", SocketMode: "0600",
				AllowedUIDs: []uint32{1000, 1001}, AllowedGIDs: []uint32{44}, MaxPatchMemory: DefaultMaxPatchMemory,
				MaxRingMemory: DefaultMaxRingMemory, MaxRingMemoryPerUID: DefaultMaxRingMemoryPerUID}
			c.Probes.KernelPhases = false
			c.Programs = []ProgramConfig{{Path: "/opt/probes/threadhist.o", Attach: []string{"threadhist_exit"},
				RecordTypes: map[string]string{"exits": "exit_small"},
				MapValues: map[string]map[string]any{
					"settings":  {"0": []any{1, 255}, "0x2": uint64(18446744073709551615)},
					"threshold": {"1": "0x10"}}}}
			c.Kernels = KernelsConfig{Include: []string{"^matmul", "gemm"}, Exclude: []string{"warmup"}}
			c.Sampling = SamplingConfig{OneIn: 10, DeviceOneIn: 8, DeviceMaxPerSecond: 200, StacksPerSecond: 20, MinDuration: 5 * time.Microsecond,
				TracesPerSecondPerKernel: 0.5, TracesPerSecondPerProcess: 20, AnomaliesPerSecondPerProcess: 5,
				AnomaliesPerSecondPerNode: 25, SlowFactor: 8, HostWaitThreshold: 2 * time.Millisecond}
			c.Buffers = BuffersConfig{RingSlots: 4096, SlotSize: 256, MaxThreads: 65536, MapEntries: 512}
			c.Limits = LimitsConfig{MaxKernelNames: 20, MaxKernelNameBytes: DefaultMaxKernelNameBytes, MaxThreadSeries: 16, PerThreadSeries: true, MaxPendingLaunches: 1000,
				LaunchTimeout: 2 * time.Second, MaxMapKeys: 64, SpansPerSecond: 500}
			c.PollInterval = 5 * time.Millisecond
			c.HostProbes = HostProbesConfig{Enabled: true, LibraryPaths: []string{"/usr/lib/x86_64-linux-gnu"},
				Ldconfig: false, ScanInterval: 2 * time.Second, ApproximateKernels: false, HostCallGrace: 50 * time.Millisecond,
				ShimProcesses: ShimProcessesAll, MaxProcesses: 32}
			c.Windows.Wait = 500 * time.Millisecond
			c.Resource.ServiceName = "trainer"
			c.Telemetry.InPipeline = true
			return c
		}},
		{id: "gpuprobe/badkey", wantErr: "one_in_n"},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			sub, err := cm.Sub(tt.id)
			if err != nil {
				t.Fatal(err)
			}
			got := Default()
			err = sub.Unmarshal(got)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Unmarshal error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			v := *got
			v.Agent.Socket = filepath.Join(t.TempDir(), "agent.sock") // Validate checks the directory
			if err := v.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			want := tt.want()
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestValidateErrors(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   string
	}{
		{"socket empty", func(c *Config) { c.Agent.Socket = "" }, "agent::socket: must not be empty"},
		{"socket relative", func(c *Config) { c.Agent.Socket = "run/a.sock" }, `agent::socket: must be an absolute path, got "run/a.sock"`},
		{"socket too long", func(c *Config) { c.Agent.Socket = "/" + strings.Repeat("a", 120) }, "agent::socket: must be at most 107 bytes"},
		{"mode empty", func(c *Config) { c.Agent.SocketMode = "" }, `agent::socket_mode: must be an octal mode such as "0660", got ""`},
		{"mode not octal", func(c *Config) { c.Agent.SocketMode = "0689" }, `agent::socket_mode: must be an octal mode such as "0660", got "0689"`},
		{"mode high bits", func(c *Config) { c.Agent.SocketMode = "4660" }, `agent::socket_mode: must only have permission bits (≤ 0777), got "4660"`},
		{"mode owner cannot write", func(c *Config) { c.Agent.SocketMode = "0440" }, `agent::socket_mode: must let the owner read and write (0600), got "0440"`},
		{"mode world writable", func(c *Config) { c.Agent.SocketMode = "0666" }, `agent::socket_mode: must not be world-writable, got "0666"`},
		{"uid duplicate", func(c *Config) { c.Agent.AllowedUIDs = []uint32{5, 6, 5} }, "agent::allowed_uids[2]: duplicate uid 5 (also at index 0)"},
		{"uid invalid", func(c *Config) { c.Agent.AllowedUIDs = []uint32{^uint32(0)} }, "agent::allowed_uids[0]: uid 4294967295 is not a valid id"},
		{"gid duplicate", func(c *Config) { c.Agent.AllowedGIDs = []uint32{7, 7} }, "agent::allowed_gids[1]: duplicate gid 7 (also at index 0)"},
		{"patch memory too small", func(c *Config) { c.Agent.MaxPatchMemory = 1 << 20 }, "agent::max_patch_memory: must be at least 16777216 (16 MiB), got 1048576"},
		{"ring memory too small", func(c *Config) { c.Agent.MaxRingMemory = 1 << 20 }, "agent::max_ring_memory: must be between 16777216 (16 MiB)"},
		{"ring share over the whole", func(c *Config) { c.Agent.MaxRingMemoryPerUID = c.Agent.MaxRingMemory + 1 }, "agent::max_ring_memory_per_uid: must be between 16777216 (16 MiB) and agent::max_ring_memory (536870912), got 536870913"},
		{"program path empty", func(c *Config) { c.Programs = []ProgramConfig{{Path: "a.o"}, {}} }, "programs[1]::path: must not be empty"},
		{"program path not .o", func(c *Config) { c.Programs = []ProgramConfig{{Path: "probe.c"}} }, `programs[0]::path: must be an ELF object ending in .o, got "probe.c"`},
		{"attach empty", func(c *Config) { c.Programs = []ProgramConfig{{Path: "a.o", Attach: []string{""}}} }, "programs[0]::attach[0]: must not be empty"},
		{"attach duplicate", func(c *Config) { c.Programs = []ProgramConfig{{Path: "a.o", Attach: []string{"x", "x"}}} }, `programs[0]::attach[1]: duplicate program "x" (also at index 0)`},
		{"record_types bad struct", func(c *Config) {
			c.Programs = []ProgramConfig{{Path: "a.o", RecordTypes: map[string]string{"exits": "struct x"}}}
		}, `programs[0]::record_types::exits: must be a struct name (a C identifier, without "struct "), got "struct x"`},
		{"record_types bad map", func(c *Config) { c.Programs = []ProgramConfig{{Path: "a.o", RecordTypes: map[string]string{"": "x"}}} },
			`programs[0]::record_types::: map name must be a C identifier, got ""`},
		{"map_values bad key", func(c *Config) { c.Programs = []ProgramConfig{{Path: "a.o", MapValues: seed("cfg", "-1", 3)}} },
			`programs[0]::map_values::cfg::-1: key must be an unsigned 32-bit number, got "-1"`},
		{"map_values key too big", func(c *Config) { c.Programs = []ProgramConfig{{Path: "a.o", MapValues: seed("cfg", "4294967296", 3)}} },
			`programs[0]::map_values::cfg::4294967296: key must be an unsigned 32-bit number`},
		{"map_values negative", func(c *Config) { c.Programs = []ProgramConfig{{Path: "a.o", MapValues: seed("cfg", "0", -3)}} },
			`programs[0]::map_values::cfg::0: must be an unsigned 64-bit number (or a list of them), got -3 (int)`},
		{"map_values bad word", func(c *Config) {
			c.Programs = []ProgramConfig{{Path: "a.o", MapValues: seed("cfg", "1", []any{1, "x"})}}
		},
			`programs[0]::map_values::cfg::1: word [1]: must be an unsigned 64-bit number`},
		{"map_values empty list", func(c *Config) { c.Programs = []ProgramConfig{{Path: "a.o", MapValues: seed("cfg", "1", []any{})}} },
			`programs[0]::map_values::cfg::1: must be an unsigned 64-bit number or a non-empty list of them, got []`},
		{"map_values no keys", func(c *Config) {
			c.Programs = []ProgramConfig{{Path: "a.o", MapValues: map[string]map[string]any{"cfg": {}}}}
		}, `programs[0]::map_values::cfg: must give at least one key`},
		{"include bad regex", func(c *Config) { c.Kernels.Include = []string{"ok", "("} }, `kernels::include[1]: invalid regular expression "("`},
		{"include empty", func(c *Config) { c.Kernels.Include = []string{""} }, "kernels::include[0]: must not be empty"},
		{"exclude bad regex", func(c *Config) { c.Kernels.Exclude = []string{"[a-"} }, `kernels::exclude[0]: invalid regular expression "[a-"`},
		{"one_in zero", func(c *Config) { c.Sampling.OneIn = 0 }, "sampling::one_in: must be ≥ 1, got 0"},
		{"device_one_in zero", func(c *Config) { c.Sampling.DeviceOneIn = 0 }, "sampling::device_one_in: must be ≥ 1, got 0"},
		{"device_max_per_second too high", func(c *Config) { c.Sampling.DeviceMaxPerSecond = 2000000 },
			"sampling::device_max_per_second: must be ≤ 1000000 (0: no limit), got 2000000"},
		{"stacks_per_second too high", func(c *Config) { c.Sampling.StacksPerSecond = 20000 },
			"sampling::stacks_per_second: must be ≤ 10000 (0: none), got 20000"},
		{"min_duration negative", func(c *Config) { c.Sampling.MinDuration = -time.Second }, "sampling::min_duration: must be between 0s and 1h0m0s, got -1s"},
		{"traces_per_second_per_node negative", func(c *Config) { c.Sampling.TracesPerSecondPerNode = -1 },
			"sampling::traces_per_second_per_node: must be between 0 (no limit) and 1e+06, got -1"},
		{"anomalies_per_second_per_process too high", func(c *Config) { c.Sampling.AnomaliesPerSecondPerProcess = 2e6 },
			"sampling::anomalies_per_second_per_process: must be between 0 (no limit) and 1e+06, got 2e+06"},
		{"slow_factor below 1", func(c *Config) { c.Sampling.SlowFactor = 0.5 },
			"sampling::slow_factor: must be 0 (off) or between 1 and 1e+06, got 0.5"},
		{"host_wait_threshold negative", func(c *Config) { c.Sampling.HostWaitThreshold = -time.Millisecond },
			"sampling::host_wait_threshold: must be between 0s (off) and 1h0m0s, got -1ms"},
		{"ring_slots not pow2", func(c *Config) { c.Buffers.RingSlots = 1000 }, "buffers::ring_slots: must be a power of two between 64 and 16777216, got 1000"},
		{"ring_slots small", func(c *Config) { c.Buffers.RingSlots = 32 }, "buffers::ring_slots: must be a power of two between 64 and 16777216, got 32"},
		{"slot_size unaligned", func(c *Config) { c.Buffers.SlotSize = 100 }, "buffers::slot_size: must be a multiple of 8 between 128 and 65536, got 100"},
		{"max_connections_per_uid over the cap", func(c *Config) { c.Agent.MaxConnectionsPerUID = 257 }, "agent::max_connections_per_uid: must be between 0 (default) and 256, got 257"},
		{"idle_timeout short", func(c *Config) { c.Agent.IdleTimeout = time.Millisecond }, "agent::idle_timeout: must be 0 (default) or at least 1s, got 1ms"},
		{"slot_size small", func(c *Config) { c.Buffers.SlotSize = 32 }, "buffers::slot_size: must be a multiple of 8 between 128 and 65536, got 32"},
		{"ring too big", func(c *Config) { c.Buffers.RingSlots = 1 << 24; c.Buffers.SlotSize = 128 }, "buffers::ring_slots: ring_slots × slot_size = 2147483648 bytes exceeds 1073741824 (1 GiB)"},
		{"max_threads zero", func(c *Config) { c.Buffers.MaxThreads = 0 }, "buffers::max_threads: must be between 1 and 134217728, got 0"},
		{"map_entries zero", func(c *Config) { c.Buffers.MapEntries = 0 }, "buffers::map_entries: must be between 1 and 16777216, got 0"},
		{"max_kernel_names zero", func(c *Config) { c.Limits.MaxKernelNames = 0 }, "limits::max_kernel_names: must be between 1 and 100000, got 0"},
		{"per_thread_series without series", func(c *Config) { c.Limits.PerThreadSeries, c.Limits.MaxThreadSeries = true, 0 }, "limits::per_thread_series: needs limits::max_thread_series ≥ 1, got 0"},
		{"max_thread_series negative", func(c *Config) { c.Limits.MaxThreadSeries = -1 }, "limits::max_thread_series: must be between 0 and 1048576, got -1"},
		{"max_pending zero", func(c *Config) { c.Limits.MaxPendingLaunches = 0 }, "limits::max_pending_launches: must be between 1 and 4194304, got 0"},
		{"spans_per_second negative", func(c *Config) { c.Limits.SpansPerSecond = -1 }, "limits::spans_per_second: must be between 0 (no cap) and 10000000, got -1"},
		{"launch_timeout zero", func(c *Config) { c.Limits.LaunchTimeout = 0 }, "limits::launch_timeout: must be between 0s (exclusive) and 24h0m0s, got 0s"},
		{"max_map_keys zero", func(c *Config) { c.Limits.MaxMapKeys = 0 }, "limits::max_map_keys: must be between 1 and 65536, got 0"},
		{"poll too fast", func(c *Config) { c.PollInterval = time.Microsecond }, "poll_interval: must be between 100µs and 1m0s, got 1µs"},
		{"poll too slow", func(c *Config) { c.PollInterval = time.Hour }, "poll_interval: must be between 100µs and 1m0s, got 1h0m0s"},
		{"poll workers negative", func(c *Config) { c.PollWorkers = -1 }, "poll_workers: must be between 0 (GOMAXPROCS, at most 4) and 64, got -1"},
		{"poll workers too many", func(c *Config) { c.PollWorkers = 65 }, "poll_workers: must be between 0 (GOMAXPROCS, at most 4) and 64, got 65"},
		{"metrics_interval zero", func(c *Config) { c.MetricsInterval = 0 }, "metrics_interval: must be between 10ms and 1h0m0s, got 0s"},
		{"shutdown_timeout zero", func(c *Config) { c.ShutdownTimeout = 0 }, "shutdown_timeout: must be between 100ms and 10m0s, got 0s"},
		{"gpu_time lag too short", func(c *Config) { c.GPUTime.Lag = time.Millisecond }, "gpu_time::lag: must be between 100ms and 1m0s, got 1ms"},
		{"gpu_time lag too long", func(c *Config) { c.GPUTime.Lag = time.Hour }, "gpu_time::lag: must be between 100ms and 1m0s, got 1h0m0s"},
		{"gpu_time mode unknown", func(c *Config) { c.GPUTime.Mode = "mps" }, `gpu_time::mode: must be "time_slicing" or "concurrent", got "mps"`},
		{"shutdown_timeout too long", func(c *Config) { c.ShutdownTimeout = time.Hour }, "shutdown_timeout: must be between 100ms and 10m0s, got 1h0m0s"},
		{"library path relative", func(c *Config) { c.HostProbes.LibraryPaths = []string{"lib"} }, `host_probes::library_paths[0]: must be an absolute path, got "lib"`},
		{"library path empty", func(c *Config) { c.HostProbes.LibraryPaths = []string{"/lib", ""} }, "host_probes::library_paths[1]: must not be empty"},
		{"scan_interval too short", func(c *Config) { c.HostProbes.ScanInterval = time.Millisecond }, "host_probes::scan_interval: must be 0 (off) or between 100ms and 1h0m0s, got 1ms"},
		{"host_call_grace negative", func(c *Config) { c.HostProbes.HostCallGrace = -time.Second }, "host_probes::host_call_grace: must be between 0s and 1m0s, got -1s"},
		{"windows wait negative", func(c *Config) { c.Windows.Wait = -time.Millisecond }, "windows::wait: must be between 0s and 1m0s, got -1ms"},
		{"windows wait long", func(c *Config) { c.Windows.Wait = 2 * time.Minute }, "windows::wait: must be between 0s and 1m0s, got 2m0s"},
		{"windows graphs", func(c *Config) { c.Windows.Graphs = "nodes" }, `windows::graphs: must be "node" or "graph", got "nodes"`},
		{"shim_processes unknown", func(c *Config) { c.HostProbes.ShimProcesses = "none" }, `host_probes::shim_processes: must be "skip" or "all", got "none"`},
		{"max_processes zero", func(c *Config) { c.HostProbes.MaxProcesses = 0 }, "host_probes::max_processes: must be between 1 and 4096, got 0"},
		{"max_processes too many", func(c *Config) { c.HostProbes.MaxProcesses = 5000 }, "host_probes::max_processes: must be between 1 and 4096, got 5000"},
		{"service name control", func(c *Config) { c.Resource.ServiceName = "a\nb" }, `resource::service_name: must not contain control characters, got "a\nb"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validDefault(t)
			tt.mutate(c)
			err := c.Validate()
			if err == nil {
				t.Fatalf("Validate() = nil, want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %q, want it to contain %q", err, tt.want)
			}
			var ke *keyError
			if !errors.As(err, &ke) {
				t.Fatalf("error %T does not carry a key", err)
			}
			// Exactly one problem was introduced.
			if n := strings.Count(err.Error(), "\n") + 1; n != 1 {
				t.Fatalf("want exactly one error, got %d: %v", n, err)
			}
		})
	}
}

func TestValidateReportsAll(t *testing.T) {
	c := validDefault(t)
	c.Sampling.OneIn = 0
	c.PollInterval = 0
	err := c.Validate()
	if err == nil {
		t.Fatal("want errors")
	}
	for _, want := range []string{"sampling::one_in", "poll_interval"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestSocketFileMode(t *testing.T) {
	tests := []struct {
		in      string
		want    os.FileMode
		wantErr bool
	}{
		{"0660", 0o660, false},
		{"660", 0o660, false},
		{"0o600", 0o600, false},
		{"0770", 0o770, false},
		{"abc", 0, true},
	}
	for _, tt := range tests {
		a := AgentConfig{SocketMode: tt.in}
		got, err := a.SocketFileMode()
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("SocketFileMode(%q) = %o, %v; want %o, err=%v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "agent::socket_mode: ") {
			t.Errorf("error %q does not name the key", err)
		}
	}
}

func TestKernelFilter(t *testing.T) {
	tests := []struct {
		name    string
		k       KernelsConfig
		kernels []string
		want    bool
	}{
		{"empty keeps all", KernelsConfig{}, []string{"anything"}, true},
		{"include hit", KernelsConfig{Include: []string{"^gemm"}}, []string{"gemm_kernel"}, true},
		{"include miss", KernelsConfig{Include: []string{"^gemm"}}, []string{"sgemm"}, false},
		{"include demangled", KernelsConfig{Include: []string{`^vecAdd\(`}}, []string{"_Z6vecAddPfS_S_i", "vecAdd(float*, float*, float*, int)"}, true},
		{"exclude wins", KernelsConfig{Include: []string{"gemm"}, Exclude: []string{"warmup"}}, []string{"gemm_warmup"}, false},
		{"exclude only", KernelsConfig{Exclude: []string{"nccl"}}, []string{"reduce"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := NewKernelFilter(tt.k)
			if err != nil {
				t.Fatal(err)
			}
			if got := f.Match(tt.kernels...); got != tt.want {
				t.Fatalf("Match(%q) = %v, want %v", tt.kernels, got, tt.want)
			}
		})
	}
	if _, err := NewKernelFilter(KernelsConfig{Exclude: []string{"ok", "(("}}); err == nil || !strings.HasPrefix(err.Error(), "kernels::exclude[1]: ") {
		t.Fatalf("bad pattern error = %v", err)
	}
}

// seed is a map_values entry of one key.
func seed(m, key string, v any) map[string]map[string]any {
	return map[string]map[string]any{m: {key: v}}
}

func TestMapSeeds(t *testing.T) {
	p := ProgramConfig{MapValues: map[string]map[string]any{
		"b": {"0x10": "0x20", "2": []any{1, uint64(1 << 63)}},
		"a": {"7": 9.0},
	}}
	got, err := p.MapSeeds("programs[3]")
	if err != nil {
		t.Fatal(err)
	}
	want := []MapSeed{
		{Key: "programs[3]::map_values::a::7", Map: "a", Index: 7, Words: []uint64{9}},
		{Key: "programs[3]::map_values::b::2", Map: "b", Index: 2, Words: []uint64{1, 1 << 63}},
		{Key: "programs[3]::map_values::b::0x10", Map: "b", Index: 16, Words: []uint64{0x20}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	p.MapValues["a"]["7"] = 1.5
	if _, err := p.MapSeeds("programs[3]"); err == nil || !strings.HasPrefix(err.Error(), "programs[3]::map_values::a::7: ") {
		t.Fatalf("error %v does not name the key", err)
	}
}
