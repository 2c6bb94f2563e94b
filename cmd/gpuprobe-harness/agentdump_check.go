package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/gpuprobe/gpuprobe/record"
)

// launchInfo is one launch record as agent-dump keeps it for the checks.
type launchInfo struct {
	ID       uint64           `json:"id"`
	Kernel   string           `json:"kernel"`
	API      record.LaunchAPI `json:"api"`
	Grid     [3]uint32        `json:"grid"`
	Block    [3]uint32        `json:"block"`
	Stream   uint64           `json:"stream"`
	Result   uint32           `json:"result"`
	Captured bool             `json:"captured,omitempty"` // a stream-captured launch: not executed
}

func (l *launchInfo) blocks() uint64 {
	return uint64(l.Grid[0]) * uint64(l.Grid[1]) * uint64(l.Grid[2])
}

func (l *launchInfo) blockThreads() uint64 {
	return uint64(l.Block[0]) * uint64(l.Block[1]) * uint64(l.Block[2])
}

func (l *launchInfo) threads() uint64 { return l.blocks() * l.blockThreads() }

func (l *launchInfo) warps() uint64 { return l.blocks() * ((l.blockThreads() + 31) / 32) }

// contains reports whether the coordinates (block x, y, z, thread x, y, z)
// are those of a thread of the launch.
func (l *launchInfo) contains(c [6]uint32) bool {
	return c[0] < l.Grid[0] && c[1] < l.Grid[1] && c[2] < l.Grid[2] &&
		c[3] < l.Block[0] && c[4] < l.Block[1] && c[5] < l.Block[2]
}

// warpStat is what kernel_phases recorded for one launch id.
type warpStat struct {
	records, lanes uint64
	start, end     uint64            // earliest warp start, latest warp end
	cells          map[[4]uint32]int // (block, warp) → records
	outside        int               // records of a block outside the grid (checked at the end)
}

// execStat is what kernel_phases recorded for one launch id: one
// record.Exec per run of the launch (a graph node's replays share an id).
type execStat struct {
	records, blocks, threads uint64
	wins                     []interval // each run's device window
}

// exitRec is one per-thread exit record.
type exitRec struct {
	c  [6]uint32
	ts uint64
}

// accounting keeps what a session recorded, for the checks.
type accounting struct {
	launches []launchInfo
	warpByID map[uint64]*warpStat
	execByID map[uint64]*execStat
	exits    []exitRec
	errs     int
	firstErr string
}

func newAccounting() *accounting {
	return &accounting{warpByID: map[uint64]*warpStat{}, execByID: map[uint64]*execStat{}}
}

func (a *accounting) fail(what string, err error) {
	a.errs++
	if a.firstErr == "" {
		a.firstErr = fmt.Sprintf("%s: %v", what, err)
	}
}

func (a *accounting) launch(name string, l *record.Launch) {
	a.launches = append(a.launches, launchInfo{ID: l.LaunchID, Kernel: name, API: l.API, Grid: l.Grid,
		Block: l.Block, Stream: l.Stream, Result: l.Result})
}

func (a *accounting) warp(w *record.Warp) {
	st := a.warpByID[w.LaunchID]
	if st == nil {
		st = &warpStat{start: w.StartNS, end: w.EndNS, cells: map[[4]uint32]int{}}
		a.warpByID[w.LaunchID] = st
	}
	st.records++
	st.lanes += uint64(w.ActiveLanes())
	st.start = min(st.start, w.StartNS)
	st.end = max(st.end, w.EndNS)
	st.cells[[4]uint32{w.Block[0], w.Block[1], w.Block[2], w.Warp}]++
}

func (a *accounting) exec(e *record.Exec) {
	st := a.execByID[e.LaunchID]
	if st == nil {
		st = &execStat{}
		a.execByID[e.LaunchID] = st
	}
	st.records++
	st.blocks += e.Blocks
	st.threads += e.Threads
	st.wins = append(st.wins, interval{e.StartNS, e.EndNS})
}

// window is the device window of launch id: from its Exec records, else
// from its Warp records (earliest warp start, latest warp end).
func (a *accounting) windows(id uint64) []interval {
	if st := a.execByID[id]; st != nil {
		return st.wins
	}
	if st := a.warpByID[id]; st != nil {
		return []interval{{st.start, st.end}}
	}
	return nil
}

func (a *accounting) exit(l *exitLayout, p []byte) error {
	if uint32(len(p)) < l.size {
		return fmt.Errorf("%d bytes, want at least %d", len(p), l.size)
	}
	var r exitRec
	for i, off := range l.coord {
		v := binary.LittleEndian.Uint64(p[off:])
		if v > 1<<31 {
			return fmt.Errorf("coordinate %s = %d out of range", exitMembers[i], v)
		}
		r.c[i] = uint32(v)
	}
	r.ts = binary.LittleEndian.Uint64(p[l.ts:])
	a.exits = append(a.exits, r)
	return nil
}

