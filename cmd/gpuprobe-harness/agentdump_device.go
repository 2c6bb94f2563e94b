package main

import (
	"fmt"
	"sort"
	"strings"
)

// Map names of the testdata programs whose contents agent-dump checks.
const (
	threadRunsMap   = "thread_runs"   // threadhist: per-thread count of exits (1502)
	blockThreadsMap = "block_threads" // threadhist: threads per block x (1503, atomic)
	delayHistMap    = "delay_log2_ns" // launchlate: log2 histogram of launch delays (1503)
)

// idGroup is the executed launches of patched kernels that share a launch
// id: one for a plain launch, the graph launches of one kernel node.
type idGroup struct {
	l *launchInfo // the first; all have the same grid, block and kernel
	n int
}

func groupByID(ls []*launchInfo) map[uint64]*idGroup {
	g := map[uint64]*idGroup{}
	for _, l := range ls {
		if e := g[l.ID]; e != nil {
			e.n++
		} else {
			g[l.ID] = &idGroup{l: l, n: 1}
		}
	}
	return g
}

// checkWarps: for every launch, one kernel_phases record per warp (each
// (block, warp) once per run of the launch), blocks inside the grid, the
// active lanes summing to the launch's threads; no record of an unknown
// launch id.
func checkWarps(a *accounting, ls []*launchInfo, dropped uint64) checkResult {
	const name = "warp records per launch"
	groups := groupByID(ls)
	var bad []string
	var records, want uint64
	for id, g := range groups {
		w := g.l.warps() * uint64(g.n)
		want += w
		st := a.warpByID[id]
		if st == nil {
			bad = append(bad, fmt.Sprintf("launch %#x (%s): no warp records, want %d", id, g.l.Kernel, w))
			continue
		}
		records += st.records
		perWarp := (g.l.blockThreads() + 31) / 32
		switch {
		case st.records != w:
			bad = append(bad, fmt.Sprintf("launch %#x (%s): %d warp records, want %d", id, g.l.Kernel, st.records, w))
		case uint64(len(st.cells)) != g.l.warps():
			bad = append(bad, fmt.Sprintf("launch %#x (%s): %d distinct (block, warp), want %d", id, g.l.Kernel, len(st.cells), g.l.warps()))
		case st.lanes != g.l.threads()*uint64(g.n):
			bad = append(bad, fmt.Sprintf("launch %#x (%s): active lanes sum to %d, want %d threads", id, g.l.Kernel, st.lanes, g.l.threads()*uint64(g.n)))
		}
		for c, n := range st.cells {
			if c[0] >= g.l.Grid[0] || c[1] >= g.l.Grid[1] || c[2] >= g.l.Grid[2] || uint64(c[3]) >= perWarp {
				bad = append(bad, fmt.Sprintf("launch %#x (%s): block %v warp %d outside grid %v block %v", id, g.l.Kernel, c[:3], c[3], g.l.Grid, g.l.Block))
				break
			}
			if n != g.n {
				bad = append(bad, fmt.Sprintf("launch %#x (%s): block %v warp %d recorded %d times, want %d", id, g.l.Kernel, c[:3], c[3], n, g.n))
				break
			}
		}
	}
	for id, st := range a.warpByID {
		if groups[id] == nil {
			bad = append(bad, fmt.Sprintf("%d warp records of launch id %#x, which no executed launch of a patched kernel has", st.records, id))
		}
	}
	if dropped > 0 {
		bad = append(bad, fmt.Sprintf("%d warp records dropped", dropped))
	}
	if len(ls) == 0 {
		bad = append(bad, "no executed launch of a patched kernel")
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return failf(name, "%d problems, first: %s", len(bad), bad[0])
	}
	return okf(name, "%d launch ids, %d warp records = warps launched", len(groups), records)
}

// checkExecs: for every launch, one kernel_phases Exec record per run of
// the launch, with the launch's blocks and threads and a window that does
// not end before it starts; no record of an unknown launch id.
func checkExecs(a *accounting, ls []*launchInfo, dropped uint64) checkResult {
	const name = "device windows per launch"
	groups := groupByID(ls)
	var bad []string
	var records uint64
	for id, g := range groups {
		st := a.execByID[id]
		if st == nil {
			bad = append(bad, fmt.Sprintf("launch %#x (%s): no device window", id, g.l.Kernel))
			continue
		}
		records += st.records
		n := uint64(g.n)
		switch {
		case st.records != n:
			bad = append(bad, fmt.Sprintf("launch %#x (%s): %d device windows, want %d", id, g.l.Kernel, st.records, n))
		case st.blocks != g.l.blocks()*n:
			bad = append(bad, fmt.Sprintf("launch %#x (%s): %d blocks, want %d", id, g.l.Kernel, st.blocks, g.l.blocks()*n))
		case st.threads != g.l.threads()*n:
			bad = append(bad, fmt.Sprintf("launch %#x (%s): %d threads, want %d", id, g.l.Kernel, st.threads, g.l.threads()*n))
		}
	}
	for id, st := range a.execByID {
		if groups[id] == nil {
			bad = append(bad, fmt.Sprintf("%d device windows of launch id %#x, which no executed launch of a patched kernel has", st.records, id))
		}
	}
	if dropped > 0 {
		bad = append(bad, fmt.Sprintf("%d device-window records dropped", dropped))
	}
	if len(ls) == 0 {
		bad = append(bad, "no executed launch of a patched kernel")
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return failf(name, "%d problems, first: %s", len(bad), bad[0])
	}
	return okf(name, "%d launch ids, %d device windows = runs, blocks and threads exact", len(groups), records)
}

