// Package config is the configuration of the gpuprobe receiver (component
// type "gpuprobe"): the agent socket that CUDA applications connect to, the
// GPU programs to attach, kernel filters, sampling, buffer sizes, cardinality
// limits, host probes and the kind of the duration histograms.
//
// Every field has a default (see Default) and Validate names the key of any
// invalid value, e.g. "sampling::one_in: must be ≥ 1, got 0".
package config

import (
	"runtime"
	"time"
)

// Type is the component type of the receiver.
const Type = "gpuprobe"

// Config is the gpuprobe receiver's configuration.
type Config struct {
	Agent    AgentConfig     `mapstructure:"agent"`
	Probes   ProbesConfig    `mapstructure:"probes"`
	Programs []ProgramConfig `mapstructure:"programs"`
	Kernels  KernelsConfig   `mapstructure:"kernels"`
	Sampling SamplingConfig  `mapstructure:"sampling"`
	Buffers  BuffersConfig   `mapstructure:"buffers"`
	Limits   LimitsConfig    `mapstructure:"limits"`
	// PollInterval is how often the receiver reads the clients' rings,
	// and the period it asks every application for: handing over device
	// windows and SASS records, mirroring device-resident maps (sent in
	// µs, so a whole number of them; 2× it is how long a completed launch
	// waits for late warps).
	PollInterval time.Duration `mapstructure:"poll_interval"`
	// PollWorkers is how many goroutines read the clients' rings and
	// translate their records, each for the processes it was given
	// (0: DefaultPollWorkers).
	PollWorkers int `mapstructure:"poll_workers"`
	// MetricsInterval is how often the cumulative metrics are emitted.
	MetricsInterval time.Duration    `mapstructure:"metrics_interval"`
	HostProbes      HostProbesConfig `mapstructure:"host_probes"`
	Windows         WindowsConfig    `mapstructure:"windows"`
	GPUTime         GPUTimeConfig    `mapstructure:"gpu_time"`
	Counters        CountersConfig   `mapstructure:"counters"`
	Resource        ResourceConfig   `mapstructure:"resource"`
	Histograms      HistogramsConfig `mapstructure:"histograms"`
	Telemetry       TelemetryConfig  `mapstructure:"telemetry"`
	// ShutdownTimeout bounds the receiver's shutdown: the final read of
	// every ring, the pending launches and the last metrics point handed
	// to the pipelines (an earlier deadline of the collector's wins).
	ShutdownTimeout time.Duration `mapstructure:"shutdown_timeout"`

	// prevent unkeyed literal initialization
	_ struct{}
}

// AgentConfig is the unix socket that the in-application shim connects to.
type AgentConfig struct {
	// Socket is the path of the unix socket the receiver listens on.
	Socket string `mapstructure:"socket"`
	// SocketMode is the octal file mode of the socket, e.g. "0660".
	SocketMode string `mapstructure:"socket_mode"`
	// AllowedUIDs are the peer uids accepted besides the collector's own
	// (empty: only the collector's uid and root).
	AllowedUIDs []uint32 `mapstructure:"allowed_uids"`
	// AllowedGIDs are the peer gids accepted (empty: none besides AllowedUIDs).
	AllowedGIDs []uint32 `mapstructure:"allowed_gids"`
	// MaxConnectionsPerUID bounds the sessions of one peer uid (0: 64).
	MaxConnectionsPerUID int `mapstructure:"max_connections_per_uid"`
	// IdleTimeout is how long a silent session may stay when its process
	// maps none of its regions (0: 5 minutes).
	IdleTimeout time.Duration `mapstructure:"idle_timeout"`
	// MaxPatchMemory bounds the bytes that PATCH work may hold at once,
	// all clients together: half for the images received, half for
	// inflating, parsing and patching them; a module that costs more is
	// loaded unpatched. The collector's stated memory bound is this plus
	// 512 MiB (docs/security.md).
	MaxPatchMemory uint64 `mapstructure:"max_patch_memory"`
	// MaxRingMemory bounds the bytes of the rings all sessions hold,
	// open or closed and not yet drained; MaxRingMemoryPerUID bounds one
	// peer uid's. A session past them gets smaller rings, or is refused
	// (the application runs unrecorded): gpuprobe/agent/rings.go.
	MaxRingMemory       uint64 `mapstructure:"max_ring_memory"`
	MaxRingMemoryPerUID uint64 `mapstructure:"max_ring_memory_per_uid"`
}

