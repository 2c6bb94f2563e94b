package translate

import (
	"time"

	"github.com/gpuprobe/gpuprobe/receiver/internal/exphist"
	"go.opentelemetry.io/collector/pdata/pcommon"
)

// seriesStore owns the metric series, one set per process (procSeries, a
// resource of its own): per kernel name and device, per memory copy kind
// and device. Its bounds:
//   - kernel names: the first Options.MaxKernelNames distinct names of
//     each process have series of their own, its later ones fold into its
//     "other" (one process's names never fold another's), and at most
//     maxProcNameBytes bytes of them (budget.go);
//   - series: at most Options.Process.MaxSeries (kernel name, device) and (copy
//     kind, device) series in all processes, a share of them per process
//     and per uid (budget.go), each process's beyond them counted in its
//     overflow series ("other" on device -1, per kind for copies;
//     Counters.SeriesFolded);
//   - processes: at most Options.Process.MaxProcesses; a process beyond them, when
//     no gone process can make room, counts in one shared overflow resource
//     (Counters.ProcessesFolded).
//
// A process's series stay Options.Process.Retention after its last client
// disconnected, then go.
type seriesStore struct {
	o        *Options
	counters *Counters

	names     map[string]string // mangled → demangled, bounded by maxNameCache
	procs     map[procKey]*procSeries
	order     []*procSeries  // procs in creation order, for stable output
	overflow  *procSeries    // processes beyond MaxProcesses (nil until needed)
	nseries   int            // series of all processes, ≤ MaxSeries
	byUID     map[uint32]int // series of each uid's processes, ≤ MaxSeries/uidShareDiv
	nameBytes int            // bytes of the names cache
	evictable map[uint32]int // processes of each uid that left and were emitted since (evictGone's candidates)
	nextSweep time.Time
	shares    *gpuShares  // GPU time per process (appendProcs)
	hw        *hwCounters // hardware counters per process and kernel (appendProcs)
}

// procKey identifies a process: its pid and start time, which a client
// cannot choose; or, where the collector could not read them, the source.
type procKey struct {
	pid   uint32
	start uint64
	src   uint32
}

// procSeries is one process's series and resource.
type procSeries struct {
	key     procKey
	res     pcommon.Map
	start   pcommon.Timestamp // start of its cumulative series
	refs    int               // its connected clients
	goneAt  time.Time         // when refs went to 0
	flushed bool              // emitted since goneAt: evicting it loses nothing
	uid     uint32            // its uid (connection credentials), whose share it draws on
	held    procHeld          // what it holds against its shares (budget.go)

	byName  map[string]*series // kernel name → its series (≤ MaxKernelNames)
	other   *series
	order   []*series // series in creation order
	memcpy  map[memcpyKey]*memcpySeries
	mcOrder []memcpyKey
	devices map[uint32]string // device ordinal → UUID, as its clients reported them (≤ MaxDevices)
	store   *seriesStore
}

