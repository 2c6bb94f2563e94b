package translate

import (
	"github.com/gpuprobe/gpuprobe/receiver/internal/exphist"
	"go.opentelemetry.io/collector/pdata/pcommon"
)

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

// dev returns the per-device aggregate of a series.
func (s *series) dev(d uint32) *devSeries {
	for _, ds := range s.devs {
		if ds.device == d {
			return ds
		}
	}
	ds := &devSeries{device: d}
	s.devs = append(s.devs, ds)
	return ds
}

// of returns the series of kernel k, "other" for nil (launch unknown).
func (sr *seriesStore) of(k *kernel) *series {
	if k == nil {
		return sr.other
	}
	return k.series
}

// series is one kernel name's metrics, per device.
type series struct {
	name string
	devs []*devSeries
}

type devSeries struct {
	device     uint32
	launches   uint64
	exec       exphist.Hist
	queue      exphist.Hist
	hostWait   exphist.Hist
	warpExec   exphist.Hist
	warpSkew   exphist.Hist
	threadExec exphist.Hist
	perThread  map[uint32]uint64 // thread index → executions (Options.PerThreadSeries), bounded
}
