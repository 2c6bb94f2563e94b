package translate

import (
	"errors"
	"fmt"
	"github.com/gpuprobe/gpuprobe/receiver/internal/gputime"
	"runtime/debug"
	"time"

	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/internal/kernelfilter"
	"github.com/gpuprobe/gpuprobe/receiver/internal/clock"
	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pcommon"
)

// OtherKernel is the kernel name series beyond Options.MaxKernelNames fold into.
const OtherKernel = "other"

// Options configure a Translator.
type Options struct {
	MaxKernelNames     int           // series with their own kernel name
	MaxPendingLaunches int           // launches waiting for more records
	LaunchTimeout      time.Duration // longest wait for device/completion records
	CompletionGrace    time.Duration // wait after completion for late warps (default 20 ms)
	Sampling           SamplingOptions
	ExpectWarps        bool // device probes are attached: wait for warp records
	Filter             *kernelfilter.Filter
	Demangle           func(string) string // mangled → span name (default identity)
	ProcessName        func(pid uint32) string
	Clock              *clock.Mapper
	Metrics            MetricOptions
	Process            ProcessOptions
	Host               HostOptions
	Windows            WindowOptions
	SpanLimit          SpanLimitOptions // limits::spans_per_second (spanlimit.go)
}

// SamplingOptions thin out the spans (metrics count every launch).
type SamplingOptions struct {
	OneIn       uint32             // keep 1 launch span in N
	MinDuration time.Duration      // drop launch spans shorter than this
	Traces      TracePolicyOptions // then bound the traces (tracepolicy.go)
}

// WindowOptions configure the use of driver windows (windows.go).
type WindowOptions struct {
	// Wait is how long a launch waits for its driver window while its
	// client's windows are on (windows::wait; 0: DefaultWindowWait,
	// negative: not at all).
	Wait time.Duration
	// OnState, if set, is called when a client's windows state changes,
	// with the client's peer pid (0: unknown).
	OnState func(pid uint32, s record.WindowState)
	// OnProbeOffset, if set, gets each probe offset as it is recorded in
	// gpuprobe.receiver.windows.probe_offset: edge and direction index
	// EdgeNames and DirectionNames.
	OnProbeOffset func(edge, direction int, secs float64)
	// GPUTime configures charging the windows of shared GPUs to their
	// processes (gpushares.go).
	GPUTime gputime.Options
	// Counters configures joining hardware-counter samples to the
	// windows (hwcounters.go).
	Counters CounterOptions
}

// MetricOptions shape the metric series.
type MetricOptions struct {
	PerThreadSeries bool // per-thread execution-count series for small grids
	MaxThreadSeries int  // ... of launches with at most this many threads, and at most this many per series
	// DurationBounds, if set, makes the duration histograms (kernel
	// execution, queue, host wait, warp execution and exit skew, memory
	// copy, host call) explicit-bucket ones with these upper bounds in
	// seconds, increasing; nil: exponential.
	DurationBounds []float64
}

// ProcessOptions configure the processes' resources and the bounds of
// their series (seriesStore).
type ProcessOptions struct {
	ServiceName string // service.name override of every resource
	HostName    string // host.name of every resource
	// Processes with series (default DefaultMaxProcesses), kernel and copy
	// series of all of them (default (MaxKernelNames+1) × (MaxDevices+1)),
	// and how long a process's series stay after it left (default
	// DefaultProcessRetention).
	MaxProcesses int
	MaxSeries    int
	Retention    time.Duration
	Budget       ClientBudget // what one client may make the translator hold (budget.go)
}

// HostOptions configure the handling of host probes (HostCall and
// KernelName records from HostProbeSource).
type HostOptions struct {
	HostProbes           bool          // host probes are attached: shim launches wait for their thread's host calls from the start
	HostCallGrace        time.Duration // longest wait of a host call for the records it joins with (default 100 ms)
	MaxHostCalls         int           // bound of each per-process queue of host calls (default 4096)
	NoApproximateKernels bool          // no approximate kernel spans for processes without the shim
	NoShimLaunchCalls    bool          // the host probes skip the launch entry points of processes with the shim: their launches wait for no host call
}

