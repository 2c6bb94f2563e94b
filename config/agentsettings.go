package config

import "github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"

// AgentSettings are the WELCOME settings that the configuration fixes:
// windows::enabled and windows::graphs, probes::sass (with kernel_phases) and whether its
// kernels are filtered, poll_interval as the flush period and
// sampling::device_max_per_second, each carried in a field of its own and
// as Validate accepted it (the receiver adds SettingSASSPrograms, which
// depends on the loaded programs).
func (c *Config) AgentSettings() agentwire.Settings {
	var st agentwire.Settings
	if c.Windows.Enabled {
		st.Flags |= agentwire.SettingWindows
		if c.Windows.Graphs == WindowGraphsWhole {
			st.Flags |= agentwire.SettingGraphWhole
		}
	}
	if c.Probes.SASS && c.Probes.KernelPhases {
		st.Flags |= agentwire.SettingSASS
		st.DeviceMaxPerSecond = c.Sampling.DeviceMaxPerSecond
		if len(c.Kernels.Include)+len(c.Kernels.Exclude) > 0 || c.Sampling.DeviceOneIn > 1 {
			st.Flags |= agentwire.SettingSASSFilter
		}
	}
	if st.Flags != 0 {
		st.FlushPeriod = c.PollInterval
	}
	st.StacksPerSecond = c.Sampling.StacksPerSecond
	return st
}