// interval is a closed time interval on %globaltimer.
type interval struct{ lo, hi uint64 }

// shapeWindows is the launches of one (grid, block) shape and the union of
// their device windows, sorted.
type shapeWindows struct {
	l    *launchInfo
	n    int
	wins []interval
}

// checkExits: one exit record per thread of every launch (each thread
// coordinate as often as launches that have it ran), and, with
// kernel_phases' windows, every exit time inside the device window
// [first warp start, last warp end] of a launch that has the thread;
// tolerance exitTolNS.
func checkExits(a *accounting, ls []*launchInfo, ring string, dropped uint64, windows bool) checkResult {
	name := "exit records (" + ring + ")"
	shapes := map[[6]uint32]*shapeWindows{}
	var want uint64
	for _, l := range ls {
		k := [6]uint32{l.Grid[0], l.Grid[1], l.Grid[2], l.Block[0], l.Block[1], l.Block[2]}
		s := shapes[k]
		if s == nil {
			s = &shapeWindows{l: l}
			shapes[k] = s
		}
		s.n++
		want += l.threads()
		if windows {
			for _, w := range a.windows(l.ID) {
				s.wins = append(s.wins, interval{w.lo - exitTolNS, w.hi + exitTolNS})
			}
		}
	}
	list := make([]*shapeWindows, 0, len(shapes))
	for _, s := range shapes {
		sort.Slice(s.wins, func(i, j int) bool { return s.wins[i].lo < s.wins[j].lo })
		var merged []interval
		for _, w := range s.wins {
			if n := len(merged); n > 0 && w.lo <= merged[n-1].hi {
				merged[n-1].hi = max(merged[n-1].hi, w.hi)
			} else {
				merged = append(merged, w)
			}
		}
		s.wins = merged
		list = append(list, s)
	}
	counts := make(map[[6]uint32]uint32, len(a.exits))
	var outside, stray int
	var firstOut string
	var excess uint64
	for _, r := range a.exits {
		counts[r.c]++
		in, covered := false, false
		for _, s := range list {
			if !s.l.contains(r.c) {
				continue
			}
			covered = true
			if !windows {
				in = true
				break
			}
			i := sort.Search(len(s.wins), func(i int) bool { return s.wins[i].hi >= r.ts })
			if i < len(s.wins) && s.wins[i].lo <= r.ts {
				in = true
				break
			}
		}
		switch {
		case !covered:
			stray++
		case !in:
			outside++
			if firstOut == "" {
				firstOut = fmt.Sprintf("thread %v at %d", r.c, r.ts)
				excess = distance(list, r)
			}
		}
	}
	var bad []string
	if uint64(len(a.exits)) != want {
		bad = append(bad, fmt.Sprintf("%d exit records, want %d (one per thread launched)", len(a.exits), want))
	}
	if stray > 0 {
		bad = append(bad, fmt.Sprintf("%d records of threads no launch has", stray))
	}
	for c, n := range counts {
		m := 0
		for _, s := range list {
			if s.l.contains(c) {
				m += s.n
			}
		}
		if int(n) != m {
			bad = append(bad, fmt.Sprintf("thread %v has %d exit records, want %d", c, n, m))
			break
		}
	}
	if outside > 0 {
		bad = append(bad, fmt.Sprintf("%d exit times outside every device window of the thread's launches (first: %s, %d ns from the nearest)", outside, firstOut, excess))
	}
	if dropped > 0 {
		bad = append(bad, fmt.Sprintf("%d records dropped", dropped))
	}
	if len(bad) > 0 {
		return failf(name, "%s", strings.Join(bad, "; "))
	}
	how := fmt.Sprintf("inside the device windows from kernel_phases (tolerance %d ns)", exitTolNS)
	if !windows {
		how = "times not checked (no kernel_phases windows)"
	}
	return okf(name, "%d records = threads launched, each thread once per launch, %s", len(a.exits), how)
}