// ProbesConfig turns the built-in probe sets on or off.
type ProbesConfig struct {
	// KernelPhases records launch, queueing, execution and completion of
	// every kernel launch (and per-warp timing where PTX is available).
	KernelPhases bool `mapstructure:"kernel_phases"`
	// SASS puts kernel_phases' window probe into kernels that have no PTX
	// (cuBLAS, cuDNN, PyTorch and Triton cubins) through NVIDIA's Compute
	// Sanitizer API, within sampling::device_max_per_second (which says how
	// the route spends it); needs kernel_phases. The GPU programs of
	// programs[] run there too: the collector answers the shim's request
	// for the route's patch module (agent.APISASS) with them linked beside
	// kernel_phases' patch functions.
	SASS bool `mapstructure:"sass"`
}

// ProgramConfig is one user eBPF object whose GPU programs are attached.
type ProgramConfig struct {
	// Path is the ELF object (clang -target bpf -O2 -g).
	Path string `mapstructure:"path"`
	// Attach names the programs (function names) to attach; empty: all.
	Attach []string `mapstructure:"attach"`
	// RecordTypes names, per GPU ring buffer (map name → struct name), the
	// struct in the object's BTF that decodes its records, for a ring whose
	// declared value type does not describe what the program writes.
	RecordTypes map[string]string `mapstructure:"record_types"`
	// MapValues seeds GPU arrays (1502, 1503, 1600): map name → key
	// (decimal or 0x-hex) → value, one unsigned 64-bit word or a list of
	// them laid out little-endian from the value's first byte (the rest is
	// zero). Every application's copy of the map starts with them; in
	// per-thread and per-warp arrays every lane of the key does.
	MapValues map[string]map[string]any `mapstructure:"map_values"`
}

// KernelsConfig filters kernels by (mangled or demangled) name. A kernel is
// probed when it matches some include pattern (or include is empty) and no
// exclude pattern. Patterns are Go regular expressions, unanchored.
type KernelsConfig struct {
	Include []string `mapstructure:"include"`
	Exclude []string `mapstructure:"exclude"`
}

// SamplingConfig thins out launches.
type SamplingConfig struct {
	// OneIn keeps one launch in OneIn (per kernel name, deterministic on
	// the launch id); 1 keeps all.
	OneIn uint32 `mapstructure:"one_in"`
	// MinDuration drops launch spans whose execution was shorter; metrics
	// still count every launch.
	MinDuration time.Duration `mapstructure:"min_duration"`
	// DeviceOneIn runs the device probes of patched kernels in one launch
	// in DeviceOneIn: the shim passes launch id 0 to the others, and the
	// kernels are patched to jump over every probe site when the id is 0,
	// so the probes' average cost on a launch falls to about 1/N of their
	// cost on a probed launch. Launches of CUDA graphs are always probed.
	// Device windows, phases and execution-time metrics then come from the
	// probed launches; launch counts and host timings from all.
	DeviceOneIn uint32 `mapstructure:"device_one_in"`
	// DeviceMaxPerSecond runs the device probes of each kernel in at most
	// this many launches a second (after DeviceOneIn; 0: no limit, at most
	// 1000000): kernels launched less often are probed every time, and the
	// probes' cost is bounded whatever the launch rate. The PTX route
	// spaces a kernel's probed launches at least 1/N s apart (PATCHED
	// device_max_per_second); the SASS route, whose patching is per module,
	// samples bursts of 10 launches at most N/10 times a second in the
	// whole process (WELCOME device_max_per_second), so each kernel and the
	// process stay within N. Launches of CUDA graphs are always probed.
	DeviceMaxPerSecond uint32 `mapstructure:"device_max_per_second"`
	// StacksPerSecond is how many launches a second of each process carry
	// their thread's stack (native and Python frames, taken by the shim at
	// about a microsecond each; 0: none, at most 10000). The trace policy
	// keeps a launch with a stack before the kernel's head bound.
	StacksPerSecond uint32 `mapstructure:"stacks_per_second"`
	// TracesPerSecondPerKernel, TracesPerSecondPerProcess and
	// TracesPerSecondPerNode bound the traces of ordinary launches (head
	// sampling, after OneIn and MinDuration): token buckets of that rate
	// and burst for each kernel of a process, each process and the whole
	// collector; a process gets at most its share of the node's rate
	// among the processes tracing. 0: no limit.
	TracesPerSecondPerKernel  float64 `mapstructure:"traces_per_second_per_kernel"`
	TracesPerSecondPerProcess float64 `mapstructure:"traces_per_second_per_process"`
	TracesPerSecondPerNode    float64 `mapstructure:"traces_per_second_per_node"`
	// AnomaliesPerSecondPerProcess and AnomaliesPerSecondPerNode bound the
	// traces kept for being anomalous (a failed launch, a slow one, a
	// large host wait), apart from the head bounds; one over them is
	// still kept when the head bounds have room. 0: no limit.
	AnomaliesPerSecondPerProcess float64 `mapstructure:"anomalies_per_second_per_process"`
	AnomaliesPerSecondPerNode    float64 `mapstructure:"anomalies_per_second_per_node"`
	// SlowFactor keeps a launch whose execution took more than this times
	// its kernel's running median (0: off).
	SlowFactor float64 `mapstructure:"slow_factor"`
	// HostWaitThreshold keeps a launch whose stream sat idle at least
	// this long waiting for it (gpu.cuda.kernel.host_wait; 0: off).
	HostWaitThreshold time.Duration `mapstructure:"host_wait_threshold"`
}

