package receiver

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/probes"
	"github.com/gpuprobe/gpuprobe/receiver/internal/clock"
	"github.com/gpuprobe/gpuprobe/receiver/internal/demangle"
	"github.com/gpuprobe/gpuprobe/receiver/internal/metadata"
	"github.com/gpuprobe/gpuprobe/receiver/internal/progmaps"
	"github.com/gpuprobe/gpuprobe/receiver/internal/translate"
	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// The names ring: every client also gets a ring whose slots hold the
// largest KernelName record, so long C++ kernel names are never cut (see
// record/include/gpuprobe_record.h). It is read before the launch ring.
const (
	RoleNameRing     = agentwire.RoleNameRing                        // agent descriptor role of the names ring
	NameRingSlotSize = shm.SlotHeaderSize + record.MaxKernelNameSize // bytes per slot
	NameRingSlots    = 256                                           // slots (≈ 1 MiB per client)
)

// gpuReceiver is the instance shared by the traces and metrics handles.
type gpuReceiver struct {
	cfg    *config.Config
	set    receiver.Settings
	log    *zap.Logger
	tel    *metadata.TelemetryBuilder
	mu     sync.Mutex // guards out, srcs, maps.retired and counts.disconnected
	out    consumers
	srcs   sourceSet // clients' rings (source.go)
	sh     shards    // the poll workers' translators (shards.go)
	mapper *clock.Mapper
	run    running
	counts pollCounts
	patch  patchState // PATCH requests (patch.go)
	maps   userMaps   // the configured programs' user maps
	host   *hostSide  // uprobes and host programs in Linux
	hc     *hostCalls // GPU programs' host calls (hostcalls.go)
}

// consumers are the pipelines the receiver feeds, and the internal
// telemetry.
type consumers struct {
	traces  consumer.Traces
	metrics consumer.Metrics
	view    metricView     // what of the metrics the configuration keeps
	self    *selfTelemetry // the self-metrics' observable instruments (selftel.go; set at start)
}

// running is what start sets going and stop ends.
type running struct {
	agent  *agent.Server
	cancel context.CancelFunc
	done   chan struct{}
	flushc chan flushRequest // final flushes asked of the poll loop (shutdown.go)
	stopBy time.Time         // the last pass's deadline, set before cancel
	down   shutdownState     // what the handles' Shutdowns share (shutdown.go)
}

// pollCounts are the receiver's own counts of what the poll loop lost.
type pollCounts struct {
	dropped uint64 // records dropped (ring full, oversize, stalled, invalid, left unread)
	corrupt uint64 // records whose length exceeded their slot
	// disconnected counts clients let go for breaking a ring invariant.
	disconnected uint64
	spansErr     uint64
	undelivered  uint64 // what the shutdown did not deliver by its deadline (shutdown.go)
}

// userMaps are the GPU maps of the configured programs and what the poll
// loop reads from them (poll goroutine only, but retired: mu).
type userMaps struct {
	defs    []*progmaps.Def      // GPU maps of the configured programs
	col     *progmaps.Collector  // user maps → pdata
	retired []*progmaps.Instance // map regions of gone applications, reported once more then closed
	stats   progmaps.Counters    // last counters seen, for deltas
}

func newReceiver(set receiver.Settings, cfg *config.Config) (*gpuReceiver, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("gpuprobe: invalid config: %w", err)
	}
	return &gpuReceiver{cfg: cfg, set: set, log: set.Logger, hc: &hostCalls{}}, nil
}

func (r *gpuReceiver) setTraces(c consumer.Traces) {
	r.mu.Lock()
	r.out.traces = c
	r.mu.Unlock()
}

func (r *gpuReceiver) setMetrics(c consumer.Metrics) {
	r.mu.Lock()
	r.out.metrics = c
	r.mu.Unlock()
}