// distance returns how far an exit time is from the nearest window of a
// launch that has the thread.
func distance(list []*shapeWindows, r exitRec) uint64 {
	best := ^uint64(0)
	for _, s := range list {
		if !s.l.contains(r.c) {
			continue
		}
		for _, w := range s.wins {
			d := uint64(0)
			if r.ts < w.lo {
				d = w.lo - r.ts
			} else if r.ts > w.hi {
				d = r.ts - w.hi
			}
			best = min(best, d)
		}
	}
	return best
}

// checkThreadRuns: threadhist's per-thread counter (slot = global linear
// thread index) holds, for every slot, the number of launches that have
// that thread. With racy (concurrent launches on several streams update
// the same slots with a non-atomic add), each slot covered must be between
// 1 and that number.
func checkThreadRuns(p *dumpPatch, ls []*launchInfo, racy bool) checkResult {
	const name = "per-thread counts (" + threadRunsMap + ")"
	arr := p.arrays[threadRunsMap]
	lanes := uint64(arr.Lanes())
	threads := make([]uint64, 0, len(ls))
	var want, maxT uint64
	for _, l := range ls {
		threads = append(threads, l.threads())
		want += min(l.threads(), lanes)
		maxT = max(maxT, l.threads())
	}
	sort.Slice(threads, func(i, j int) bool { return threads[i] < threads[j] })
	var sum, lost uint64
	j := 0 // threads[:j] are <= t
	for t := uint64(0); t < lanes; t++ {
		for j < len(threads) && threads[j] <= t {
			j++
		}
		w := uint64(len(threads) - j)
		v, err := arr.Uint64(0, t)
		if err != nil {
			return failf(name, "slot %d: %v", t, err)
		}
		sum += v
		switch {
		case v == w:
		case racy && w > 0 && v >= 1 && v < w:
			lost += w - v
		default:
			return failf(name, "thread slot %d counted %d times, want %d (launches with more than %d threads)", t, v, w, t)
		}
	}
	note := ""
	if maxT > lanes {
		note = fmt.Sprintf("; slots beyond %d not checked (largest launch %d threads)", lanes, maxT)
	}
	if racy {
		return okf(name, "%d of %d thread runs counted, every thread at least once (%d lost to concurrent non-atomic updates)%s", sum, want, lost, note)
	}
	return okf(name, "every thread of %d launches counted once: %d%s", len(ls), sum, note)
}

// checkBlockThreads: threadhist's block_threads[b] (atomic adds by each
// thread of block x = b, b < the map's entries) equals the threads of all
// launches' blocks with that x.
func checkBlockThreads(p *dumpPatch, ls []*launchInfo) checkResult {
	const name = "per-block counts (" + blockThreadsMap + ")"
	arr := p.arrays[blockThreadsMap]
	var total uint64
	for b := uint64(0); b < uint64(arr.Keys()); b++ {
		var w uint64
		for _, l := range ls {
			if uint64(l.Grid[0]) > b {
				w += l.blockThreads() * uint64(l.Grid[1]) * uint64(l.Grid[2])
			}
		}
		v, err := arr.Uint64(b, 0)
		if err != nil {
			return failf(name, "block %d: %v", b, err)
		}
		if v != w {
			return failf(name, "block x=%d counted %d threads, want %d", b, v, w)
		}
		total += v
	}
	return okf(name, "%d blocks x, %d threads, exact", arr.Keys(), total)
}

// checkDelayHist: launchlate's GPU half reads launch_clock, a kernel map
// (BPF_F_MMAPABLE) its host half (a uprobe) writes; agent-dump loads no
// host programs and gives the GPU no launch_clock, so every lookup finds it
// absent and the histogram must stay empty (and the kernels unharmed).
func checkDelayHist(p *dumpPatch) checkResult {
	const name = "launchlate histogram (" + delayHistMap + ")"
	arr := p.arrays[delayHistMap]
	var sum uint64
	for b := uint64(0); b < uint64(arr.Keys()); b++ {
		v, err := arr.Uint64(b, 0)
		if err != nil {
			return failf(name, "bucket %d: %v", b, err)
		}
		sum += v
	}
	if sum != 0 {
		return failf(name, "%d delays recorded, want 0 (launch_clock is absent: its lookups must give NULL)", sum)
	}
	return okf(name, "empty, as it must be without launch_clock (a kernel map of the host half, which agent-dump does not load)")
}

// exitTolNS widens each device window when exit times are checked: two
// %globaltimer reads in different warps may differ by its update step
// (32 ns on the H100 measured), even when they are ordered in time.
const exitTolNS = 64