// BuffersConfig sizes the shared-memory rings and maps.
type BuffersConfig struct {
	// RingSlots is the number of slots of each record ring (power of two).
	RingSlots uint32 `mapstructure:"ring_slots"`
	// SlotSize is the bytes of one ring slot (multiple of 8).
	SlotSize uint32 `mapstructure:"slot_size"`
	// MaxThreads bounds per-thread maps: threads of one launch beyond it
	// are not recorded individually.
	MaxThreads uint32 `mapstructure:"max_threads"`
	// MapEntries is the default max_entries for GPU maps whose definition
	// leaves it 0.
	MapEntries uint32 `mapstructure:"map_entries"`
}

// LimitsConfig bounds cardinality and memory.
type LimitsConfig struct {
	// MaxKernelNames is the number of distinct kernel names of each
	// process that get their own series; its others fold into "other".
	MaxKernelNames int `mapstructure:"max_kernel_names"`
	// MaxKernelNameBytes is the bytes of kernel names that one client
	// (agent session) may make the collector hold for its function
	// handles; beyond it, handles no pending launch uses are forgotten,
	// and names that still do not fit count under "other".
	MaxKernelNameBytes int `mapstructure:"max_kernel_name_bytes"`
	// MaxThreadSeries is the number of per-thread series kept (threadhist);
	// 0 keeps only the distributions.
	MaxThreadSeries int `mapstructure:"max_thread_series"`
	// PerThreadSeries asks for one series per thread (built-in thread
	// counts) or per lane (user per-thread/per-warp arrays) where a launch
	// or key has at most MaxThreadSeries active threads; the distributions
	// are always emitted.
	PerThreadSeries bool `mapstructure:"per_thread_series"`
	// MaxPendingLaunches caps launches waiting for their device or
	// completion records; beyond it the oldest is emitted as it is.
	MaxPendingLaunches int `mapstructure:"max_pending_launches"`
	// LaunchTimeout is how long a launch waits for its device and completion
	// records before it is emitted with what was observed.
	LaunchTimeout time.Duration `mapstructure:"launch_timeout"`
	// MaxMapKeys bounds the series made from one user array map.
	MaxMapKeys int `mapstructure:"max_map_keys"`
	// SpansPerSecond caps the spans of one process (one client): a token
	// bucket of this rate and burst; traces over it are dropped and
	// counted, their launches still counted in the metrics. 0: no cap.
	SpansPerSecond int `mapstructure:"spans_per_second"`
}

// HostProbesConfig controls host-side uprobes (loaded into Linux).
type HostProbesConfig struct {
	// Enabled attaches the built-in uprobes on libcudart and libcuda.
	Enabled bool `mapstructure:"enabled"`
	// LibraryPaths are searched for libcuda/libcudart (absolute directories
	// or files), on top of ldconfig and the running processes.
	LibraryPaths []string `mapstructure:"library_paths"`
	// Ldconfig also probes the libraries `ldconfig -p` lists.
	Ldconfig bool `mapstructure:"ldconfig"`
	// ScanInterval is how often /proc is scanned for processes that map a
	// CUDA library not probed yet (containers included); 0 turns the scan
	// off.
	ScanInterval time.Duration `mapstructure:"scan_interval"`
	// ApproximateKernels turns launch→sync intervals of processes without
	// the shim into approximate kernel spans (graph launch→sync intervals
	// into approximate cuda.graph spans).
	ApproximateKernels bool `mapstructure:"approximate_kernels"`
	// HostCallGrace is how long a host launch call waits for the shim's
	// launch record it belongs to before it is emitted on its own.
	HostCallGrace time.Duration `mapstructure:"host_call_grace"`
	// ShimProcesses says where the entry points whose calls the shim
	// records itself (launches, graph launches, syncs, the driver copies
	// it wraps) are probed: ShimProcessesSkip, only in the processes
	// without a shim session that the /proc scan finds (with
	// scan_interval 0: everywhere); ShimProcessesAll, in every process.
	ShimProcesses string `mapstructure:"shim_processes"`
	// MaxProcesses bounds the processes probed one by one (shim_processes
	// skip); those found beyond it are counted and left without those
	// entry points' probes.
	MaxProcesses int `mapstructure:"max_processes"`
}