// Counters are the translator's own counts (self-telemetry): of records
// and launches, and of host calls.
type Counters struct {
	LaunchCounters
	HostCounters
	WindowCounters
	BudgetCounters
}

// LaunchCounters count records and the launches they make.
type LaunchCounters struct {
	RecordsRead      uint64 // records handed to Handle
	RecordsInvalid   uint64 // records that failed to decode
	LaunchesEmitted  uint64 // launches finished and turned into metrics
	LaunchesEvicted  uint64 // launches emitted early because MaxPendingLaunches was reached
	LaunchesExpired  uint64 // launches emitted after LaunchTimeout without all records
	LaunchesOrphan   uint64 // device records whose launch record never came
	LaunchesFilter   uint64 // launches of kernels excluded by kernels::include/exclude
	SpansSampledOut  uint64 // launch spans not emitted because of sampling
	NamesTruncated   uint64 // kernel names that arrived cut by their producer
	DevicesFolded    uint64 // device numbers (records) a client had not reported, folded into OtherDevice
	CalibrationsBad  uint64 // calibration records rejected (clock.Mapper.AddCalibration)
	SeriesFolded     uint64 // records counted in their process's overflow series: Options.Process.MaxSeries were made
	ProcessesFolded  uint64 // processes counted in the shared overflow resource: Options.Process.MaxProcesses had series
	ExecDuplicate    uint64 // device windows for a (non-graph) launch that already had one; replays of graph nodes are paired instead
	LaunchesCaptured uint64 // launch records of stream-captured launches (never run; shims before capture.c wrote them): dropped at their graph node's first cuGraphLaunch record
}

// HostCounters count host calls (host probes) and approximate spans.
type HostCounters struct {
	HostCalls          uint64 // host call records handled
	HostCallsMatched   uint64 // host launch calls nested with a shim launch
	HostCallsUnmatched uint64 // host launch calls of shim processes emitted alone after the grace
	HostCallsEvicted   uint64 // host calls handled before their time because a per-process bound was reached
	HostProcsEvicted   uint64 // processes whose host calls were flushed because maxHostProcs was reached
	ApproxSpans        uint64 // approximate kernel spans (shim-less launch closed by a sync)
	ApproxUnclosed     uint64 // shim-less launches no sync closed within LaunchTimeout
	ApproxCaptured     uint64 // shim-less launch calls into a capturing stream: graph nodes, emitted as host calls without a kernel span
	ApproxGraphs       uint64 // approximate graph spans (shim-less graph launch closed by a sync)
}

// TruncatedMarker ends a kernel name that its producer had to cut.
const TruncatedMarker = "…"

type srcKey struct {
	src uint32
	id  uint64
}

type kernel struct {
	mangled string
	hash    uint32 // record.NameHash of the name its KernelName record carried (0: none came)
	name    string // demangled
	series  *series
	include bool
	live    int         // pending launches bound to it (launch.bind), which keep it in its client's handles
	trace   kernelTrace // its head bucket and running median (tracepolicy.go)
	refused bool        // its name found no room in its client's budget: counted under "other" (budget.go)
}

// Translator decodes records and routes them to the parts that own the
// state: launchTable (pending launches), graphTable (graph node replays),
// clientTable (per-source state, stream gaps), hostTable (host calls and
// the shim-less approximation), seriesStore (metric series) and spanOut
// (spans). It keeps the counters and options they all read.
type Translator struct {
	o        Options
	counters Counters
	start    pcommon.Timestamp
	dec      decoder // decode scratch

	clients  *clientTable // per-client state (client.go)
	launches *launchTable // pairing: pending launches, graph runs, windows, host calls (launches.go, lifecycle.go, times.go)
	series   *seriesStore // emission: metric series (series.go, metrics.go)
	spans    *spanOut     // emission: spans built since the last TakeTraces (spans.go)
	shares   *gpuShares   // attribution of shared GPUs' time (gpushares.go), the Node's
	hw       *hwCounters  // hardware counters joined to windows (hwcounters.go), the Node's
	ownsNode bool         // this Translator writes the Node's GPU metrics
}