// markCaptured flags the launches of the plain launch APIs whose id also
// appears on a cuGraphLaunch record: the shim gives a stream-captured
// launch's graph node the captured launch's id, and ids are otherwise
// unique per process, so those launches were captured, never executed.
// The shim writes no record for them (shim/src/capture.c): checkLaunches
// fails if it finds one.
func (a *accounting) markCaptured() {
	graphIDs := map[uint64]bool{}
	for i := range a.launches {
		if a.launches[i].API == record.APIGraphLaunch {
			graphIDs[a.launches[i].ID] = true
		}
	}
	for i := range a.launches {
		l := &a.launches[i]
		l.Captured = l.API != record.APIGraphLaunch && graphIDs[l.ID]
	}
}

// executed returns the launches that ran: accepted by the driver, not
// captured.
func (a *accounting) executed() []*launchInfo {
	a.markCaptured()
	var out []*launchInfo
	for i := range a.launches {
		if l := &a.launches[i]; l.Result == 0 && !l.Captured {
			out = append(out, l)
		}
	}
	return out
}

// patchedLaunches returns the executed launches of patched kernels.
func (a *accounting) patchedLaunches(patched map[string]bool) []*launchInfo {
	var out []*launchInfo
	for _, l := range a.executed() {
		if patched[l.Kernel] {
			out = append(out, l)
		}
	}
	return out
}

// expectedWarps is the number of warps the executed launches of patched
// kernels ran.
func (a *accounting) expectedWarps(patched map[string]bool) uint64 {
	var n uint64
	for _, l := range a.patchedLaunches(patched) {
		n += l.warps()
	}
	return n
}

// readExpect reads the `launches NAME COUNT` lines of an application's
// output (the samples print one per kernel).
func readExpect(path string) (map[string]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--expect: %w", err)
	}
	defer f.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		fs := strings.Fields(sc.Text())
		if len(fs) == 0 || fs[0] != "launches" {
			continue
		}
		if len(fs) != 3 {
			return nil, fmt.Errorf("--expect %s:%d: want `launches NAME COUNT`, got %q", path, n, sc.Text())
		}
		c, err := strconv.Atoi(fs[2])
		if err != nil || c < 0 {
			return nil, fmt.Errorf("--expect %s:%d: count %q is not a non-negative integer", path, n, fs[2])
		}
		if _, dup := out[fs[1]]; dup {
			return nil, fmt.Errorf("--expect %s:%d: kernel %s listed twice", path, n, fs[1])
		}
		out[fs[1]] = c
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--expect %s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--expect %s: no `launches NAME COUNT` line", path)
	}
	return out, nil
}

// checkResult is one check of a session.
type checkResult struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

func okf(name, format string, args ...any) checkResult {
	return checkResult{Name: name, OK: true, Detail: fmt.Sprintf(format, args...)}
}

func failf(name, format string, args ...any) checkResult {
	return checkResult{Name: name, Detail: fmt.Sprintf(format, args...)}
}

// checkLaunches compares the executed launches per kernel with the
// application's own counts.
func checkLaunches(a *accounting, want map[string]int) checkResult {
	got := map[string]int{}
	failed, captured := 0, 0
	for i := range a.launches {
		l := &a.launches[i]
		switch {
		case l.Result != 0:
			failed++
		case l.Captured:
			captured++
		default:
			got[l.Kernel]++
		}
	}
	var bad []string
	total := 0
	for k, n := range want {
		total += n
		if got[k] != n {
			bad = append(bad, fmt.Sprintf("%s: recorded %d, app launched %d", k, got[k], n))
		}
	}
	for k, n := range got {
		if _, ok := want[k]; !ok {
			bad = append(bad, fmt.Sprintf("%s: recorded %d, app reports none", k, n))
		}
	}
	if failed > 0 {
		bad = append(bad, fmt.Sprintf("%d launches failed", failed))
	}
	if captured > 0 {
		// The shim writes no record for a launch into a capturing stream
		// (shim/src/capture.c): it never runs, and its collector span
		// would wait for a device window that never comes.
		bad = append(bad, fmt.Sprintf("%d launch records of stream-captured launches, which never ran", captured))
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		return failf("launch counts", "%s", strings.Join(bad, "; "))
	}
	return okf("launch counts", "%d kernels, %d launches exact", len(want), total)
}

// checkPatched: every kernel the application launched was patched.
func checkPatched(p *dumpPatch, want map[string]int) checkResult {
	var missing []string
	for k := range want {
		if !p.patched[k] {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	if p.modules == 0 || len(missing) > 0 {
		return failf("kernels patched", "%d modules patched (%d refused); not patched: %s", p.modules, p.refused, strings.Join(missing, ", "))
	}
	return okf("kernels patched", "%d modules, %d kernels", p.modules, len(p.patched))
}