// WindowsConfig controls the use of the device windows that the driver
// times for the shim (CUPTI kernel activity, record.Window).
type WindowsConfig struct {
	// Enabled asks every application for the exact device start and end
	// of every kernel it runs (CUPTI activity, any kernel: SASS-only
	// library kernels too), handed over every poll_interval.
	Enabled bool `mapstructure:"enabled"`
	// Wait is how long a launch waits for its driver window while its
	// application's windows are on, before it is emitted without one; 0:
	// it does not wait (a window that came in time is used all the same).
	Wait time.Duration `mapstructure:"wait"`
	// Graphs is how a graph launch is timed: WindowGraphsNode (each kernel
	// node its own window) or WindowGraphsWhole (one window for the whole
	// launch, CUPTI's graph trace: cheaper for the launching thread).
	Graphs string `mapstructure:"graphs"`
}

// Values of windows::graphs.
const (
	WindowGraphsNode  = "node"
	WindowGraphsWhole = "graph"
)

// GPUTimeConfig controls the attribution of shared GPUs' time to their
// processes (gpu.cuda.process.time, receiver/internal/gputime).
type GPUTimeConfig struct {
	// Lag is how long device windows are held before their time is
	// settled: windows come late (every poll_interval, up to seconds
	// under load), and a window's part before the settled time is cut.
	Lag time.Duration `mapstructure:"lag"`
	// Mode is how the GPU shares itself among processes:
	// GPUTimeTimeSlicing (one context at a time, the default of a shared
	// GPU) or GPUTimeConcurrent (MPS, green contexts: kernels of several
	// processes at once).
	Mode string `mapstructure:"mode"`
}

// Values of gpu_time::mode.
const (
	GPUTimeTimeSlicing = "time_slicing"
	GPUTimeConcurrent  = "concurrent"
)

// TelemetryConfig routes the receiver's own telemetry.
type TelemetryConfig struct {
	// InPipeline also emits the gpuprobe.receiver.* self-metrics into the
	// metrics pipeline beside the GPU data; they always go to the
	// collector's internal telemetry.
	InPipeline bool `mapstructure:"in_pipeline"`
}

// Values of host_probes::shim_processes.
const (
	ShimProcessesSkip = "skip"
	ShimProcessesAll  = "all"
)

// ResourceConfig overrides resource attributes.
type ResourceConfig struct {
	// ServiceName overrides service.name of every process; empty: the
	// application's OTEL_SERVICE_NAME, else unknown_service:<executable
	// name> (docs/telemetry.md, Resources).
	ServiceName string `mapstructure:"service_name"`
}

// Defaults of the configuration.
const (
	DefaultSocket             = "/run/gpuprobe/agent.sock"
	DefaultSocketMode         = "0660"
	DefaultRingSlots          = 65536
	DefaultSlotSize           = 128
	DefaultMaxThreads         = 1 << 20
	DefaultMapEntries         = 1024
	DefaultMaxKernelNames     = 100
	DefaultMaxKernelNameBytes = 1 << 20 // limits::max_kernel_name_bytes, per client
	DefaultMaxThreadSeries    = 1024
	DefaultMaxPendingLaunches = 65536
	DefaultLaunchTimeout      = 5 * time.Second
	DefaultMaxMapKeys         = 256
	// DefaultSpansPerSecond caps each process's spans (limits::
	// spans_per_second; docs/configuration.md says why this size).
	DefaultSpansPerSecond = 100000
	DefaultPollInterval   = 10 * time.Millisecond
	MaxPollWorkers        = 64 // poll_workers
	// DefaultDeviceMaxPerSecond caps the device probes of each kernel for
	// always-on use: a launch-bound loop of a patched kernel then costs
	// what the shim and the windows cost.
	DefaultDeviceMaxPerSecond = 100
	// DefaultStacksPerSecond is sampling::traces_per_second_per_process's
	// default: each process's kept traces can all carry a stack.
	DefaultStacksPerSecond = 10
	// The trace policy's defaults (sampling::traces_per_second_*,
	// anomalies_per_second_*, slow_factor, host_wait_threshold): about a
	// hundred traces a second for a whole node, whatever its launch rate.
	DefaultTracesPerKernel     = 1
	DefaultTracesPerProcess    = 10
	DefaultTracesPerNode       = 100
	DefaultAnomaliesPerProcess = 10
	DefaultAnomaliesPerNode    = 50
	DefaultSlowFactor          = 4
	DefaultHostWaitThreshold   = time.Millisecond
	DefaultMetricsInterval     = 10 * time.Second
	DefaultScanInterval        = time.Second            // host_probes::scan_interval
	DefaultHostCallGrace       = 100 * time.Millisecond // host_probes::host_call_grace
	DefaultWindowWait          = 2 * time.Second        // windows::wait
	DefaultGPUTimeLag          = 2 * time.Second        // gpu_time::lag
	DefaultHostMaxProcesses    = 256                    // host_probes::max_processes
)