// decoder is the scratch space records are decoded into, one per type.
type decoder struct {
	dl record.Launch
	dw record.Warp
	de record.Exec
	dc record.Completion
	dk record.KernelName
	dm record.Memcpy
	ds record.Sync
	dt record.ThreadCount
	dd record.Device
	db record.Calibration
	dh record.HostCall
	dv record.Window
	dp record.SpanContext
	dq record.Stack
	dx record.WindowState
}

// New returns a Translator with a Node of its own.
func New(o Options) *Translator { return NewShard(o, NewNode(o)) }

// NewShard returns a Translator that shares node with the others made
// with it (node.go).
func NewShard(o Options, node *Node) *Translator {
	if o.MaxKernelNames < 1 {
		o.MaxKernelNames = config.DefaultMaxKernelNames
	}
	if o.MaxPendingLaunches < 1 {
		o.MaxPendingLaunches = config.DefaultMaxPendingLaunches
	}
	if o.LaunchTimeout <= 0 {
		o.LaunchTimeout = config.DefaultLaunchTimeout
	}
	if o.CompletionGrace <= 0 {
		o.CompletionGrace = 20 * time.Millisecond
	}
	if o.Sampling.OneIn < 1 {
		o.Sampling.OneIn = 1
	}
	if o.Demangle == nil {
		o.Demangle = func(s string) string { return s }
	}
	if o.Clock == nil {
		o.Clock = clock.New()
	}
	if o.Host.HostCallGrace <= 0 {
		o.Host.HostCallGrace = DefaultHostCallGrace
	}
	if o.Host.MaxHostCalls < 1 {
		o.Host.MaxHostCalls = DefaultMaxHostCalls
	}
	if o.Windows.Wait == 0 {
		o.Windows.Wait = DefaultWindowWait
	}
	if o.Process.MaxProcesses < 1 {
		o.Process.MaxProcesses = DefaultMaxProcesses
	}
	if o.Process.MaxSeries < 1 {
		o.Process.MaxSeries = defaultMaxSeries(o.MaxKernelNames)
	}
	if o.SpanLimit.Now == nil {
		o.SpanLimit.Now = time.Now
	}
	if o.Process.Retention <= 0 {
		o.Process.Retention = DefaultProcessRetention
	}
	t := &Translator{o: o, start: node.start}
	// The stages from the bottom up: each gets the ones below it that it
	// calls, never one beside or above it.
	opts, counters := &t.o, &t.counters
	res := &resourceBook{o: opts, peers: map[uint32]peerRes{}, procs: map[uint32]string{}, devices: map[uint32]map[uint32]string{}}
	t.series = &seriesStore{o: opts, counters: counters,
		names: map[string]string{}, procs: map[procKey]*procSeries{}, byUID: map[uint32]int{}, evictable: map[uint32]int{}}
	t.spans = &spanOut{o: opts, counters: counters, res: res,
		limit:    &spanLimit{o: &t.o.SpanLimit, start: t.start, byPID: map[uint32]*procRate{}},
		policy:   &tracePolicy{o: &t.o.Sampling.Traces, start: t.start, byPID: map[uint32]*procTrace{}, nt: &node.trace},
		examples: &exemplarBook{bySeries: map[*devSeries][]exemplar{}}}
	t.spans.resetTraces()
	t.launches = &launchTable{o: opts, counters: counters, spans: t.spans,
		pending: pendingSet{bySrc: map[uint32]*srcQueue{}},
		streams: streamTable{bySrc: map[uint32]map[streamSlot]*streamState{}},
		graphs:  &graphTable{o: opts, counters: counters, chains: map[srcKey]*replayChain{}},
		windows: &windowTable{o: opts, counters: counters, bySrc: map[uint32]*clientWindows{}, groups: groupTable{o: opts},
			cover: coverage{start: t.start, byPID: map[uint32]*procCoverage{}}},
		hosts: &hostTable{o: opts, counters: counters, start: t.start, spans: t.spans, series: t.series, dur: &node.hosts,
			procs: map[uint32]*hostProc{}, names: map[pidHandle]hostName{}}}
	t.shares = node.shares
	t.hw = node.hw
	t.spans.hw = node.hw
	t.spans.sym.Files = node.syms
	t.ownsNode = node.claim()
	t.series.shares = t.shares
	t.series.hw = t.hw
	t.clients = &clientTable{o: opts, counters: counters, series: t.series, res: res, byID: map[uint32]*client{}}
	return t
}

