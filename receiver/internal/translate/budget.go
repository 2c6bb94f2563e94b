package translate

// Per-client budgets: what one client can make the translator hold is
// bounded by its own share, never by what other clients took first.
//
//   - Kernel names, per source (one agent session): the bytes its
//     function handles hold (handleTable), ClientBudget.NameBytes. A name
//     that does not fit first evicts the handles no pending launch uses
//     (BudgetCounters.NamesEvicted); if it still does not fit, it is
//     refused: the handle's launches count under "other"
//     (BudgetCounters.NamesRefused). The handles go with the source.
//   - Kernel names with series of their own, per process: the first
//     Options.MaxKernelNames, of at most maxProcNameBytes together.
//   - Metric series, per process and per uid (seriesStore.take): a
//     process holds at most 1/processShareDiv of Options.Process.MaxSeries,
//     the processes of one uid together at most 1/uidShareDiv; the node's
//     MaxSeries is a memory bound whose series held by processes that left
//     (and were emitted since) are given back when a live process needs
//     room. Records beyond a share count in their process's overflow
//     series (Counters.SeriesFolded).
//   - Pending launches, per source (launchTable.makeRoom): when
//     MaxPendingLaunches are pending, the source that holds the most gives
//     up its oldest, so a source holding its fair share or less loses
//     none to a flood of another's.

import (
	"github.com/gpuprobe/gpuprobe/config"
)

// ClientBudget bounds what one client makes the translator hold.
type ClientBudget struct {
	// NameBytes bounds the kernel names one source's function handles
	// hold: each handle costs its mangled and demangled names' bytes plus
	// handleOverhead (limits::max_kernel_name_bytes; default
	// config.DefaultMaxKernelNameBytes).
	NameBytes int
}

// BudgetCounters count what the per-client budgets evicted or refused.
type BudgetCounters struct {
	NamesEvicted uint64 // function handles forgotten to fit a name within their source's budget (a later launch of one is named by its handle)
	NamesRefused uint64 // kernel names not kept, their launches counted under "other": the source's budget was held by handles of pending launches, or their process's series names reached maxProcNameBytes
}

// Shares of Options.Process.MaxSeries: one process may hold 1/processShareDiv
// of them, the processes of one uid together 1/uidShareDiv, so that no
// process can fill its uid's share and no uid the node.
const (
	processShareDiv = 4
	uidShareDiv     = 2
)

// handleOverhead is what one function handle costs beyond its names: the
// kernel, its map entry and string headers, rounded up.
const handleOverhead = 128

// Bounds of the name caches: function handles remembered per source, and
// the demangled names cached for all sources (count and bytes).
const (
	maxKernelHandles   = 1 << 14
	maxNameCache       = 1 << 14
	maxNameCacheBytes  = 8 << 20
	nameCacheEntryCost = 64 // a cache entry beyond its two strings' bytes
)

// handleTable is one source's function handle → kernel bindings and the
// bytes they hold.
type handleTable struct {
	byFn  map[uint64]*kernel
	bytes int // Σ cost of byFn's kernels
}

// cost is what kernel k holds against its source's name budget: none
// for a handle refused its name (it holds no name; maxKernelHandles
// bounds those).
func (k *kernel) cost() int {
	if k.refused {
		return 0
	}
	return len(k.mangled) + len(k.name) + handleOverhead
}

// refuse makes k, which found no room, count under proc's "other".
func (k *kernel) refuse(proc *procSeries) {
	k.mangled, k.name, k.series, k.refused = OtherKernel, OtherKernel, proc.other, true
}

// get returns the kernel handle fn is bound to.
func (h *handleTable) get(fn uint64) (*kernel, bool) {
	k, ok := h.byFn[fn]
	return k, ok
}

// put binds fn to k, which fits (room said so) or was refused; a refused
// one is not kept when maxKernelHandles are.
func (h *handleTable) put(fn uint64, k *kernel) {
	if old, ok := h.byFn[fn]; ok {
		h.bytes -= old.cost()
	} else if len(h.byFn) >= maxKernelHandles {
		return
	}
	h.byFn[fn] = k
	h.bytes += k.cost()
}

// room makes room for a kernel of cost n bound to fn within budget bytes
// and maxKernelHandles handles. When it does not fit, it forgets handles
// that no pending launch uses (but fn), counting each in *evicted, until
// it fits with an eighth of the budget to spare (so that a client at its
// budget does not make every name record rescan the table). It reports
// whether n fits. A later launch of a forgotten handle is named by its
// handle; pending launches keep their kernel.
func (h *handleTable) room(fn uint64, n, budget int, evicted *uint64) bool {
	fits := func(spare int) bool {
		held, count := h.bytes, len(h.byFn)
		if old, ok := h.byFn[fn]; ok {
			held, count = held-old.cost(), count-1
		}
		return held+n+spare <= budget && count+spare/handleOverhead < maxKernelHandles
	}
	if fits(0) {
		return true
	}
	spare := min(budget/8, maxKernelHandles/8*handleOverhead)
	for f, k := range h.byFn {
		if fits(spare) {
			break
		}
		if k.live == 0 && f != fn {
			h.bytes -= k.cost()
			delete(h.byFn, f)
			*evicted++
		}
	}
	return fits(0)
}

// nameBudget is ClientBudget.NameBytes, its default where unset.
func (o *Options) nameBudget() int {
	if o.Process.Budget.NameBytes < 1 {
		return config.DefaultMaxKernelNameBytes
	}
	return o.Process.Budget.NameBytes
}

// shareFull says whether process p may take no more series: it holds its
// process share, or its uid its uid share (when neither the uid's nor
// the node's gone processes can give room back: evictGone).
func (st *seriesStore) shareFull(p *procSeries) bool {
	n := st.o.Process.MaxSeries
	if p.held.series >= max(1, n/processShareDiv) {
		return true
	}
	if st.byUID[p.uid] >= max(1, n/uidShareDiv) &&
		(st.evictable[p.uid] == 0 || !st.evictGone(func(q *procSeries) bool { return q.uid == p.uid })) {
		return true
	}
	return st.nseries >= n && !st.evictGone(func(*procSeries) bool { return true })
}

// procHeld is what one process holds against its shares.
type procHeld struct {
	series    int // its series counted in seriesStore.nseries and byUID
	nameBytes int // bytes of its series' kernel names, ≤ maxProcNameBytes
	frames    int // its series' launches-by-frame points, ≤ maxFramesPerProc (frames.go)
}

// maxProcNameBytes bounds the kernel names of one process's series (its
// first Options.MaxKernelNames names, kept while the process is): 1 KiB
// a name on average with the default 100, so 1024 processes hold at most
// 128 MiB of them whatever their names' lengths. A name beyond it counts
// under "other" (BudgetCounters.NamesRefused).
const maxProcNameBytes = 128 << 10

// countEvictable counts process p (gone and emitted since) in or out of
// evictGone's candidates.
func (st *seriesStore) countEvictable(p *procSeries, n int) {
	if st.evictable[p.uid] += n; st.evictable[p.uid] <= 0 {
		delete(st.evictable, p.uid)
	}
}
