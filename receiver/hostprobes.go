package receiver

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/hostprobe"
	"github.com/gpuprobe/gpuprobe/gpuprobe/hostprobe/discover"
	"github.com/gpuprobe/gpuprobe/gpuprobe/hostprobe/userprog"
	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/receiver/internal/progmaps"
	"github.com/gpuprobe/gpuprobe/receiver/internal/translate"
	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// maxHostBytes bounds the host-probe records read from the kernel and not
// yet handed to the translator (the poll loop takes them every poll); above
// it records are dropped and counted.
const maxHostBytes = 64 << 20

// hostSide is everything gpuprobe runs in Linux: the built-in uprobes on
// libcudart/libcuda (host_probes), the library watcher that attaches them,
// and the uprobe programs of the configured objects with their kernel maps.
// Nothing here is required: what the machine cannot do is reported once
// and the rest keeps working.
type hostSide struct {
	log    *zap.Logger
	probes *hostprobe.Probes // nil: host_probes off or unavailable
	procs  *procProbes       // nil: the shim-covered probes are attached for every process
	sets   []*userprog.Set   // configured objects with host programs
	maps   *progmaps.Instance
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	buf      []byte // records read, waiting for the poll loop
	spare    []byte
	dropped  uint64            // records dropped because buf was full
	libs     map[string]string // attached file → what was attached (status)
	failed   uint64            // attach failures
	unusable string            // why host probes are off, if they are
}

