package config

// CountersConfig controls hardware counters per kernel: samples of a
// GPU's performance monitors that a per-node sampler (gpuprobe counters)
// publishes, joined to the device windows of every process on that GPU
// (docs/counters.md).
type CountersConfig struct {
	// Enabled applies the samples of trusted clients; off, every
	// counter record is dropped and counted.
	Enabled bool `mapstructure:"enabled"`
	// TrustedUIDs are the peer uids whose counter records are applied
	// besides root's: a sample is the whole GPU's and goes into every
	// process's telemetry on it, so no application may write one.
	TrustedUIDs []uint32 `mapstructure:"trusted_uids"`
	// MaxSamplesPerGPU bounds the samples held per GPU while their
	// windows settle (gpu_time::lag bounds them in time); the oldest go
	// first, counted.
	MaxSamplesPerGPU int `mapstructure:"max_samples_per_gpu"`
	// MaxWindowsPerGPU bounds the device windows held per GPU for the
	// join, all processes together; windows beyond it are counted.
	MaxWindowsPerGPU int `mapstructure:"max_windows_per_gpu"`
}

// Defaults of counters.
const (
	// DefaultCounterSamples holds 6.5 s of samples at the sampler's
	// default 100 µs interval: the default gpu_time::lag three times over.
	DefaultCounterSamples = 1 << 16
	DefaultCounterWindows = 1 << 16
	maxCounterSamples     = 1 << 22
	maxCounterWindows     = 1 << 22
)

func (c *CountersConfig) validate(l *errs, windows bool) {
	if c.Enabled && !windows {
		l.add("counters::enabled", "needs windows::enabled (samples are joined to the driver's device windows)")
	}
	if len(c.TrustedUIDs) > maxIDs {
		l.add("counters::trusted_uids", "must list at most %d uids, got %d", maxIDs, len(c.TrustedUIDs))
	}
	if c.MaxSamplesPerGPU < 1 || c.MaxSamplesPerGPU > maxCounterSamples {
		l.add("counters::max_samples_per_gpu", "must be between 1 and %d, got %d", maxCounterSamples, c.MaxSamplesPerGPU)
	}
	if c.MaxWindowsPerGPU < 1 || c.MaxWindowsPerGPU > maxCounterWindows {
		l.add("counters::max_windows_per_gpu", "must be between 1 and %d, got %d", maxCounterWindows, c.MaxWindowsPerGPU)
	}
}

// Trusted reports whether a client of peer uid may publish counter
// records: root, or a uid of TrustedUIDs.
func (c *CountersConfig) Trusted(uid uint32) bool {
	if uid == 0 {
		return true
	}
	for _, u := range c.TrustedUIDs {
		if u == uid {
			return true
		}
	}
	return false
}
