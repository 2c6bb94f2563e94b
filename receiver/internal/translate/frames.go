package translate

// Launches by top Python frame: a launch that carried its thread's stack
// (sampling::stacks_per_second) counts under its kernel's series and the
// stack's top Python frame, symbolised through stacksym, in
// gpu.cuda.kernel.launches.by_frame. The frames a kernel is launched from
// are few (the lines of a model's forward and backward that call an op),
// so the first ones seen are the ones that matter. Bounds: the first
// maxFramesPerKernel distinct frames of a kernel series, and at most
// maxFramesPerProc of a process, have points of their own; a later frame,
// or one that did not resolve, counts in the kernel's "other" frame.

import (
	"github.com/gpuprobe/gpuprobe/stacksym"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// MetricLaunchesByFrame is the launches-by-frame metric's name.
const MetricLaunchesByFrame = "gpu.cuda.kernel.launches.by_frame"

// Bounds of the launches-by-frame points (see the top of this file). With
// maxFrameString, one process's frames hold at most 128 KiB of names, as
// its kernel names do at most maxProcNameBytes.
const (
	maxFramesPerKernel = 8
	maxFramesPerProc   = 128
	maxFrameString     = 512 // bytes of a frame's function or file kept
)

// OtherFrame is code.function.name of a kernel's launches whose frame has
// no point of its own.
const OtherFrame = "other"

// frameKey is one top Python frame.
type frameKey struct {
	function, file string
	line           int
}

// frameCounts are one kernel series' sampled launches by top frame.
type frameCounts struct {
	by    map[frameKey]uint64
	order []frameKey // in first-seen order, for stable output
	other uint64
}

// countFrame counts launch l under its kernel's series and its stack's
// top Python frame, if it carried a stack with one.
func (so *spanOut) countFrame(l *launch) {
	st := l.host.app.stack
	if st == nil || len(st.python) == 0 || l.k == nil {
		return
	}
	fs := so.sym.Python(l.rec.PID, st.ver, st.python[:1], nil)
	l.k.series.addFrame(frameKeyOf(fs[0]))
}

// frameKeyOf is f's key, its strings cut at maxFrameString; ok false when
// f did not resolve.
func frameKeyOf(f stacksym.Frame) (frameKey, bool) {
	cut := func(s string) string { return s[:min(len(s), maxFrameString)] }
	return frameKey{cut(f.Function), cut(f.File), f.Line}, f.Function != ""
}

// addFrame counts one launch of s from frame k (ok: k resolved).
func (s *series) addFrame(k frameKey, ok bool) {
	if s.frames == nil {
		s.frames = &frameCounts{by: map[frameKey]uint64{}}
	}
	fc := s.frames
	if _, have := fc.by[k]; !have {
		if !ok || len(fc.order) >= maxFramesPerKernel || s.proc.held.frames >= maxFramesPerProc {
			fc.other++
			return
		}
		s.proc.held.frames++
		fc.order = append(fc.order, k)
	}
	fc.by[k]++
}

// appendFrames writes the launches-by-frame points of series all.
func appendFrames(sm pmetric.MetricSlice, all []*series, start, ts pcommon.Timestamp) {
	dps := newSum(sm, MetricLaunchesByFrame, "{launch}",
		"Launches that carried their thread's stack (sampling::stacks_per_second), per kernel name and the stack's top Python frame (bounded; the rest under code.function.name \"other\").")
	point := func(kernel string, n uint64) pcommon.Map {
		dp := dps.AppendEmpty()
		dp.SetStartTimestamp(start)
		dp.SetTimestamp(ts)
		dp.SetIntValue(int64(n))
		a := dp.Attributes()
		a.PutStr("cuda.kernel.name", kernel)
		return a
	}
	for _, s := range all {
		fc := s.frames
		if fc == nil {
			continue
		}
		for _, k := range fc.order {
			a := point(s.name, fc.by[k])
			a.PutStr(AttrCodeFunction, k.function)
			a.PutStr(AttrCodeFile, k.file)
			a.PutInt(AttrCodeLine, int64(k.line))
		}
		if fc.other > 0 {
			point(s.name, fc.other).PutStr(AttrCodeFunction, OtherFrame)
		}
	}
}
