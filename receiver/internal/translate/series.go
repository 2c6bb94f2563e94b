package translate

import "go.opentelemetry.io/collector/pdata/pcommon"

// seriesStore owns the metric series: one per kernel name (at most
// Options.MaxKernelNames, the rest folded into "other"), the memory copy
// series, and the cache of demangled names.
type seriesStore struct {
	o     *Options
	start pcommon.Timestamp

	byName  map[string]*series // kernel name → its series (bounded)
	other   *series
	order   []*series // series in creation order, for stable output
	memcpy  map[memcpyKey]*memcpySeries
	mcOrder []memcpyKey
	names   map[string]string // mangled → demangled, bounded by maxNameCache
}
