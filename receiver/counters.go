package receiver

import (
	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/receiver/internal/translate"
)

// Hardware counters (docs/counters.md): the per-node sampler's forwarder
// (gpuprobe counters) is a client like any other, and its CounterSet and
// CounterSample records reach the translators through its rings. Only a
// client whose peer uid (SO_PEERCRED, read at its handshake) is root or
// in counters::trusted_uids has them applied: a sample is the whole
// GPU's and lands in every process's telemetry on it.

// counterOptions are the translators' options of counters::*.
func counterOptions(c *config.CountersConfig) translate.CounterOptions {
	return translate.CounterOptions{Enabled: c.Enabled, Trusted: c.Trusted,
		MaxSamples: c.MaxSamplesPerGPU, MaxWindows: c.MaxWindowsPerGPU}
}

// counterSelfMetrics are the hardware counters' self-metrics, of the
// shards' Node's counts c.
func counterSelfMetrics(c translate.CounterCounters) []translate.SelfMetric {
	return []translate.SelfMetric{
		{Name: "gpuprobe.receiver.counters.refused", Unit: "{record}", Desc: "Hardware-counter records of clients not trusted with them (peer uid neither root nor in counters::trusted_uids), dropped.", Value: c.Refused},
		{Name: "gpuprobe.receiver.counters.dropped", Unit: "{sample}", Desc: "Hardware-counter samples of trusted clients not applied: counters off, invalid, of no announced set, of a GPU's second sampler, late or out of order, or over counters::max_samples_per_gpu.", Value: c.Dropped},
		{Name: "gpuprobe.receiver.counters.windows_dropped", Unit: "{window}", Desc: "Device windows left out of the hardware-counter join: over counters::max_windows_per_gpu, or after their GPU's settled time.", Value: c.WindowsDropped},
	}
}