// DefaultShutdownTimeout is shutdown_timeout's default: it leaves the
// exporters 10 s of Kubernetes' default terminationGracePeriodSeconds (30 s).
const DefaultShutdownTimeout = 20 * time.Second

// Default returns the default configuration.
func Default() *Config {
	return &Config{
		Agent: AgentConfig{
			Socket:         DefaultSocket,
			SocketMode:     DefaultSocketMode,
			MaxPatchMemory: DefaultMaxPatchMemory,

			MaxRingMemory:       DefaultMaxRingMemory,
			MaxRingMemoryPerUID: DefaultMaxRingMemoryPerUID,
		},
		Probes: ProbesConfig{KernelPhases: true},
		Sampling: SamplingConfig{OneIn: 1, DeviceOneIn: 1, DeviceMaxPerSecond: DefaultDeviceMaxPerSecond, StacksPerSecond: DefaultStacksPerSecond,
			TracesPerSecondPerKernel: DefaultTracesPerKernel, TracesPerSecondPerProcess: DefaultTracesPerProcess,
			TracesPerSecondPerNode: DefaultTracesPerNode, AnomaliesPerSecondPerProcess: DefaultAnomaliesPerProcess,
			AnomaliesPerSecondPerNode: DefaultAnomaliesPerNode, SlowFactor: DefaultSlowFactor,
			HostWaitThreshold: DefaultHostWaitThreshold},
		Buffers: BuffersConfig{
			RingSlots:  DefaultRingSlots,
			SlotSize:   DefaultSlotSize,
			MaxThreads: DefaultMaxThreads,
			MapEntries: DefaultMapEntries,
		},
		Limits: LimitsConfig{
			MaxKernelNames:     DefaultMaxKernelNames,
			MaxKernelNameBytes: DefaultMaxKernelNameBytes,
			MaxThreadSeries:    DefaultMaxThreadSeries,
			MaxPendingLaunches: DefaultMaxPendingLaunches,
			LaunchTimeout:      DefaultLaunchTimeout,
			MaxMapKeys:         DefaultMaxMapKeys,
			SpansPerSecond:     DefaultSpansPerSecond,
		},
		PollInterval:    DefaultPollInterval,
		MetricsInterval: DefaultMetricsInterval,
		ShutdownTimeout: DefaultShutdownTimeout,
		HostProbes: HostProbesConfig{
			Ldconfig:           true,
			ScanInterval:       DefaultScanInterval,
			ApproximateKernels: true,
			HostCallGrace:      DefaultHostCallGrace,
			ShimProcesses:      ShimProcessesSkip,
			MaxProcesses:       DefaultHostMaxProcesses,
		},
		Windows:    WindowsConfig{Enabled: true, Wait: DefaultWindowWait, Graphs: WindowGraphsNode},
		GPUTime:    GPUTimeConfig{Lag: DefaultGPUTimeLag, Mode: GPUTimeTimeSlicing},
		Counters:   CountersConfig{MaxSamplesPerGPU: DefaultCounterSamples, MaxWindowsPerGPU: DefaultCounterWindows},
		Histograms: HistogramsConfig{Kind: HistogramsExponential},
	}
}

// DefaultPollWorkers is poll_workers' default: GOMAXPROCS, at most 4.
func DefaultPollWorkers() int { return min(runtime.GOMAXPROCS(0), 4) }

// Workers returns the poll workers to run: PollWorkers, or its default.
func (c *Config) Workers() int {
	if c.PollWorkers > 0 {
		return c.PollWorkers
	}
	return DefaultPollWorkers()
}