// startHost loads and attaches what the configuration asks for in Linux.
// It never fails the receiver: a missing kernel feature or privilege is
// logged once, clearly, and the host side stays off.
func startHost(log *zap.Logger, cfg *config.Config, objs []*jit.Object) *hostSide {
	h := &hostSide{log: log, libs: map[string]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.loadPrograms(cfg, objs)
	if cfg.HostProbes.Enabled {
		// Without the /proc scan no process is found to probe one by one:
		// the shim-covered entry points are probed everywhere then.
		split := cfg.HostProbes.ShimProcesses == config.ShimProcessesSkip && cfg.HostProbes.ScanInterval != 0
		p, err := hostprobe.Load(hostprobe.Options{ShimCoveredPerProcess: split, MaxProcesses: cfg.HostProbes.MaxProcesses})
		switch {
		case err != nil:
			h.unusable = err.Error()
			log.Warn("gpuprobe: host probes unavailable; device telemetry and the shim's records keep working",
				zap.Error(err), zap.Bool("unsupported", errors.Is(err, hostprobe.ErrUnsupported)))
		default:
			h.probes = p
			h.wg.Add(1)
			go h.read(ctx)
			if split {
				h.procs = newProcProbes(p, log)
				h.wg.Add(1)
				go func() {
					defer h.wg.Done()
					h.procs.run(ctx)
				}()
			}
		}
	}
	if h.probes != nil || len(h.sets) > 0 {
		if err := h.watch(ctx, cfg); err != nil {
			log.Warn("gpuprobe: host library discovery unavailable", zap.Error(err))
		}
	}
	return h
}

// loadPrograms loads the uprobe/uretprobe programs of programs[] into
// Linux; objs[i] is programs[i]'s object (progmaps.ReadObjects).
func (h *hostSide) loadPrograms(cfg *config.Config, objs []*jit.Object) {
	var kms []progmaps.KernelMap
	for i, pc := range cfg.Programs {
		set, err := userprog.Load(pc.Path, objs[i], userprog.Options{Attach: pc.Attach,
			Resolve: userprog.SearchDirs(cfg.HostProbes.LibraryPaths...)})
		if errors.Is(err, userprog.ErrNoHostPrograms) {
			continue
		}
		if err != nil {
			h.log.Error("gpuprobe: host programs not loaded; their GPU halves see their kernel maps as absent",
				zap.String("key", fmt.Sprintf("programs[%d]::path", i)), zap.String("path", pc.Path), zap.Error(err))
			continue
		}
		h.sets = append(h.sets, set)
		for _, n := range set.Notes() {
			h.log.Info("gpuprobe: "+n, zap.String("object", pc.Path))
		}
		for _, p := range set.Programs() {
			f := []zap.Field{zap.String("object", pc.Path), zap.String("program", p.Name), zap.String("section", p.Section),
				zap.Strings("attached", p.Attached)}
			switch {
			case p.Skipped:
				h.log.Warn("gpuprobe: host program skipped; the object's other programs still run",
					zap.String("object", pc.Path), zap.String("program", p.Name), zap.Error(p.Errors[0]))
			case len(p.Errors) > 0:
				h.log.Warn("gpuprobe: host program partly attached", append(f, zap.Errors("errors", p.Errors))...)
			default:
				h.log.Info("gpuprobe: host program attached", f...)
			}
		}
		for _, m := range set.Maps() {
			kms = append(kms, progmaps.KernelMap(m))
		}
	}
	if len(kms) == 0 {
		return
	}
	in, err := progmaps.NewHostInstance(kms, time.Now())
	if err != nil {
		h.log.Error("gpuprobe: host programs' maps not exported", zap.Error(err))
		return
	}
	h.maps = in
}

// watch attaches the built-in probes and the user programs to every CUDA
// library found now or later (config paths, ldconfig, /proc).
func (h *hostSide) watch(ctx context.Context, cfg *config.Config) error {
	opts := discover.Options{
		Interval: cfg.HostProbes.ScanInterval,
		Paths:    cfg.HostProbes.LibraryPaths,
		Ldconfig: cfg.HostProbes.Ldconfig,
		NoProcs:  cfg.HostProbes.ScanInterval == 0,
		Logger:   h.log,
	}
	if h.procs != nil {
		opts.Processes = h.procs.scanned
	}
	w, err := discover.NewWatcher(opts)
	if err != nil {
		return err
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		_ = w.Run(ctx, h.found)
	}()
	return nil
}

// found attaches to one library the watcher reported.
func (h *hostSide) found(lib discover.Library) {
	var what []string
	if h.probes != nil {
		a, err := h.probes.AttachInode(lib.Path, lib.Dev, lib.Ino)
		if err != nil {
			h.mu.Lock()
			h.failed++
			h.mu.Unlock()
			h.log.Warn("gpuprobe: host probes not attached", zap.String("library", lib.String()), zap.Error(err))
		} else {
			what = append(what, fmt.Sprintf("%d CUDA entry points", len(a.Attached)))
			f := []zap.Field{zap.String("path", lib.Path), zap.String("kind", lib.Kind.String()),
				zap.String("source", lib.Source), zap.Int("symbols", len(a.Attached))}
			if len(a.Missing) > 0 {
				f = append(f, zap.Int("missing", len(a.Missing)), zap.Bool("stripped", a.Stripped))
			}
			h.log.Info("gpuprobe: host probes attached", f...)
		}
	}
	base := filepath.Base(lib.Path)
	for _, set := range h.sets {
		done := map[string]bool{}
		for _, p := range set.Programs() {
			b := filepath.Base(p.Binary)
			if done[p.Binary] || filepath.IsAbs(p.Binary) || !strings.HasPrefix(base, b) {
				continue
			}
			done[p.Binary] = true
			n, err := set.AttachFile(p.Binary, lib.Path)
			if err != nil {
				h.log.Warn("gpuprobe: host program not attached", zap.String("object", set.Path()),
					zap.String("library", lib.Path), zap.Error(err))
				continue
			}
			if n > 0 {
				what = append(what, fmt.Sprintf("%d programs of %s", n, filepath.Base(set.Path())))
			}
		}
	}
	if len(what) > 0 {
		h.mu.Lock()
		h.libs[lib.Path] = strings.Join(what, ", ")
		h.mu.Unlock()
	}
}

// shimConnected and shimDisconnected tell the per-process probes of a
// shim session of pid (agent connect and disconnect).
func (h *hostSide) shimConnected(pid int32) {
	if h != nil && h.procs != nil {
		h.procs.connected(pid)
	}
}

func (h *hostSide) shimDisconnected(pid int32) {
	if h != nil && h.procs != nil {
		h.procs.disconnected(pid)
	}
}

// read moves records from the kernel's ring buffer to buf until ctx ends.
func (h *hostSide) read(ctx context.Context) {
	defer h.wg.Done()
	var rec []byte
	for {
		var err error
		rec, err = h.probes.Read(ctx, rec[:0])
		if errors.Is(err, hostprobe.ErrClosed) || (err != nil && ctx.Err() != nil) {
			return
		}
		if err != nil {
			continue // counted in Stats
		}
		h.mu.Lock()
		if len(h.buf)+len(rec) > maxHostBytes {
			h.dropped++
		} else {
			h.buf = append(h.buf, rec...)
		}
		h.mu.Unlock()
	}
}

// take returns the records read since the last call; the slice is valid
// until the next call.
func (h *hostSide) take() []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.buf
	h.buf, h.spare = h.spare[:0], b
	return b
}

// offers are the kernel maps shared with the GPU halves of the configured
// objects, for every client: the BPF map's fd, which the shim maps and
// registers with the device.
func (h *hostSide) offers() []agentwire.Offer {
	var out []agentwire.Offer
	for _, set := range h.sets {
		for _, m := range set.SharedMaps() {
			out = append(out, agentwire.Offer{Role: agentwire.RoleKernelMap, Name: m.Name, FD: m.Map.FD(), Size: m.Size, Kind: shm.KindArray})
		}
	}
	return out
}

// hostStats are the host side's numbers for the self-metrics.
type hostStats struct {
	libraries, failed, recordsRead, recordsDropped, programs uint64
	procsProbed, procsCapped                                 uint64
}

func (h *hostSide) stats() hostStats {
	var s hostStats
	if h == nil {
		return s
	}
	h.mu.Lock()
	s.libraries, s.failed, s.recordsDropped = uint64(len(h.libs)), h.failed, h.dropped
	h.mu.Unlock()
	s.procsProbed, s.procsCapped = h.procs.counts()
	if h.probes != nil {
		ps := h.probes.Stats()
		s.recordsRead = ps.Read
		s.recordsDropped += ps.Dropped + ps.DecodeErrors
	}
	for _, set := range h.sets {
		for _, p := range set.Programs() {
			if len(p.Attached) > 0 {
				s.programs++
			}
		}
	}
	return s
}

