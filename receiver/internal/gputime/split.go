package gputime

import (
	"slices"
)

// part is a buffered window (part) being settled.
type part struct {
	pid  uint32
	p    *proc
	w    win
	iv   int     // its interval in batch.ivs
	att  float64 // attributed ns
	solo bool    // a whole window that nothing else overlapped: learn from it
}

// interval is one process's merged windows in a batch.
type interval struct {
	pid        uint32
	start, end int64
	parts      []int   // indices in batch.parts
	dem        float64 // solo demand of its parts (ns), valid when known
	known      bool
	solo       float64 // time it had alone
	ov         float64 // time it shared
	eq         float64 // its equal share of the time it shared
	share      float64 // what it gets of the shared time
	r          float64 // its demand in the shared time (demands)
}

// seg is an overlapped segment of the sweep: its length and the n
// intervals in it (batch.segIvs[off:off+n]).
type seg struct {
	d      float64
	off, n int
}

// busy is a busy period of the sweep: intervals [from, to) in start
// order, segments [segFrom, segTo), its union and overlapped time.
type busy struct {
	from, to, maxIv int
	segFrom, segTo  int
	union, overlap  float64
}

// event is an interval's start or end in the sweep.
type event struct {
	t   int64
	end bool
	iv  int
}

// batch is the scratch of one settle, reused.
type batch struct {
	parts  []part
	ivs    []interval
	events []event
	active []int
	comp   []int
	segs   []seg
	segIvs []int
	comps  []busy
	byProc map[uint32][]int
}

func (b *batch) reset() {
	b.parts, b.ivs, b.events = b.parts[:0], b.ivs[:0], b.events[:0]
	if b.byProc == nil {
		b.byProc = map[uint32][]int{}
	}
	clear(b.byProc)
}

func (b *batch) add(pid uint32, p *proc, w win) {
	b.byProc[pid] = append(b.byProc[pid], len(b.parts))
	b.parts = append(b.parts, part{pid: pid, p: p, w: w})
}

// demand is a part's solo demand: its kernel's estimate (clamped to the
// part, in proportion to the part of its window it is), ok false without.
func (pt *part) demand() (float64, bool) {
	e, ok := pt.p.est[pt.w.kernel]
	if !ok || pt.w.kernel == 0 || pt.w.orig <= 0 {
		return 0, false
	}
	n := float64(pt.w.end - pt.w.start)
	if pt.w.end-pt.w.start < pt.w.orig {
		e *= n / float64(pt.w.orig)
	}
	return min(e, n), true
}

// attribute splits the batch's time among its parts (part.att) under
// mode m and returns the union's length (ns).
func (b *batch) attribute(m Mode) float64 {
	b.merge()
	b.sweep()
	var union float64
	for _, c := range b.comps {
		union += c.union
		b.comp = b.comp[:0]
		for i := c.from; i < c.to; i++ {
			b.comp = append(b.comp, i)
		}
		b.demands(c)
		b.split(m, c.overlap)
	}
	for i := range b.ivs {
		b.spread(&b.ivs[i])
	}
	return union
}

// sweep walks the intervals' starts and ends: each one's time alone,
// shared and its equal share of that, the overlapped segments, and the
// busy periods (contiguous in start order).
func (b *batch) sweep() {
	for i := range b.ivs {
		b.events = append(b.events, event{t: b.ivs[i].start, iv: i}, event{t: b.ivs[i].end, end: true, iv: i})
	}
	slices.SortFunc(b.events, func(x, y event) int {
		if x.t != y.t {
			if x.t < y.t {
				return -1
			}
			return 1
		}
		if x.end != y.end { // ends first: touching intervals do not overlap
			if x.end {
				return -1
			}
			return 1
		}
		return x.iv - y.iv
	})
	b.active, b.segs, b.segIvs, b.comps = b.active[:0], b.segs[:0], b.segIvs[:0], b.comps[:0]
	cur := busy{}
	last := int64(0)
	for _, e := range b.events {
		if n := len(b.active); n > 0 && e.t > last {
			d := float64(e.t - last)
			cur.union += d
			if n == 1 {
				b.ivs[b.active[0]].solo += d
			} else {
				cur.overlap += d
				b.segs = append(b.segs, seg{d: d, off: len(b.segIvs), n: n})
				for _, i := range b.active {
					b.ivs[i].ov += d
					b.ivs[i].eq += d / float64(n)
					b.segIvs = append(b.segIvs, i)
				}
			}
		}
		last = e.t
		if e.end {
			b.active = slices.DeleteFunc(b.active, func(i int) bool { return i == e.iv })
			if len(b.active) == 0 {
				cur.to, cur.segTo = e.iv+1, len(b.segs)
				cur.to = max(cur.to, cur.maxIv+1)
				b.comps = append(b.comps, cur)
				cur = busy{from: cur.to, segFrom: len(b.segs)}
			}
			continue
		}
		cur.maxIv = max(cur.maxIv, e.iv)
		b.active = append(b.active, e.iv)
	}
}

