package receiver

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/hostprobe"
	"github.com/gpuprobe/gpuprobe/gpuprobe/hostprobe/discover"
	"go.uber.org/zap"
)

// procProbes puts the shim-covered host probes (hostprobe.ShimCovered:
// launches, graph launches, syncs, the driver copies the shim wraps) into
// the processes that need them, one by one (host_probes::shim_processes
// skip): every process the /proc scan finds mapping a CUDA library and
// holding no shim session, and no other. A process with the shim records
// those calls itself and runs them without a trap. A process that
// connects later loses its probes; one that exits, or whose pid the scan
// finds reused, too.
//
// A process that maps the shim (discover.IsShimPath) but has no session
// yet is left alone for shimSessionWait: the shim connects at its first
// CUDA call, which a framework makes seconds after it mapped the CUDA
// libraries (PyTorch's import), and probing it meanwhile made every
// launch trap until a detach that, with perf-event links, can take
// longer than the program lives. Past the wait it is probed as any
// process without a session.
//
// The scan and the agent report to it from their goroutines without
// waiting; one goroutine of its own attaches and detaches (a detach of
// perf-event links waits about 0.1 s per probe on old kernels).
type procProbes struct {
	probes *hostprobe.Probes
	log    *zap.Logger
	kick   chan struct{} // one pending reconcile

	mu       sync.Mutex
	sessions map[int]int        // pid → live shim sessions
	scan     []discover.Process // the latest scan's processes
	probed   uint64             // processes given per-process probes
	capped   uint64             // processes found beyond max_processes

	// Owned by run.
	procs    map[int]*procState
	awaiting map[int]awaitState // processes that map the shim, waiting for its session
	wait     time.Duration      // shimSessionWait when made
}

// shimSessionWait is how long a process that maps the shim has to connect
// before it is probed as one without it (a variable for tests).
var shimSessionWait = 10 * time.Second

// awaitState is a process (pid, start) that maps the shim and was first
// seen without a session at since.
type awaitState struct {
	start uint64
	since time.Time
}

// procState is what run did for one process (pid, start).
type procState struct {
	start  uint64
	files  map[discover.Key]bool // files handled (probed, nothing to probe, or failed)
	probed bool                  // some file got per-process probes
	capped bool                  // counted in capped
}

func newProcProbes(p *hostprobe.Probes, log *zap.Logger) *procProbes {
	return &procProbes{probes: p, log: log, kick: make(chan struct{}, 1),
		sessions: map[int]int{}, procs: map[int]*procState{}, awaiting: map[int]awaitState{},
		wait: shimSessionWait}
}

// scanned takes the processes of one /proc scan (discover.Options.Processes).
func (pp *procProbes) scanned(procs []discover.Process) {
	pp.mu.Lock()
	pp.scan = procs
	pp.mu.Unlock()
	pp.poke()
}

// connected notes a shim session of pid: its per-process probes go.
func (pp *procProbes) connected(pid int32) {
	pp.mu.Lock()
	pp.sessions[int(pid)]++
	pp.mu.Unlock()
	pp.poke()
}

// disconnected notes the end of a shim session of pid. A process that
// lives on without one gets per-process probes at the next scan.
func (pp *procProbes) disconnected(pid int32) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.sessions[int(pid)]--; pp.sessions[int(pid)] <= 0 {
		delete(pp.sessions, int(pid))
	}
}

func (pp *procProbes) poke() {
	select {
	case pp.kick <- struct{}{}:
	default:
	}
}

// run reconciles at every poke until ctx ends.
func (pp *procProbes) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-pp.kick:
			pp.reconcile(ctx)
		}
	}
}

// reconcile detaches the processes that now have the shim, exited or
// were replaced, and attaches the scan's processes without the shim.
func (pp *procProbes) reconcile(ctx context.Context) {
	pp.mu.Lock()
	scan := pp.scan
	shim := make(map[int]bool, len(pp.sessions))
	for pid := range pp.sessions {
		shim[pid] = true
	}
	pp.mu.Unlock()
	alive := make(map[int]uint64, len(scan))
	for _, pr := range scan {
		alive[pr.PID] = pr.Start
	}
	for pid, st := range pp.procs {
		start, ok := alive[pid]
		if !shim[pid] && ok && start == st.start {
			continue
		}
		if st.probed {
			if err := pp.probes.DetachProcess(pid); err != nil {
				pp.log.Warn("gpuprobe: per-process host probes not removed", zap.Int("pid", pid), zap.Error(err))
			}
			pp.log.Debug("gpuprobe: per-process host probes removed", zap.Int("pid", pid), zap.Bool("shim", shim[pid]))
		}
		delete(pp.procs, pid)
	}
	for pid, w := range pp.awaiting {
		if start, ok := alive[pid]; !ok || start != w.start || shim[pid] {
			delete(pp.awaiting, pid)
		}
	}
	now := time.Now()
	for _, pr := range scan {
		if ctx.Err() != nil {
			return
		}
		if !shim[pr.PID] && !pp.awaitsSession(pr, now) {
			pp.attach(pr)
		}
	}
}

// awaitsSession says whether process pr, without a session, maps the
// shim and was first seen less than pp.wait ago.
func (pp *procProbes) awaitsSession(pr discover.Process, now time.Time) bool {
	if !pr.Shim {
		return false
	}
	w, ok := pp.awaiting[pr.PID]
	if !ok || w.start != pr.Start {
		w = awaitState{start: pr.Start, since: now}
		pp.awaiting[pr.PID] = w
	}
	return now.Sub(w.since) < pp.wait
}

// attach gives process pr the per-process probes of each file it maps
// that it lacks.
func (pp *procProbes) attach(pr discover.Process) {
	st := pp.procs[pr.PID]
	if st == nil {
		st = &procState{start: pr.Start, files: map[discover.Key]bool{}}
		pp.procs[pr.PID] = st
	}
	for _, lib := range pr.Libs {
		if st.files[lib.Key()] {
			continue
		}
		n, err := pp.probes.AttachProcess(pr.PID, lib.Path, lib.Dev, lib.Ino)
		switch {
		case errors.Is(err, hostprobe.ErrTooManyProcesses):
			if !st.capped {
				st.capped = true
				pp.mu.Lock()
				pp.capped++
				first := pp.capped == 1
				pp.mu.Unlock()
				if first {
					pp.log.Warn("gpuprobe: a process without the shim gets no probes on launches and syncs: host_probes::max_processes reached (further ones counted)", zap.Int("pid", pr.PID), zap.Error(err))
				}
			}
			return // tried again at the next scan
		case err != nil:
			// Mostly a process that exited since the scan.
			pp.log.Debug("gpuprobe: per-process host probes not attached", zap.Int("pid", pr.PID), zap.String("library", lib.Path), zap.Error(err))
		case n > 0 && !st.probed:
			st.probed = true
			pp.mu.Lock()
			pp.probed++
			pp.mu.Unlock()
		}
		st.files[lib.Key()] = true
	}
}

// counts returns the processes probed so far and those left out at the
// bound.
func (pp *procProbes) counts() (probed, capped uint64) {
	if pp == nil {
		return 0, 0
	}
	pp.mu.Lock()
	defer pp.mu.Unlock()
	return pp.probed, pp.capped
}