// start creates the rings, reports the driver status once, and starts the
// poll loop.
func (r *gpuReceiver) start(_ context.Context, _ component.Host) error {
	filter, err := config.NewKernelFilter(r.cfg.Kernels)
	if err != nil {
		return err
	}
	tel, err := metadata.NewTelemetryBuilder(r.set.TelemetrySettings)
	if err != nil {
		return fmt.Errorf("gpuprobe: telemetry: %w", err)
	}
	objs, err := progmaps.ReadObjects(r.cfg.Programs)
	if err != nil {
		tel.Shutdown()
		return fmt.Errorf("gpuprobe: %w", err)
	}
	defs, err := progmaps.Load(r.cfg.Programs, objs, progmaps.Options{
		MaxThreads: r.cfg.Buffers.MaxThreads, MapEntries: r.cfg.Buffers.MapEntries})
	if err != nil {
		tel.Shutdown()
		return fmt.Errorf("gpuprobe: %w", err)
	}
	r.maps.defs = defs
	r.tel = tel
	r.patch.filter = filter
	if r.patch.patcher, err = r.newPatcher(objs); err != nil {
		tel.Shutdown()
		return err
	}
	setMemoryLimit(r.log, r.cfg.Agent.MaxPatchMemory)
	driver := detectDriver(r.cfg.HostProbes.LibraryPaths)
	logDriverOnce(r.log, driver, r.cfg)

	r.host = startHost(r.log, r.cfg, objs)
	r.srcs.res.hostName, _ = os.Hostname()
	r.out.self = newSelfTelemetry(metadata.Meter(r.set.TelemetrySettings), r.log)
	mapper := clock.New()
	r.mapper = mapper
	if off, err := monoOffset(); err == nil {
		mapper.SetMonoOffset(off)
	}
	r.sh = newShards(translate.Options{
		MaxKernelNames:     r.cfg.Limits.MaxKernelNames,
		MaxPendingLaunches: r.cfg.Limits.MaxPendingLaunches,
		LaunchTimeout:      r.cfg.Limits.LaunchTimeout,
		CompletionGrace:    2 * r.cfg.PollInterval,
		Sampling: translate.SamplingOptions{OneIn: r.cfg.Sampling.OneIn, MinDuration: r.cfg.Sampling.MinDuration,
			Traces: translate.TracePolicyOf(&r.cfg.Sampling)},
		ExpectWarps: r.cfg.Probes.KernelPhases && driver.found,
		Filter:      filter,
		Demangle:    demangle.Short,
		Clock:       mapper,
		Metrics: translate.MetricOptions{PerThreadSeries: r.cfg.Limits.PerThreadSeries,
			MaxThreadSeries: r.cfg.Limits.MaxThreadSeries, DurationBounds: r.cfg.Histograms.DurationBounds()},
		Process: translate.ProcessOptions{ServiceName: r.cfg.Resource.ServiceName, HostName: r.srcs.res.hostName,
			Budget: translate.ClientBudget{NameBytes: r.cfg.Limits.MaxKernelNameBytes}},
		Host: translate.HostOptions{
			HostProbes:           r.host.probes != nil,
			NoShimLaunchCalls:    r.host.procs != nil,
			HostCallGrace:        max(r.cfg.HostProbes.HostCallGrace, time.Nanosecond),
			NoApproximateKernels: !r.cfg.HostProbes.ApproximateKernels,
		},
		Windows: translate.WindowOptions{Wait: windowWait(r.cfg.Windows.Wait),
			OnState: (&windowReports{log: r.log, tel: tel}).state, OnProbeOffset: r.out.self.offsets.record,
			GPUTime: gpuTimeOptions(r.cfg.GPUTime), Counters: counterOptions(&r.cfg.Counters)},
		SpanLimit: translate.SpanLimitOptions{PerSecond: r.cfg.Limits.SpansPerSecond,
			OnCapped: r.spansCapped},
	}, pollWorkers(r))
	r.maps.col = progmaps.NewCollector(progmaps.CollectorOptions{
		MaxMapKeys:      r.cfg.Limits.MaxMapKeys,
		PerThreadSeries: r.cfg.Limits.PerThreadSeries,
		MaxThreadSeries: r.cfg.Limits.MaxThreadSeries,
		ServiceName:     r.cfg.Resource.ServiceName,
		Clock:           mapper,
		Device:          r.sh.first().LastDevice, // one shard where there are user maps (pollWorkers)
		Logger:          r.log,
		AdmitSpan:       r.sh.first().AdmitSpans,
	})
	if err := r.listen(); err != nil {
		r.tel.Shutdown()
		_ = r.host.close()
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.run.cancel, r.run.done, r.run.flushc = cancel, make(chan struct{}), make(chan flushRequest)
	go r.loop(ctx, mapper)
	return nil
}

// pollWorkers returns the poll workers to run: poll_workers (config.Workers),
// but one where user maps or host programs are on: the maps collector
// reads their regions beside a client's rings and asks a translator of
// its spans, so they need one translator. (The host probes' records go to
// the shard of their process: pollHost.)
func pollWorkers(r *gpuReceiver) int {
	if len(r.maps.defs) > 0 || (r.host != nil && r.host.maps != nil) {
		return 1
	}
	return r.cfg.Workers()
}

// listen starts the agent socket server: every client gets its own launch
// ring (buffers::ring_slots slots of buffers::slot_size bytes).
func (r *gpuReceiver) listen() error {
	mode, err := r.cfg.Agent.SocketFileMode()
	if err != nil {
		return err
	}
	// Creates a missing directory, refuses one others could write into.
	if err := config.EnsureSocketDir(r.cfg.Agent.Socket); err != nil {
		return fmt.Errorf("gpuprobe: %w", err)
	}
	r.srcs.bySess = map[uint32]*source{}
	srv, err := agent.Listen(agent.Options{
		Path: r.cfg.Agent.Socket, Mode: mode,
		AllowedUIDs: r.cfg.Agent.AllowedUIDs, AllowedGIDs: r.cfg.Agent.AllowedGIDs,
		MaxConnsPerUID: r.cfg.Agent.MaxConnectionsPerUID, IdleTimeout: r.cfg.Agent.IdleTimeout,
		ImageMemory: imageMemory(r.cfg.Agent.MaxPatchMemory), Logger: r.log,
		Rings:    agent.RingLimits{Memory: int64(r.cfg.Agent.MaxRingMemory), MemoryPerUID: int64(r.cfg.Agent.MaxRingMemoryPerUID)},
		Settings: r.settings(),
	}, agent.Callbacks{Connect: r.onConnect, Disconnect: r.onDisconnect, Patch: r.onPatch,
		PatchRefused: r.onPatchRefused, Welcomed: func(p *agent.Peer) { dropSessionFiles(r, p) }})
	if err != nil {
		return fmt.Errorf("gpuprobe: agent::socket %s: %w", r.cfg.Agent.Socket, err)
	}
	r.run.agent = srv
	return nil
}

// settings are what every client is asked to record besides launches:
// the configuration's (config.AgentSettings), and whether the SASS route
// has GPU programs.
func (r *gpuReceiver) settings() agentwire.Settings {
	st := r.cfg.AgentSettings()
	if st.Flags&agentwire.SettingSASS != 0 && r.patch.patcher != nil && r.patch.patcher.SASSPrograms() > 0 {
		st.Flags |= agentwire.SettingSASSPrograms
	}
	return st
}

func (r *gpuReceiver) onConnect(p *agent.Peer) ([]agentwire.Offer, error) {
	sizes, lease, err := reserveRings(r.cfg, r.log, p)
	if err != nil {
		return nil, err
	}
	ring, err := shm.CreateRing(r.cfg.Buffers.SlotSize, sizes.launch)
	if err != nil {
		return nil, fmt.Errorf("launch ring for pid %d: %w", p.PID, err)
	}
	ring.Region().OnClose(lease.Release)
	names, err := shm.CreateRing(NameRingSlotSize, sizes.names)
	if err != nil {
		ring.Close()
		return nil, fmt.Errorf("names ring for pid %d: %w", p.PID, err)
	}
	offers := []agentwire.Offer{{Role: agentwire.RoleLaunchRing, Name: "launches", Region: ring.Region()},
		{Role: RoleNameRing, Name: "names", Region: names.Region()}}
	// Who the client is comes from its connection (SO_PEERCRED) and
	// /proc, read once at its handshake, never from what it writes (HELLO,
	// records); HELLO names its service.
	peer := r.srcs.res.peer(p, r.cfg.Resource.ServiceName, r.log)
	var maps *progmaps.Instance
	if len(r.maps.defs) > 0 {
		maps, err = progmaps.NewInstance(r.maps.defs, peer.PID, 0, peer.Exe, time.Now())
		if err != nil {
			ring.Close()
			names.Close()
			return nil, fmt.Errorf("map regions for pid %d: %w", p.PID, err)
		}
		maps.Resource = peer.Resource
		offers = append(offers, maps.Offers()...)
	}
	var warps *shm.Ring
	if r.cfg.Probes.KernelPhases {
		warps, err = shm.CreateRing(ExecRingSlotSize, sizes.exec)
		if err != nil {
			ring.Close()
			names.Close()
			if maps != nil {
				maps.Close()
			}
			return nil, fmt.Errorf("kernel_phases ring for pid %d: %w", p.PID, err)
		}
		offers = append(offers, agentwire.Offer{Role: agentwire.RoleMap, Name: probes.KernelPhasesRingMap, Region: warps.Region()})
	}
	offers = append(offers, r.host.offers()...)
	calls, hcOffers, err := r.hc.offers(p)
	if err != nil {
		r.log.Warn("gpuprobe: no host-call mailbox for a client; its GPU programs' printk, puts and host maps do nothing", zap.Int32("pid", p.PID), zap.Error(err))
	}
	offers = append(offers, hcOffers...)
	clk, err := newClockRegion()
	if err != nil {
		r.log.Debug("gpuprobe: no clock region for a client; its GPU programs' bpf_ktime_get_ns is %globaltimer", zap.Error(err))
	} else {
		offers = append(offers, agentwire.Offer{Role: agentwire.RoleClock, Name: "clock", Region: clk.Region()})
	}
	// The source is whole before the poll loop can see it: the loop reads
	// its rings without r.mu.
	s := r.newSource(ring, true, maps, names, peer)
	s.clock, s.calls = clk, calls
	if warps != nil {
		s.warps = newRingReader(warps, true)
	}
	s.bind = bindings(offers, warps)
	r.publishSource(s)
	lease.OnEvict(func() { // a closed session in the way of its uid's next one
		r.mu.Lock()
		s.evict = true
		r.mu.Unlock()
	})
	r.mu.Lock()
	r.srcs.bySess[p.Session] = s
	r.mu.Unlock()
	r.host.shimConnected(p.PID)
	return offers, nil
}

func (r *gpuReceiver) onDisconnect(p *agent.Peer) {
	r.host.shimDisconnected(p.PID)
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.srcs.bySess[p.Session]; s != nil {
		s.closing = true
		delete(r.srcs.bySess, p.Session)
	}
}

func (r *gpuReceiver) loop(ctx context.Context, mapper *clock.Mapper) {
	defer close(r.run.done)
	poll := time.NewTicker(r.cfg.PollInterval)
	defer poll.Stop()
	var lastMetrics time.Time // zero: the first poll emits, so self-metrics show at once
	// again holds a wake-up when the last pass left records waiting (fairpoll.go).
	again := make(chan struct{}, 1)
	for {
		catchUp := false // a pass right after one that left records waiting
		select {
		case <-ctx.Done():
			r.finalFlush(r.run.stopBy, true)
			return
		case req := <-r.run.flushc:
			r.finalFlush(req.deadline, false)
			close(req.done)
			continue
		case <-poll.C:
		case <-again:
			catchUp = true
		}
		// A tick's own time is when it fired: after a long pass the
		// buffered tick is that pass old, and windows that ended since
		// would be taken for windows ending in the future (clipped).
		now := time.Now()
		if off, err := monoOffset(); err == nil {
			mapper.SetMonoOffset(off)
		}
		if r.pollOnce(ctx, now, false, catchUp) {
			select {
			case again <- struct{}{}:
			default: // one is waiting already
			}
		}
		r.hc.flush(ctx, r.cfg.Resource.ServiceName, r.log)
		if now.Sub(lastMetrics) >= r.cfg.MetricsInterval {
			lastMetrics = now
			r.emitMetrics(ctx, now)
		}
	}
}

// pollOnce reads every ring, its fair share of the pass (fairpoll.go),
// releases the sources of clients that went (once their rings are read,
// at most drainTime) or broke a ring invariant, expires launches, and
// sends the spans built. stopping releases every source after this read.
// A catchUp pass (one right after a pass that left records waiting) only
// reads and releases: expiring launches and sending spans, whose cost
// grows with what is pending, wait for the next tick's pass. It reports
// whether records were left waiting for the next pass.
func (r *gpuReceiver) pollOnce(ctx context.Context, now time.Time, stopping, catchUp bool) (waiting bool) {
	r.mu.Lock()
	r.srcs.turn++
	sources := rotate(append([]*source(nil), r.srcs.list...), r.srcs.turn)
	tc := r.out.traces
	r.mu.Unlock()

	before := r.sh.counters()
	r.pollHost(now, sources)
	res := readShards(ctx, r, now, sources, planShares(sources, passBudget), stopping)
	dropped, corrupt, waiting := res.dropped, res.corrupt, res.waiting
	if len(res.closed) > 0 {
		r.dropSources(res.closed)
	}
	if !catchUp {
		r.sh.each(func(_ int, tr *translate.Translator) { tr.Expire(now) })
	}
	after := r.sh.counters()
	dropped += after.RecordsInvalid - before.RecordsInvalid
	mc := r.maps.col.Counters()
	dropped += (mc.Dropped - r.maps.stats.Dropped) + (mc.Invalid - r.maps.stats.Invalid)
	corrupt += mc.Corrupt - r.maps.stats.Corrupt
	mapRead := mc.Records - r.maps.stats.Records
	r.maps.stats = mc
	r.counts.dropped += dropped
	r.counts.corrupt += corrupt
	if r.tel != nil {
		r.tel.GpuprobeReceiverRecordsRead.Add(ctx, int64(after.RecordsRead-before.RecordsRead+mapRead))
		r.tel.GpuprobeReceiverRecordsDropped.Add(ctx, int64(dropped))
		r.tel.GpuprobeReceiverRecordsCorrupt.Add(ctx, int64(corrupt))
		r.tel.GpuprobeReceiverLaunchesEvicted.Add(ctx, int64(after.LaunchesEvicted-before.LaunchesEvicted+
			after.LaunchesExpired-before.LaunchesExpired))
		windowTelemetry(ctx, r.tel, &before.WindowCounters, &after.WindowCounters)
	}
	if !catchUp {
		r.sendTraces(ctx, tc)
	}
	return waiting
}

// sendTraces hands the spans built so far to the traces consumer tc.
func (r *gpuReceiver) sendTraces(ctx context.Context, tc consumer.Traces) {
	if r.sh.spanCount() == 0 && r.maps.col.SpanCount() == 0 {
		return
	}
	td := takeTraces(r)
	begun, tracesGone := r.run.down.state()
	if tc == nil {
		if tracesGone {
			countUndelivered(ctx, r, undeliveredSpans, td.SpanCount())
		}
		return
	}
	if err := tc.ConsumeTraces(ctx, td); err != nil {
		// Back-pressure: drop, count, never block the poll loop.
		r.counts.spansErr += uint64(td.SpanCount())
		if begun {
			countUndelivered(ctx, r, undeliveredSpans, td.SpanCount())
		}
		r.log.Debug("gpuprobe: dropping spans the pipeline refused", zap.Int("spans", td.SpanCount()), zap.Error(err))
	}
}

// takeTraces returns the spans built so far, the translator's and the
// user maps'.
func takeTraces(r *gpuReceiver) ptrace.Traces {
	td := r.sh.takeTraces()
	r.maps.col.TakeTraces().ResourceSpans().MoveAndAppendTo(td.ResourceSpans())
	return td
}

func (r *gpuReceiver) emitMetrics(ctx context.Context, now time.Time) {
	r.mu.Lock()
	mc := r.out.metrics
	retired := r.maps.retired
	r.maps.retired = nil
	var live []*progmaps.Instance
	for _, s := range r.srcs.list {
		if s.maps != nil {
			live = append(live, s.maps)
		}
	}
	if r.host != nil && r.host.maps != nil {
		live = append(live, r.host.maps)
	}
	r.mu.Unlock()
	defer closeInstances(r.log, retired)
	if mc == nil {
		// No metrics pipeline: the self-metrics still go to the internal
		// telemetry.
		sm := pmetric.NewMetricSlice()
		r.sh.appendMetrics(sm, now, r.selfMetrics())
		r.out.self.observe(sm)
		return
	}
	md := r.sh.metrics(now, r.selfMetrics())
	sm := md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics()
	if len(live)+len(retired) > 0 {
		r.maps.col.AppendMetrics(sm, append(live, retired...), now)
	}
	r.out.self.observe(sm)
	if !r.cfg.Telemetry.InPipeline {
		dropSelf(md)
	}
	r.out.view.apply(md)
	if md.ResourceMetrics().Len() == 0 {
		return
	}
	if err := mc.ConsumeMetrics(ctx, md); err != nil {
		r.log.Debug("gpuprobe: metrics refused by the pipeline", zap.Error(err))
	}
}

// closeInstances releases the map regions of applications that are gone.
func closeInstances(log *zap.Logger, ins []*progmaps.Instance) {
	for _, in := range ins {
		if err := in.Close(); err != nil {
			log.Debug("gpuprobe: closing map regions", zap.Error(err))
		}
	}
}

// monoOffset reads CLOCK_REALTIME − CLOCK_MONOTONIC of this host.
func monoOffset() (int64, error) {
	var mono, real unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono); err != nil {
		return 0, fmt.Errorf("clock_gettime(CLOCK_MONOTONIC): %w", err)
	}
	if err := unix.ClockGettime(unix.CLOCK_REALTIME, &real); err != nil {
		return 0, fmt.Errorf("clock_gettime(CLOCK_REALTIME): %w", err)
	}
	return real.Nano() - mono.Nano(), nil
}