// demands sets each interval's demand in the overlap of busy period c
// (interval.r): a known one's, its solo demand less what it had alone; an
// unknown one's, what the known ones in its overlapped segments leave of
// them (their demand spread over their overlapped time), in equal parts
// among the unknown ones there.
func (b *batch) demands(c busy) {
	unknown := false
	for i := c.from; i < c.to; i++ {
		iv := &b.ivs[i]
		iv.r = 0
		if iv.known {
			iv.r = min(max(iv.dem-iv.solo, 0), iv.ov)
		} else {
			unknown = true
		}
	}
	if !unknown {
		return
	}
	for _, sg := range b.segs[c.segFrom:c.segTo] {
		left, nu := sg.d, 0
		for _, i := range b.segIvs[sg.off : sg.off+sg.n] {
			if iv := &b.ivs[i]; iv.known {
				if iv.ov > 0 {
					left -= sg.d * iv.r / iv.ov
				}
			} else {
				nu++
			}
		}
		if nu == 0 || left <= 0 {
			continue
		}
		for _, i := range b.segIvs[sg.off : sg.off+sg.n] {
			if !b.ivs[i].known {
				b.ivs[i].r += left / float64(nu)
			}
		}
	}
}

// merge makes each process's parts into intervals: overlapping parts of
// one process (its streams) are one interval, its demand theirs summed.
func (b *batch) merge() {
	for pid, idx := range b.byProc {
		slices.SortFunc(idx, func(x, y int) int {
			if b.parts[x].w.start < b.parts[y].w.start {
				return -1
			} else if b.parts[x].w.start > b.parts[y].w.start {
				return 1
			}
			return x - y
		})
		cur := -1
		for _, pi := range idx {
			pt := &b.parts[pi]
			if cur < 0 || pt.w.start >= b.ivs[cur].end {
				b.ivs = append(b.ivs, interval{pid: pid, start: pt.w.start, end: pt.w.end, known: true})
				cur = len(b.ivs) - 1
			}
			iv := &b.ivs[cur]
			iv.end = max(iv.end, pt.w.end)
			iv.parts = append(iv.parts, pi)
			pt.iv = cur
			d, ok := pt.demand()
			iv.dem += d
			iv.known = iv.known && ok
		}
	}
	// Deterministic order whatever the map's: the sweep breaks ties by index.
	slices.SortFunc(b.ivs, func(x, y interval) int {
		if x.start != y.start {
			if x.start < y.start {
				return -1
			}
			return 1
		}
		return int(int64(x.pid) - int64(y.pid))
	})
	for i := range b.ivs {
		for _, pi := range b.ivs[i].parts {
			b.parts[pi].iv = i
		}
	}
}

// split shares the overlap (ns) of the busy period of b.comp among its
// intervals (interval.share).
func (b *batch) split(m Mode, overlap float64) {
	ivs := b.ivs
	if m == Concurrent || overlap == 0 {
		for _, i := range b.comp {
			ivs[i].share = ivs[i].eq
		}
		return
	}
	// Demand in the overlap r, floor f = min(r, eq): what an interval with
	// an estimate is owed whatever the others claim. The rest goes by demand above the
	// floor, then, if demands fall short, by equal shares; never more to
	// an interval than the overlap it was in.
	n := len(b.comp)
	r, caps, w := make([]float64, n), make([]float64, n), make([]float64, n)
	rest := overlap
	for k, i := range b.comp {
		iv := &ivs[i]
		r[k] = iv.r
		iv.share = min(r[k], iv.eq)
		rest -= iv.share
		caps[k] = iv.ov - iv.share
		w[k] = r[k] - iv.share
	}
	rest = b.fill(rest, w, caps)
	for k, i := range b.comp {
		w[k] = ivs[i].eq
	}
	rest = b.fill(rest, w, caps)
	for k := range w {
		w[k] = caps[k]
	}
	b.fill(rest, w, caps)
}

// fill gives x to b.comp's intervals in proportion to weights w, at most
// caps each (caps shrink by what is given), and returns what is left.
func (b *batch) fill(x float64, w, caps []float64) float64 {
	for range len(w) + 1 {
		if x <= 1e-6 {
			return x
		}
		var tw float64
		for k := range w {
			if caps[k] > 0 {
				tw += w[k]
			}
		}
		if tw <= 0 {
			return x
		}
		given := 0.0
		for k, i := range b.comp {
			if caps[k] <= 0 || w[k] <= 0 {
				continue
			}
			g := min(x*w[k]/tw, caps[k])
			caps[k] -= g
			b.ivs[i].share += g
			given += g
		}
		x -= given
	}
	return x
}

// spread gives interval iv's time (alone and shared) to its parts, by
// their demand where all are known, else by their length; a whole window
// alone in its interval, which nothing overlapped, is marked solo.
func (b *batch) spread(iv *interval) {
	total := iv.solo + iv.share
	if len(iv.parts) == 1 {
		pt := &b.parts[iv.parts[0]]
		pt.att = total
		pt.solo = iv.ov == 0 && pt.w.orig == pt.w.end-pt.w.start
		return
	}
	var sum float64
	weight := func(pt *part) float64 {
		if iv.known && iv.dem > 0 {
			d, _ := pt.demand()
			return d
		}
		return float64(pt.w.end - pt.w.start)
	}
	for _, pi := range iv.parts {
		sum += weight(&b.parts[pi])
	}
	for _, pi := range iv.parts {
		pt := &b.parts[pi]
		if sum > 0 {
			pt.att = total * weight(pt) / sum
		}
	}
}