// series is one kernel name's metrics in one process, per device.
type series struct {
	name   string
	devs   []*devSeries
	proc   *procSeries
	frames *frameCounts // its sampled launches by top Python frame (frames.go)
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

// launchFigures are the figures of one emitted launch; a have* false:
// unknown.
type launchFigures struct {
	execNS, queueNS, hostWaitNS     uint64
	haveExec, haveQueue, haveWaited bool
}

// record counts one emitted launch with its figures.
func (ds *devSeries) record(f launchFigures) {
	ds.launches++
	if f.haveExec {
		ds.exec.Record(float64(f.execNS) / 1e9)
	}
	if f.haveQueue {
		ds.queue.Record(float64(f.queueNS) / 1e9)
	}
	if f.haveWaited {
		ds.hostWait.Record(float64(f.hostWaitNS) / 1e9)
	}
}

// Defaults of the process bounds.
const (
	DefaultMaxProcesses     = 1024
	DefaultProcessRetention = 5 * time.Minute
)

// defaultMaxSeries is the bound series had when they were not per
// process: every kernel name and "other" on every device and device -1.
func defaultMaxSeries(maxKernelNames int) int { return (maxKernelNames + 1) * (MaxDevices + 1) }

// dev returns the per-device aggregate of a series; past MaxSeries, its
// process's overflow aggregate.
func (s *series) dev(d uint32) *devSeries {
	for _, ds := range s.devs {
		if ds.device == d {
			return ds
		}
	}
	p := s.proc
	if !p.take() {
		return p.overflowDev()
	}
	ds := p.newDev(d)
	s.devs = append(s.devs, ds)
	return ds
}

// take counts one more series of p, false (and a fold counted) when p
// holds its share of MaxSeries, its uid the uid's, or the node all of
// them (shareFull).
func (p *procSeries) take() bool {
	st := p.store
	if st.shareFull(p) {
		st.counters.SeriesFolded++
		return false
	}
	st.nseries++
	st.byUID[p.uid]++
	p.held.series++
	return true
}

// overflowDev is p's series beyond MaxSeries: "other" on OtherDevice,
// made without counting.
func (p *procSeries) overflowDev() *devSeries {
	for _, ds := range p.other.devs {
		if ds.device == OtherDevice {
			return ds
		}
	}
	ds := p.newDev(OtherDevice)
	p.other.devs = append(p.other.devs, ds)
	return ds
}

// newDev makes a device's series, its duration histograms explicit-bucket
// where Options.Metrics.DurationBounds says so.
func (p *procSeries) newDev(d uint32) *devSeries {
	ds := &devSeries{device: d}
	for _, h := range []*exphist.Hist{&ds.exec, &ds.queue, &ds.hostWait, &ds.warpExec, &ds.warpSkew} {
		h.SetBounds(p.store.o.Metrics.DurationBounds)
	}
	return ds
}

// seriesFor returns p's series of a kernel name: "other" for a name beyond
// p's first MaxKernelNames.
func (p *procSeries) seriesFor(name string) *series {
	if s, ok := p.byName[name]; ok {
		return s
	}
	if len(p.byName) >= p.store.o.MaxKernelNames {
		return p.other
	}
	if p.held.nameBytes+len(name) > maxProcNameBytes {
		p.store.counters.NamesRefused++
		return p.other
	}
	p.held.nameBytes += len(name)
	s := &series{name: name, proc: p}
	p.byName[name] = s
	p.order = append(p.order, s)
	return s
}

// of returns the series of kernel k, p's "other" for nil (launch unknown).
func (p *procSeries) of(k *kernel) *series {
	if k == nil {
		return p.other
	}
	return k.series
}

// putDevice records the UUID of a device ordinal of p.
func (p *procSeries) putDevice(d uint32, uuid string) {
	if _, ok := p.devices[d]; ok || len(p.devices) < MaxDevices {
		p.devices[d] = uuid
	}
}

// acquire returns the series of process key of uid, made with resource
// res() if new, counting one more client of it.
func (st *seriesStore) acquire(key procKey, uid uint32, res func() pcommon.Map) *procSeries {
	p := st.procs[key]
	switch {
	case p != nil:
	case len(st.procs) < st.o.Process.MaxProcesses || st.evictGone(func(*procSeries) bool { return true }):
		p = st.newProc(key, res())
		p.uid = uid
		st.procs[key] = p
		st.order = append(st.order, p)
	default:
		st.counters.ProcessesFolded++
		if st.overflow == nil {
			st.overflow = st.newProc(procKey{}, st.o.overflowResource())
		}
		p = st.overflow
	}
	if p.refs == 0 && p.flushed {
		st.countEvictable(p, -1)
	}
	p.refs++
	p.goneAt, p.flushed = time.Time{}, false
	return p
}

func (st *seriesStore) newProc(key procKey, res pcommon.Map) *procSeries {
	// Each process's series start when it is first met (again, after its
	// series were dropped: the backend sees a new start, not a reset).
	p := &procSeries{key: key, res: res, start: pcommon.NewTimestampFromTime(time.Now()),
		byName: map[string]*series{}, memcpy: map[memcpyKey]*memcpySeries{}, devices: map[uint32]string{}, store: st}
	p.other = &series{name: OtherKernel, proc: p}
	return p
}

// release counts one client of p less.
func (st *seriesStore) release(p *procSeries, now time.Time) {
	if p.refs--; p.refs == 0 {
		p.goneAt = now
	}
}

// evictGone drops the process that left first among those emitted since
// that which is says so of, to make room; false when there is none.
func (st *seriesStore) evictGone(which func(*procSeries) bool) bool {
	if len(st.evictable) == 0 {
		return false
	}
	var oldest *procSeries
	for _, p := range st.order {
		if p.refs == 0 && p.flushed && which(p) && (oldest == nil || p.goneAt.Before(oldest.goneAt)) {
			oldest = p
		}
	}
	if oldest == nil {
		return false
	}
	st.drop(func(p *procSeries) bool { return p == oldest })
	return true
}

// sweep drops the processes gone for ProcessRetention, at most once a
// second.
func (st *seriesStore) sweep(now time.Time) {
	if now.Before(st.nextSweep) {
		return
	}
	st.nextSweep = now.Add(time.Second)
	st.drop(func(p *procSeries) bool { return p.refs == 0 && now.Sub(p.goneAt) >= st.o.Process.Retention })
}

// drop forgets the processes gone says so of.
func (st *seriesStore) drop(gone func(*procSeries) bool) {
	keep := st.order[:0]
	for _, p := range st.order {
		if gone(p) {
			delete(st.procs, p.key)
			if p.refs == 0 && p.flushed {
				st.countEvictable(p, -1)
			}
			st.nseries -= p.held.series
			if st.byUID[p.uid] -= p.held.series; st.byUID[p.uid] <= 0 {
				delete(st.byUID, p.uid)
			}
			continue
		}
		keep = append(keep, p)
	}
	clear(st.order[len(keep):])
	st.order = keep
}

// Processes is the number of processes with metric series (the overflow
// resource not counted).
func (t *Translator) Processes() int { return len(t.series.procs) }
