package translate

// Cold-start cost of patching, per process: launches that ran before
// their kernel's patched image was ready (record.LaunchPreswap, counted
// with the coverage when the launch is emitted), and from the shim's
// Patch records the time its patch thread spent asking the collector and
// compiling (the driver's JIT, or loading a cached image), and what its
// cache of compiled images did.

import (
	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// Names of the cold-start self-metrics, and of their attributes.
const (
	MetricLaunchesPreswap = "gpuprobe.receiver.launches.preswap"
	MetricPatchTime       = "gpuprobe.receiver.patch.time"
	MetricPatchCache      = "gpuprobe.receiver.patch.cache"
	AttrPatchStage        = "gpuprobe.patch.stage"
	AttrPatchCache        = "gpuprobe.patch.cache"
)

// Values of gpuprobe.patch.stage, by stage.
const (
	stageRequest = iota // asking the collector for the patched image
	stageCompile        // loading it: the driver's JIT or link, or the cached image
	nStages
)

// PatchStageNames are the values of gpuprobe.patch.stage.
var PatchStageNames = [nStages]string{"request", "compile"}

// cacheResults are the cache results counted (PatchCacheOff is not).
var cacheResults = [...]record.PatchCache{record.PatchCacheHit, record.PatchCacheMiss, record.PatchCacheCorrupt}

// procPatching is one process's cold-start cost.
type procPatching struct {
	preswap uint64
	seconds [nStages]float64
	cache   [len(cacheResults) + 1]uint64 // by record.PatchCache
	seen    bool                          // a Patch record came: emit the time and cache series
}

// onPatch adds one Patch record of pid.
func (cv *coverage) onPatch(pid uint32, r *record.Patch) {
	p := &cv.proc(pid).patch
	p.seen = true
	p.seconds[stageRequest] += float64(r.RequestNS) / 1e9
	p.seconds[stageCompile] += float64(r.CompileNS) / 1e9
	if int(r.Cache) < len(p.cache) {
		p.cache[r.Cache]++
	}
}

// patchMetrics are the cold-start metrics being written.
type patchMetrics struct {
	preswap, time, cache pmetric.NumberDataPointSlice
}

func newPatchMetrics(sm pmetric.MetricSlice) patchMetrics {
	return patchMetrics{
		preswap: newSum(sm, MetricLaunchesPreswap, "{launch}", "Launches that ran before their kernel's patched image was ready (the original kernel, windows only), per process."),
		time:    newSum(sm, MetricPatchTime, "s", "Time the shim's patch thread spent on a process's modules, by stage (request - asking the collector; compile - loading the patched image, the JIT or a cached image)."),
		cache:   newSum(sm, MetricPatchCache, "{module}", "Patched modules by what the shim's cache of compiled images did (hit - no JIT; miss - compiled and stored; corrupt - an entry failed its check, removed and compiled again), per process."),
	}
}

// appendMetrics writes p's points for pid: preswap launches always (0
// too), the time and cache series once a Patch record came.
func (p *procPatching) appendMetrics(pm *patchMetrics, pid uint32, start, ts pcommon.Timestamp) {
	point := func(s pmetric.NumberDataPointSlice) pmetric.NumberDataPoint {
		dp := s.AppendEmpty()
		dp.SetStartTimestamp(start)
		dp.SetTimestamp(ts)
		putPID(dp.Attributes(), pid)
		return dp
	}
	point(pm.preswap).SetIntValue(int64(p.preswap))
	if !p.seen {
		return
	}
	for st, name := range PatchStageNames {
		dp := point(pm.time)
		dp.SetDoubleValue(p.seconds[st])
		dp.Attributes().PutStr(AttrPatchStage, name)
	}
	for _, c := range cacheResults {
		dp := point(pm.cache)
		dp.SetIntValue(int64(p.cache[c]))
		dp.Attributes().PutStr(AttrPatchCache, c.String())
	}
}
