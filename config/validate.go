package config

import (
	"errors"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/internal/kernelfilter"
)

// Bounds that Validate enforces.
const (
	maxSocketPath     = 107 // sun_path is 108 bytes including the NUL
	minRingSlots      = 64
	maxRingSlots      = 1 << 24
	minSlotSize       = 128 // the largest fixed record (record.MaxFixedSize, 104) plus the ring header (8) fits
	maxSlotSize       = 1 << 16
	maxRingBytes      = 1 << 30
	maxMaxThreads     = 1 << 27
	maxMapEntries     = 1 << 24
	maxKernelNamesCap = 100000
	minNameBytes      = 16 << 10 // limits::max_kernel_name_bytes: two whole 4 KiB names and their demangled forms
	maxNameBytes      = 64 << 20
	maxThreadSeries   = 1 << 20
	maxPendingCap     = 1 << 22
	maxMapKeysCap     = 1 << 16
	maxSpanRate       = 10000000 // limits::spans_per_second
	maxDeviceRate     = 1000000  // sampling::device_max_per_second: a gap of at least 1 µs
	maxStackRate      = 10000    // sampling::stacks_per_second: at most about 1% of a core
	minPollInterval   = 100 * time.Microsecond
	maxPollInterval   = time.Minute
	minShutdown       = 100 * time.Millisecond // shutdown_timeout
	maxShutdown       = 10 * time.Minute
	maxIDs            = 1024 // agent::allowed_uids, agent::allowed_gids
	maxPatterns       = 256  // kernels::include, kernels::exclude
	maxPatternLen     = 1024
	maxPrograms       = 64
	maxAttach         = 1024 // programs[i]::attach
	maxLibraryPaths   = 64
	maxHostProcesses  = 4096 // host_probes::max_processes (hostprobe's bound)
	maxServiceName    = 256
	maxLaunchTimeout  = 24 * time.Hour
	maxSeedKeys       = 1 << 16 // programs[i]::map_values::<map>
	maxProgramMaps    = 256     // programs[i]::record_types, programs[i]::map_values
	maxMinDuration    = time.Hour
	maxTraceRate      = 1e6         // sampling::traces_per_second_*, anomalies_per_second_*
	maxSlowFactor     = 1e6         // sampling::slow_factor
	maxWindowWait     = time.Minute // windows::wait

	minGPUTimeLag = 100 * time.Millisecond // gpu_time::lag: windows come every poll_interval, often later
	maxGPUTimeLag = time.Minute            // the windows a GPU buffers meanwhile are bounded
)

// keyError is one invalid value: its key (confmap "::" path) and reason.
type keyError struct {
	key    string
	reason string
}

func (e *keyError) Error() string {
	if e.key == "" {
		return e.reason
	}
	return e.key + ": " + e.reason
}

type errs []error

func (l *errs) add(key, format string, args ...any) {
	*l = append(*l, &keyError{key: key, reason: fmt.Sprintf(format, args...)})
}

