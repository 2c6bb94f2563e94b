package receiver

import (
	"slices"
)

// Fair polling. One poll pass resolves at most passBudget tickets of the
// clients' launch rings, shared among the sources that have records
// waiting by water-filling: a source with less than an even share gets
// all it has, the rest is shared evenly among the others, and no source
// gets less than minShare. A busy client that writes faster than its
// share waits for the next pass (its ring may fill and drop, counted); an
// honest client's records are read every pass. A pass that left records
// waiting is followed by the next at once, not at the next tick, so the
// budget bounds the time a pass takes (and a shutdown waits for one)
// without bounding how much the collector can read.
const (
	passBudget = 1 << 14
	minShare   = 256
)

// backlog returns the tickets waiting in g, at most its slot count (the
// head is written by the client).
func backlog(g *ringReader) int {
	head, pos := g.ring.Stats().Head, g.cons.Position()
	if g.frozen {
		head = min(head, g.stopAt)
	}
	if head <= pos {
		return 0
	}
	return int(min(head-pos, uint64(g.ring.Slots())))
}

// planShares returns, for each of the given sources in order, the
// tickets of its launch ring this pass may resolve (budget shared as the
// package comment says).
func planShares(sources []*source, budget int) []int {
	shares := make([]int, len(sources))
	waiting := make([]int, 0, len(sources))
	for i, s := range sources {
		shares[i] = backlog(s.launch)
		if shares[i] > 0 {
			waiting = append(waiting, shares[i])
		}
	}
	limit := fillLevel(waiting, budget)
	for i := range shares {
		shares[i] = min(shares[i], limit)
	}
	return shares
}

// fillLevel returns the largest per-source limit such that the sum of
// min(w, limit) over waiting stays within budget, but at least minShare.
func fillLevel(waiting []int, budget int) int {
	slices.Sort(waiting)
	left := budget
	for i, w := range waiting {
		even := left / (len(waiting) - i)
		if w > even {
			return max(even, minShare)
		}
		left -= w
	}
	return max(budget, minShare) // everyone gets all it has
}

// rotate returns sources starting at index turn (mod their count): the
// order a pass reads them in, one further each pass, so a pass cut short
// by a deadline does not always cut the same clients.
func rotate(sources []*source, turn uint32) []*source {
	if len(sources) < 2 {
		return sources
	}
	k := int(turn % uint32(len(sources)))
	return append(sources[k:len(sources):len(sources)], sources[:k]...)
}
