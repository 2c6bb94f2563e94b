package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/gpuprobe/gpuprobe/internal/procread"
)

// Idle checks read /proc/PID/maps, whose size the process chooses (a
// long path mapped 60,000 times makes it hundreds of MiB). One read,
// streamed and cut at procread.MaxMapsBytes, serves every session of the
// process checked within mapsTTL: it looks for the regions of all of
// them at once. A process whose maps is cut before any of a session's
// regions is counted (Stats.MapsTruncated) and the session is ended, as
// one whose process maps none of them: what cannot be read in the bound
// is not trusted to keep the collector's resources.

// mapsTTL is how long one read of a process's maps answers its sessions'
// idle checks (they go idle together when the process goes quiet).
const mapsTTL = time.Second

// procKey names a pinned process: its pid and start time.
type procKey struct {
	pid   int32
	start string
}

// procMaps is the idle checks' state for one process.
type procMaps struct {
	ids      map[fileID]int // regions of its sessions (reference counts)
	at       time.Time      // when the last read ended
	found    map[fileID]bool
	cut      bool          // the last read stopped at the bound
	err      error         // the last read's error (errPeerGone included)
	scanning chan struct{} // closed when the read in flight ends; nil: none
}

// idleMaps shares maps reads among the sessions of each process.
type idleMaps struct {
	mu    sync.Mutex
	procs map[procKey]*procMaps
}

func newIdleMaps() *idleMaps { return &idleMaps{procs: map[procKey]*procMaps{}} }

// add registers a session's regions under its process.
func (m *idleMaps) add(p *peerProc, ids []fileID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := procKey{p.pid, p.start}
	pm := m.procs[k]
	if pm == nil {
		pm = &procMaps{ids: map[fileID]int{}}
		m.procs[k] = pm
	}
	for _, id := range ids {
		pm.ids[id]++
	}
}

// remove forgets a session's regions (its session ended).
func (m *idleMaps) remove(p *peerProc, ids []fileID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := procKey{p.pid, p.start}
	pm := m.procs[k]
	if pm == nil {
		return
	}
	for _, id := range ids {
		if pm.ids[id]--; pm.ids[id] <= 0 {
			delete(pm.ids, id)
		}
	}
	if len(pm.ids) == 0 && pm.scanning == nil {
		delete(m.procs, k)
	}
}

// mapped says whether p maps any of ids, reading its maps at most once
// per mapsTTL for all its sessions. cut: the read stopped at the bound
// before any of ids.
func (m *idleMaps) mapped(p *peerProc, ids []fileID, now time.Time) (found, cut bool, err error) {
	k := procKey{p.pid, p.start}
	m.mu.Lock()
	pm := m.procs[k]
	if pm == nil {
		m.mu.Unlock()
		return false, false, errors.New("agent: idle check of a session never registered")
	}
	for pm.scanning != nil {
		ch := pm.scanning
		m.mu.Unlock()
		<-ch
		m.mu.Lock()
	}
	if pm.at.IsZero() || now.Sub(pm.at) >= mapsTTL {
		pm.scanning = make(chan struct{})
		want := make(map[fileID]bool, len(pm.ids))
		for id := range pm.ids {
			want[id] = false
		}
		m.mu.Unlock()
		f, c, err := p.mapsScan(want)
		m.mu.Lock()
		pm.found, pm.cut, pm.err, pm.at = f, c, err, time.Now()
		close(pm.scanning)
		pm.scanning = nil
	}
	defer m.mu.Unlock()
	if pm.err != nil {
		return false, false, pm.err
	}
	for _, id := range ids {
		if pm.found[id] {
			return true, false, nil
		}
	}
	return false, pm.cut, nil
}

// mapsScan reads /proc/PID/maps line by line, at most
// procread.MaxMapsBytes of it, marking the ids of want it maps; it stops
// when all are found. cut: it stopped at the bound.
func (p *peerProc) mapsScan(want map[fileID]bool) (map[fileID]bool, bool, error) {
	if p.pid <= 0 {
		return nil, false, fmt.Errorf("agent: peer pid %d is outside our pid namespace", p.pid)
	}
	f, err := os.Open(p.path("maps"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, false, errPeerGone
		}
		return nil, false, fmt.Errorf("agent: %w", err)
	}
	defer f.Close()
	sc, err := scanMaps(f, want)
	if err != nil {
		return nil, false, fmt.Errorf("agent: %s: %w", p.path("maps"), err)
	}
	if !p.alive() {
		return nil, false, errPeerGone
	}
	return want, sc.Truncated, nil
}

// scanMaps marks the ids of want that the maps lines of r map.
func scanMaps(r io.Reader, want map[fileID]bool) (procread.Scan, error) {
	left := len(want)
	return procread.Lines(r, procread.MaxMapsBytes, procread.MaxMapsLine, func(line []byte, _ bool) bool {
		if id, ok := mapsLineFile(line); ok {
			if seen, mine := want[id]; mine && !seen {
				want[id] = true
				left--
			}
		}
		return left > 0
	})
}
