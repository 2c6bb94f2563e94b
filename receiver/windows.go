package receiver

// Driver windows (the shim's CUPTI kernel activity, record.Window): what
// the receiver says of each client's windows state, once per change, and
// the window counts in the collector's own telemetry.

import (
	"context"
	"sync"
	"time"

	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/receiver/internal/gputime"
	"github.com/gpuprobe/gpuprobe/receiver/internal/metadata"
	"github.com/gpuprobe/gpuprobe/receiver/internal/translate"
	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
)

// Bound of the info-level state reports, all clients together: a burst of
// stateLogBurst, then one per stateLogEvery; the rest go to debug (every
// change is counted all the same).
const (
	stateLogBurst = 32
	stateLogEvery = time.Second
)

// stateLog rate-limits the info-level reports of windows state changes.
type stateLog struct {
	tokens float64
	last   time.Time
}

// allow takes a token at now.
func (s *stateLog) allow(now time.Time) bool {
	if s.last.IsZero() {
		s.tokens = stateLogBurst
	} else {
		s.tokens = min(stateLogBurst, s.tokens+float64(now.Sub(s.last))/float64(stateLogEvery))
	}
	s.last = now
	if s.tokens < 1 {
		return false
	}
	s.tokens--
	return true
}

// windowReports reports the changes of clients' windows states: logged,
// at most stateLogBurst at once at info, and counted.
type windowReports struct {
	log *zap.Logger
	tel *metadata.TelemetryBuilder
	mu  sync.Mutex // guards lim: the poll workers report
	lim stateLog
}

// state reports a change of a client's windows state (the translator's
// WindowOptions.OnState, called on the poll goroutine).
func (r *windowReports) state(pid uint32, s record.WindowState) {
	fields := []zap.Field{zap.Uint32("pid", pid), zap.String("state", s.State.String())}
	if s.Reason != record.WindowsReasonNone {
		fields = append(fields, zap.String("reason", s.Reason.String()))
	}
	if s.Detail != 0 {
		fields = append(fields, zap.Uint32("detail", s.Detail))
	}
	r.mu.Lock()
	allow := r.lim.allow(time.Now())
	r.mu.Unlock()
	if allow {
		r.log.Info(windowStateMessage(s), fields...)
	} else {
		r.log.Debug(windowStateMessage(s), fields...)
	}
	if r.tel != nil {
		r.tel.GpuprobeReceiverWindowsStateChanges.Add(context.Background(), 1, metric.WithAttributes(
			attribute.String("gpuprobe.windows.state", s.State.String()),
			attribute.String("gpuprobe.windows.reason", s.Reason.String())))
	}
}

// windowStateMessage says what a windows state means for the telemetry.
func windowStateMessage(s record.WindowState) string {
	switch s.State {
	case record.WindowsOn:
		return "gpuprobe: device windows on: the driver times every kernel of this application"
	case record.WindowsSteppedAside:
		return "gpuprobe: device windows stepped aside for the application's own profiler; unpatched kernels have no device phases until they are back"
	case record.WindowsUnavailable:
		return "gpuprobe: device windows unavailable for this application; unpatched kernels have no device phases"
	}
	return "gpuprobe: device windows off for this application"
}

// windowTelemetry adds what one poll changed of the window counts to the
// collector's own telemetry: windows lost in the application, launches
// emitted without one (windows.late and .unmatched are in the metrics
// pipeline only, as kernel_names.truncated is).
func windowTelemetry(ctx context.Context, tel *metadata.TelemetryBuilder, before, after *translate.WindowCounters) {
	tel.GpuprobeReceiverWindowsDropped.Add(ctx, int64(after.WindowsDropped-before.WindowsDropped))
	tel.GpuprobeReceiverWindowsMissing.Add(ctx, int64(after.WindowsMissing-before.WindowsMissing))
}

// windowWait is translate's WindowWait for windows::wait (0: no wait).
func windowWait(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// gpuTimeOptions are the attribution's options of gpu_time (validated).
func gpuTimeOptions(c config.GPUTimeConfig) gputime.Options {
	o := gputime.Options{Lag: c.Lag}
	if c.Mode == config.GPUTimeConcurrent {
		o.Mode = gputime.Concurrent
	}
	return o
}