// Counters returns the translator's own counts.
func (t *Translator) Counters() Counters { return t.counters }

// Pending is the number of launches waiting for more records.
func (t *Translator) Pending() int { return t.launches.size() }

// Handle decodes one record from source src (one producer process
// connection) and folds it into the state. now is the wall clock, used for
// timeouts. An invalid record is counted and its error returned.
//
// A panic while folding a record (a bug: every record is decoded and
// checked first) is recovered, counted as invalid and returned as an
// *InternalError, so that one client's record cannot stop the collector.
func (t *Translator) Handle(src uint32, rec []byte, now time.Time) (err error) {
	t.counters.RecordsRead++
	t.spans.policy.now = now
	defer func() {
		if v := recover(); v != nil {
			t.counters.RecordsInvalid++
			err = &InternalError{Source: src, Value: v, Stack: debug.Stack()}
		}
	}()
	p, err := record.ParsePrefix(rec)
	if err == nil {
		err = t.handle(src, p.Type, rec, now)
	}
	if err != nil {
		t.counters.RecordsInvalid++
		return fmt.Errorf("source %d: %w", src, err)
	}
	return nil
}

var errUnknownType = errors.New("unknown record type")

// InternalError is a panic Handle recovered from: a bug in the translator,
// reported with the stack where it happened.
type InternalError struct {
	Source uint32 // the client whose record it was
	Value  any    // what was passed to panic
	Stack  []byte // the goroutine's stack at the recovery
}

// Error implements error.
func (e *InternalError) Error() string {
	return fmt.Sprintf("source %d: internal error handling a record: %v", e.Source, e.Value)
}