// close detaches everything and waits for the goroutines.
func (h *hostSide) close() error {
	if h == nil {
		return nil
	}
	h.cancel()
	var errs []error
	if h.probes != nil {
		errs = append(errs, h.probes.Close())
	}
	h.wg.Wait()
	if h.maps != nil {
		errs = append(errs, h.maps.Close())
	}
	for _, s := range h.sets {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

// pollHost hands the host-probe records to the translator, reads the host
// programs' ring buffers and refreshes every client's clock offset.
func (r *gpuReceiver) pollHost(now time.Time, sources []*source) {
	if r.host == nil {
		return
	}
	if b := r.host.take(); len(b) > 0 {
		k := len(r.sh.trs)
		_ = record.Split(b, func(p record.Prefix, rec []byte) error {
			// The shard of the record's process, as its sources'
			// (shardOf): the host calls join its launches there.
			tr := r.sh.trs[shardOf(hostRecordPID(p.Type, rec), 0, k)]
			_ = tr.Handle(translate.HostProbeSource, rec, now) // invalid records are counted
			return nil
		})
	}
	if r.host.maps != nil {
		r.maps.col.ReadRings(r.host.maps, now, maxReadPerPoll)
	}
	mono, err := readMono()
	if err != nil {
		return
	}
	r.mu.Lock() // s.clock is set under it (onConnect)
	defer r.mu.Unlock()
	for _, s := range sources {
		if s.clock == nil {
			continue
		}
		if off, ok := r.mapper.MonoMinusGPU(s.id, r.sh.of(s).LastDevice(s.id), mono); ok {
			_ = s.clock.StoreUint64(0, 0, uint64(off))
		}
	}
}

// hostRecordPID returns the process of a host-probe record of type typ
// (0: none or undecodable: the first shard's).
func hostRecordPID(typ record.Type, rec []byte) uint32 {
	switch typ {
	case record.TypeHostCall:
		var c record.HostCall
		if c.Decode(rec) == nil {
			return c.PID
		}
	case record.TypeKernelName:
		var k record.KernelName
		if k.Decode(rec) == nil {
			return k.PID
		}
	case record.TypeSync:
		var y record.Sync
		if y.Decode(rec) == nil {
			return y.PID
		}
	case record.TypeMemcpy:
		var m record.Memcpy
		if m.Decode(rec) == nil {
			return m.PID
		}
	case record.TypeLaunch:
		var l record.Launch
		if l.Decode(rec) == nil {
			return l.PID
		}
	}
	return 0
}

// newClockRegion creates a client's clock region: one i64, CLOCK_MONOTONIC
// − %globaltimer, that the client's GPU programs add to %globaltimer for
// bpf_ktime_get_ns (0 until the first calibration).
func newClockRegion() (*shm.Array, error) {
	reg, err := shm.Create(shm.Spec{Kind: shm.KindArray, ValueSize: 8, MaxEntries: 1, Name: "gpuprobe-clock"})
	if err != nil {
		return nil, err
	}
	a, err := shm.NewArray(reg)
	if err != nil {
		reg.Close()
		return nil, err
	}
	return a, nil
}

// readMono reads CLOCK_MONOTONIC.
func readMono() (uint64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, err
	}
	return uint64(ts.Nano()), nil
}

// hostSelfMetrics are the host side's self-metrics.
func (r *gpuReceiver) hostSelfMetrics() []translate.SelfMetric {
	s := r.host.stats()
	c := r.sh.counters()
	return []translate.SelfMetric{
		{Name: "gpuprobe.receiver.host_probes.libraries", Unit: "{library}", Desc: "CUDA libraries and executables the host probes or host programs are attached to.", Value: s.libraries},
		{Name: "gpuprobe.receiver.host_probes.attach_failures", Unit: "{library}", Desc: "Libraries the host probes could not be attached to.", Value: s.failed},
		{Name: "gpuprobe.receiver.host_probes.processes", Unit: "{process}", Desc: "Processes without the shim given their own probes on the entry points the shim records (launches, syncs).", Value: s.procsProbed},
		{Name: "gpuprobe.receiver.host_probes.processes_unprobed", Unit: "{process}", Desc: "Processes without the shim left without those probes: host_probes::max_processes reached.", Value: s.procsCapped},
		{Name: "gpuprobe.receiver.host_calls.read", Unit: "{record}", Desc: "Records read from the host probes' kernel ring buffer.", Value: s.recordsRead},
		{Name: "gpuprobe.receiver.host_calls.dropped", Unit: "{record}", Desc: "Host-probe records dropped (kernel ring buffer full, undecodable, or the collector behind).", Value: s.recordsDropped},
		{Name: "gpuprobe.receiver.host_calls.unmatched", Unit: "{call}", Desc: "Host launch calls of processes with the shim that matched no launch record.", Value: c.HostCallsUnmatched},
		{Name: "gpuprobe.receiver.host_programs.attached", Unit: "{program}", Desc: "uprobe programs of the configured objects attached to at least one file.", Value: s.programs},
	}
}