// Validate checks every value and returns all problems joined, each naming
// its key. It implements confmap's Validator.
func (c *Config) Validate() error {
	var l errs
	c.Agent.validate(&l)
	if len(c.Programs) > maxPrograms {
		l.add("programs", "must list at most %d programs, got %d", maxPrograms, len(c.Programs))
	}
	for i, p := range c.Programs {
		p.validate(&l, fmt.Sprintf("programs[%d]", i))
	}
	validatePatterns(&l, "kernels::include", c.Kernels.Include)
	validatePatterns(&l, "kernels::exclude", c.Kernels.Exclude)
	if c.Sampling.OneIn < 1 {
		l.add("sampling::one_in", "must be ≥ 1, got %d", c.Sampling.OneIn)
	}
	if c.Sampling.DeviceOneIn < 1 {
		l.add("sampling::device_one_in", "must be ≥ 1, got %d", c.Sampling.DeviceOneIn)
	}
	if c.Probes.SASS && !c.Probes.KernelPhases {
		l.add("probes::sass", "needs probes::kernel_phases (its records are kernel_phases' Exec records)")
	}
	if c.Sampling.DeviceMaxPerSecond > maxDeviceRate {
		l.add("sampling::device_max_per_second", "must be ≤ %d (0: no limit), got %d", maxDeviceRate, c.Sampling.DeviceMaxPerSecond)
	}
	if c.Sampling.StacksPerSecond > maxStackRate {
		l.add("sampling::stacks_per_second", "must be ≤ %d (0: none), got %d", maxStackRate, c.Sampling.StacksPerSecond)
	}
	if d := c.Sampling.MinDuration; d < 0 || d > maxMinDuration {
		l.add("sampling::min_duration", "must be between 0s and %s, got %s", maxMinDuration, d)
	}
	c.Sampling.validateTraces(&l)
	c.Buffers.validate(&l)
	c.Limits.validate(&l)
	c.Counters.validate(&l, c.Windows.Enabled)
	if c.PollInterval < minPollInterval || c.PollInterval > maxPollInterval {
		l.add("poll_interval", "must be between %s and %s, got %s", minPollInterval, maxPollInterval, c.PollInterval)
	} else if _, err := agentwire.Micros(c.PollInterval); err != nil {
		l.add("poll_interval", "must be a whole number of microseconds (the applications are sent it in µs), got %s", c.PollInterval)
	}
	if c.PollWorkers < 0 || c.PollWorkers > MaxPollWorkers {
		l.add("poll_workers", "must be between 0 (GOMAXPROCS, at most 4) and %d, got %d", MaxPollWorkers, c.PollWorkers)
	}
	if c.MetricsInterval < 10*time.Millisecond || c.MetricsInterval > time.Hour {
		l.add("metrics_interval", "must be between 10ms and 1h0m0s, got %s", c.MetricsInterval)
	}
	if d := c.GPUTime.Lag; d < minGPUTimeLag || d > maxGPUTimeLag {
		l.add("gpu_time::lag", "must be between %s and %s, got %s", minGPUTimeLag, maxGPUTimeLag, d)
	}
	if m := c.GPUTime.Mode; m != GPUTimeTimeSlicing && m != GPUTimeConcurrent {
		l.add("gpu_time::mode", "must be %q or %q, got %q", GPUTimeTimeSlicing, GPUTimeConcurrent, m)
	}
	if c.ShutdownTimeout < minShutdown || c.ShutdownTimeout > maxShutdown {
		l.add("shutdown_timeout", "must be between %s and %s, got %s", minShutdown, maxShutdown, c.ShutdownTimeout)
	}
	if n := len(c.HostProbes.LibraryPaths); n > maxLibraryPaths {
		l.add("host_probes::library_paths", "must list at most %d paths, got %d", maxLibraryPaths, n)
	}
	for i, p := range c.HostProbes.LibraryPaths {
		key := fmt.Sprintf("host_probes::library_paths[%d]", i)
		if p == "" {
			l.add(key, "must not be empty")
		} else if !filepath.IsAbs(p) {
			l.add(key, "must be an absolute path, got %q", p)
		}
	}
	if d := c.HostProbes.ScanInterval; d != 0 && (d < 100*time.Millisecond || d > time.Hour) {
		l.add("host_probes::scan_interval", "must be 0 (off) or between 100ms and 1h0m0s, got %s", d)
	}
	if d := c.HostProbes.HostCallGrace; d < 0 || d > time.Minute {
		l.add("host_probes::host_call_grace", "must be between 0s and 1m0s, got %s", d)
	}
	if d := c.Windows.Wait; d < 0 || d > maxWindowWait {
		l.add("windows::wait", "must be between 0s and %s, got %s", maxWindowWait, d)
	}
	if s := c.Windows.Graphs; s != WindowGraphsNode && s != WindowGraphsWhole {
		l.add("windows::graphs", "must be %q or %q, got %q", WindowGraphsNode, WindowGraphsWhole, s)
	}
	if s := c.HostProbes.ShimProcesses; s != ShimProcessesSkip && s != ShimProcessesAll {
		l.add("host_probes::shim_processes", "must be %q or %q, got %q", ShimProcessesSkip, ShimProcessesAll, s)
	}
	if n := c.HostProbes.MaxProcesses; n < 1 || n > maxHostProcesses {
		l.add("host_probes::max_processes", "must be between 1 and %d, got %d", maxHostProcesses, n)
	}
	c.Histograms.validate(&l)
	if n := len(c.Resource.ServiceName); n > maxServiceName {
		l.add("resource::service_name", "must be at most %d bytes, got %d", maxServiceName, n)
	}
	if strings.ContainsFunc(c.Resource.ServiceName, isControl) {
		l.add("resource::service_name", "must not contain control characters, got %q", c.Resource.ServiceName)
	}
	return errors.Join(l...)
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

func (a *AgentConfig) validate(l *errs) {
	switch {
	case a.Socket == "":
		l.add("agent::socket", "must not be empty")
	case !filepath.IsAbs(a.Socket):
		l.add("agent::socket", "must be an absolute path, got %q", a.Socket)
	case len(a.Socket) > maxSocketPath:
		l.add("agent::socket", "must be at most %d bytes (unix socket path limit), got %d", maxSocketPath, len(a.Socket))
	}
	if _, err := parseMode(a.SocketMode); err != nil {
		l.add("agent::socket_mode", "%v", err)
	}
	validateIDs(l, "agent::allowed_uids", "uid", a.AllowedUIDs)
	validateIDs(l, "agent::allowed_gids", "gid", a.AllowedGIDs)
	if n := a.MaxConnectionsPerUID; n < 0 || n > agentwire.DefaultMaxConns {
		l.add("agent::max_connections_per_uid", "must be between 0 (default) and %d, got %d", agentwire.DefaultMaxConns, n)
	}
	if d := a.IdleTimeout; d != 0 && d < time.Second {
		l.add("agent::idle_timeout", "must be 0 (default) or at least 1s, got %s", d)
	}
	if a.MaxPatchMemory < MinPatchMemory {
		l.add("agent::max_patch_memory", "must be at least %d (16 MiB), got %d", MinPatchMemory, a.MaxPatchMemory)
	}
	a.validateRings(l)
}

// Bounds of agent::max_ring_memory and max_ring_memory_per_uid: the
// defaults give a uid's first sessions full-size default rings (15 MiB
// each) and every one of the 64 it may open at least the smallest
// (0.5 MiB); the minimum holds a few full-size sessions.
const (
	DefaultMaxRingMemory       = agentwire.DefaultRingMemory
	DefaultMaxRingMemoryPerUID = agentwire.DefaultRingMemoryPerUID
	MinRingMemory              = 16 << 20
	maxRingMemory              = 1 << 40
)

func (a *AgentConfig) validateRings(l *errs) {
	whole := a.MaxRingMemory >= MinRingMemory && a.MaxRingMemory <= maxRingMemory
	if n := a.MaxRingMemory; !whole {
		l.add("agent::max_ring_memory", "must be between %d (16 MiB) and %d (1 TiB), got %d", MinRingMemory, uint64(maxRingMemory), n)
	}
	if n := a.MaxRingMemoryPerUID; n < MinRingMemory || (whole && n > a.MaxRingMemory) {
		l.add("agent::max_ring_memory_per_uid", "must be between %d (16 MiB) and agent::max_ring_memory (%d), got %d", MinRingMemory, a.MaxRingMemory, n)
	}
}

// Bounds of agent::max_patch_memory: the default patches modules of
// about 3 million PTX tokens (12 MB of nvcc output) or 8192 kernels; the
// minimum still patches small modules (a few thousand tokens).
const (
	DefaultMaxPatchMemory = 1 << 30
	MinPatchMemory        = 16 << 20
)

func validateIDs(l *errs, key, what string, ids []uint32) {
	if len(ids) > maxIDs {
		l.add(key, "must list at most %d ids, got %d", maxIDs, len(ids))
		return
	}
	seen := make(map[uint32]int, len(ids))
	for i, id := range ids {
		if id == ^uint32(0) {
			l.add(fmt.Sprintf("%s[%d]", key, i), "%s 4294967295 is not a valid id", what)
		}
		if j, ok := seen[id]; ok {
			l.add(fmt.Sprintf("%s[%d]", key, i), "duplicate %s %d (also at index %d)", what, id, j)
		}
		seen[id] = i
	}
}

// parseMode parses an octal file mode such as "0660".
func parseMode(s string) (os.FileMode, error) {
	if s == "" {
		return 0, errors.New(`must be an octal mode such as "0660", got ""`)
	}
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0o"), 8, 32)
	if err != nil {
		return 0, fmt.Errorf("must be an octal mode such as \"0660\", got %q", s)
	}
	if v&^0o777 != 0 {
		return 0, fmt.Errorf("must only have permission bits (≤ 0777), got %q", s)
	}
	if v&0o600 != 0o600 {
		return 0, fmt.Errorf("must let the owner read and write (0600), got %q", s)
	}
	if v&0o002 != 0 {
		return 0, fmt.Errorf("must not be world-writable, got %q", s)
	}
	return os.FileMode(v), nil
}

// SocketFileMode returns the parsed agent::socket_mode.
func (a *AgentConfig) SocketFileMode() (os.FileMode, error) {
	m, err := parseMode(a.SocketMode)
	if err != nil {
		return 0, fmt.Errorf("agent::socket_mode: %w", err)
	}
	return m, nil
}

func (p *ProgramConfig) validate(l *errs, key string) {
	switch {
	case p.Path == "":
		l.add(key+"::path", "must not be empty")
	case !strings.HasSuffix(p.Path, ".o"):
		l.add(key+"::path", "must be an ELF object ending in .o, got %q", p.Path)
	}
	if len(p.Attach) > maxAttach {
		l.add(key+"::attach", "must list at most %d programs, got %d", maxAttach, len(p.Attach))
	}
	seen := make(map[string]int, len(p.Attach))
	for i, name := range p.Attach {
		k := fmt.Sprintf("%s::attach[%d]", key, i)
		if name == "" {
			l.add(k, "must not be empty")
			continue
		}
		if j, ok := seen[name]; ok {
			l.add(k, "duplicate program %q (also at index %d)", name, j)
		}
		seen[name] = i
	}
	if n := len(p.RecordTypes); n > maxProgramMaps {
		l.add(key+"::record_types", "must name at most %d maps, got %d", maxProgramMaps, n)
	}
	if n := len(p.MapValues); n > maxProgramMaps {
		l.add(key+"::map_values", "must name at most %d maps, got %d", maxProgramMaps, n)
	}
	for _, m := range sortedKeys(p.RecordTypes) {
		k := key + "::record_types::" + m
		switch st := p.RecordTypes[m]; {
		case !identifier.MatchString(m):
			l.add(k, "map name must be a C identifier, got %q", m)
		case !identifier.MatchString(st):
			l.add(k, "must be a struct name (a C identifier, without \"struct \"), got %q", st)
		}
	}
	p.mapSeeds(l, key)
}

// identifier matches C identifiers (map and struct names).
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func validatePatterns(l *errs, key string, pats []string) {
	if len(pats) > maxPatterns {
		l.add(key, "must list at most %d patterns, got %d", maxPatterns, len(pats))
		return
	}
	for i, p := range pats {
		k := fmt.Sprintf("%s[%d]", key, i)
		switch {
		case p == "":
			l.add(k, "must not be empty")
			continue
		case len(p) > maxPatternLen:
			l.add(k, "must be at most %d bytes, got %d", maxPatternLen, len(p))
			continue
		}
		if _, err := regexp.Compile(p); err != nil {
			l.add(k, "invalid regular expression %q: %v", p, err)
		}
	}
}

func (b *BuffersConfig) validate(l *errs) {
	ok := true
	if b.RingSlots < minRingSlots || b.RingSlots > maxRingSlots || bits.OnesCount32(b.RingSlots) != 1 {
		l.add("buffers::ring_slots", "must be a power of two between %d and %d, got %d", minRingSlots, maxRingSlots, b.RingSlots)
		ok = false
	}
	if b.SlotSize < minSlotSize || b.SlotSize > maxSlotSize || b.SlotSize%8 != 0 {
		l.add("buffers::slot_size", "must be a multiple of 8 between %d and %d, got %d", minSlotSize, maxSlotSize, b.SlotSize)
		ok = false
	}
	if ok && uint64(b.RingSlots)*uint64(b.SlotSize) > maxRingBytes {
		l.add("buffers::ring_slots", "ring_slots × slot_size = %d bytes exceeds %d (1 GiB)",
			uint64(b.RingSlots)*uint64(b.SlotSize), maxRingBytes)
	}
	if b.MaxThreads < 1 || b.MaxThreads > maxMaxThreads {
		l.add("buffers::max_threads", "must be between 1 and %d, got %d", maxMaxThreads, b.MaxThreads)
	}
	if b.MapEntries < 1 || b.MapEntries > maxMapEntries {
		l.add("buffers::map_entries", "must be between 1 and %d, got %d", maxMapEntries, b.MapEntries)
	}
}

func (m *LimitsConfig) validate(l *errs) {
	if m.MaxKernelNames < 1 || m.MaxKernelNames > maxKernelNamesCap {
		l.add("limits::max_kernel_names", "must be between 1 and %d, got %d", maxKernelNamesCap, m.MaxKernelNames)
	}
	if m.MaxKernelNameBytes < minNameBytes || m.MaxKernelNameBytes > maxNameBytes {
		l.add("limits::max_kernel_name_bytes", "must be between %d and %d, got %d", minNameBytes, maxNameBytes, m.MaxKernelNameBytes)
	}
	if m.MaxThreadSeries < 0 || m.MaxThreadSeries > maxThreadSeries {
		l.add("limits::max_thread_series", "must be between 0 and %d, got %d", maxThreadSeries, m.MaxThreadSeries)
	}
	if m.PerThreadSeries && m.MaxThreadSeries == 0 {
		l.add("limits::per_thread_series", "needs limits::max_thread_series ≥ 1, got 0")
	}
	if m.MaxPendingLaunches < 1 || m.MaxPendingLaunches > maxPendingCap {
		l.add("limits::max_pending_launches", "must be between 1 and %d, got %d", maxPendingCap, m.MaxPendingLaunches)
	}
	if d := m.LaunchTimeout; d <= 0 || d > maxLaunchTimeout {
		l.add("limits::launch_timeout", "must be between 0s (exclusive) and %s, got %s", maxLaunchTimeout, d)
	}
	if m.MaxMapKeys < 1 || m.MaxMapKeys > maxMapKeysCap {
		l.add("limits::max_map_keys", "must be between 1 and %d, got %d", maxMapKeysCap, m.MaxMapKeys)
	}
	if m.SpansPerSecond < 0 || m.SpansPerSecond > maxSpanRate {
		l.add("limits::spans_per_second", "must be between 0 (no cap) and %d, got %d", maxSpanRate, m.SpansPerSecond)
	}
}

// validateTraces checks the trace policy's keys.
func (s *SamplingConfig) validateTraces(l *errs) {
	for _, r := range []struct {
		key string
		v   float64
	}{
		{"sampling::traces_per_second_per_kernel", s.TracesPerSecondPerKernel},
		{"sampling::traces_per_second_per_process", s.TracesPerSecondPerProcess},
		{"sampling::traces_per_second_per_node", s.TracesPerSecondPerNode},
		{"sampling::anomalies_per_second_per_process", s.AnomaliesPerSecondPerProcess},
		{"sampling::anomalies_per_second_per_node", s.AnomaliesPerSecondPerNode},
	} {
		if !(r.v >= 0 && r.v <= maxTraceRate) {
			l.add(r.key, "must be between 0 (no limit) and %g, got %g", float64(maxTraceRate), r.v)
		}
	}
	if f := s.SlowFactor; !(f == 0 || f >= 1 && f <= maxSlowFactor) {
		l.add("sampling::slow_factor", "must be 0 (off) or between 1 and %g, got %g", float64(maxSlowFactor), f)
	}
	if d := s.HostWaitThreshold; d < 0 || d > maxMinDuration {
		l.add("sampling::host_wait_threshold", "must be between 0s (off) and %s, got %s", maxMinDuration, d)
	}
}

// NewKernelFilter compiles the patterns of k (kernels::include/exclude).
func NewKernelFilter(k KernelsConfig) (*kernelfilter.Filter, error) {
	return kernelfilter.New(k.Include, k.Exclude)
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