func (t *Translator) handle(src uint32, typ record.Type, rec []byte, now time.Time) error {
	switch typ {
	case record.TypeLaunch:
		if err := t.dec.dl.Decode(rec); err != nil {
			return err
		}
		t.clients.validate(src, &t.dec.dl.PID, &t.dec.dl.Device)
		k := t.clients.bindLaunch(src, &t.dec.dl)
		app := t.clients.spanOf(src, t.dec.dl.TID)
		app.stack = t.clients.takeStack(src, t.dec.dl.TID, t.dec.dl.LaunchID)
		t.launches.onLaunch(src, &t.dec.dl, k, app, now)
	case record.TypeStack:
		if err := t.dec.dq.Decode(rec); err != nil {
			return err
		}
		t.clients.validate(src, &t.dec.dq.PID)
		t.clients.onStack(src, &t.dec.dq)
	case record.TypeSpanContext:
		if err := t.dec.dp.Decode(rec); err != nil {
			return err
		}
		t.clients.validate(src, &t.dec.dp.PID)
		t.clients.onSpanContext(src, &t.dec.dp)
	case record.TypeWarp:
		if err := t.dec.dw.Decode(rec); err != nil {
			return err
		}
		t.launches.onWarp(src, &t.dec.dw, now)
	case record.TypeExec:
		if err := t.dec.de.Decode(rec); err != nil {
			return err
		}
		t.launches.onExec(src, &t.dec.de, now)
	case record.TypeWindow:
		if err := t.dec.dv.Decode(rec); err != nil {
			return err
		}
		if src != HostProbeSource {
			k := t.launches.onWindow(src, &t.dec.dv, now)
			pid, devs := t.clients.clientOf(src).peer.PID, t.clients.res.devicesOf(src)
			t.shares.add(src, pid, devs, &t.dec.dv, k, t.o.Clock.ClientMonoToReal, now)
			t.hw.addWindow(gpuID(devs, src, t.dec.dv.Device), pid, t.dec.dv.Device, kernelName(k), &t.dec.dv)
		}
	case record.TypeWindowState:
		if err := t.dec.dx.Decode(rec); err != nil {
			return err
		}
		if src != HostProbeSource {
			t.launches.windows.onWindowState(src, t.clients.clientOf(src).peer.PID, &t.dec.dx)
		}
	case record.TypePatch:
		var pa record.Patch // not in t.dec: small, and rare (one per module)
		if err := pa.Decode(rec); err != nil {
			return err
		}
		t.clients.validate(src, &pa.PID)
		if src != HostProbeSource {
			t.launches.windows.cover.onPatch(pa.PID, &pa)
		}
	case record.TypeCompletion:
		if err := t.dec.dc.Decode(rec); err != nil {
			return err
		}
		t.clients.validate(src, nil, &t.dec.dc.Device)
		t.launches.onCompletion(src, &t.dec.dc, now)
	case record.TypeKernelName:
		if err := t.dec.dk.Decode(rec); err != nil {
			return err
		}
		if src == HostProbeSource {
			t.launches.hosts.onKernelName(&t.dec.dk)
		} else {
			t.clients.onKernelName(src, &t.dec.dk)
		}
	case record.TypeCalibration:
		if err := t.dec.db.Decode(rec); err != nil {
			return err
		}
		if err := t.o.Clock.AddCalibration(src, t.dec.db.Device, t.dec.db.GPUNS, t.dec.db.MonoNS, t.dec.db.RealtimeNS); err != nil {
			t.counters.CalibrationsBad++
			return fmt.Errorf("record %s: %w", typ, err)
		}
	case record.TypeMemcpy:
		if err := t.dec.dm.Decode(rec); err != nil {
			return err
		}
		t.clients.validate(src, &t.dec.dm.PID, &t.dec.dm.Device)
		if src != HostProbeSource {
			t.launches.streams.count(slotOf(src, t.dec.dm.Device, t.dec.dm.Stream, t.dec.dm.TID))
		}
		t.onMemcpy(src, &t.dec.dm)
	case record.TypeSync:
		if err := t.dec.ds.Decode(rec); err != nil {
			return err
		}
		t.clients.validate(src, &t.dec.ds.PID, &t.dec.ds.Device)
		t.spans.onSync(src, &t.dec.ds, t.clients.spanOf(src, t.dec.ds.TID))
	case record.TypeThreadCount:
		if err := t.dec.dt.Decode(rec); err != nil {
			return err
		}
		proc := t.clients.procOf(src)
		t.launches.onThreadCount(src, &t.dec.dt, proc)
	case record.TypeDevice:
		if err := t.dec.dd.Decode(rec); err != nil {
			return err
		}
		t.clients.onDevice(t.clients.clientOf(src), &t.dec.dd)
	case record.TypeHostCall:
		if err := t.dec.dh.Decode(rec); err != nil {
			return err
		}
		t.clients.validate(src, &t.dec.dh.PID)
		t.spans.res.processName(t.dec.dh.PID) // while the process is alive: spans are built later
		t.launches.onHostCall(&t.dec.dh, now)
	case record.TypeCounterSet, record.TypeCounterSample:
		return t.hw.onRecord(src, typ, rec)
	default:
		return fmt.Errorf("record %s: %w", typ, errUnknownType)
	}
	return nil
}
