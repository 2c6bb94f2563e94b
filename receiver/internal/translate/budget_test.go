package translate

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// namedLaunches adds, for each name, a KernelName record for handle
// first+i and a launch of it (id first+i+1), with its completion when
// complete.
func namedLaunches(s *stream, first uint64, names []string, complete bool) {
	for i, n := range names {
		fn := first + uint64(i)
		s.add(&record.KernelName{Function: fn, Name: n})
		s.add(&record.Launch{LaunchID: fn + 1, Function: fn, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}})
		if complete {
			s.add(&record.Completion{LaunchID: fn + 1})
		}
	}
}

func kernelNames(prefix string, n, size int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
		out[i] += strings.Repeat("x", max(0, size-len(out[i])))
	}
	return out
}

// seriesByProc maps "pid kernel device" to its launches and copy bytes.
func seriesByProc(md pmetric.Metrics) map[string]int64 {
	got := map[string]int64{}
	for i := range md.ResourceMetrics().Len() {
		rm := md.ResourceMetrics().At(i)
		pid, ok := rm.Resource().Attributes().Get("process.pid")
		if !ok {
			continue
		}
		eachMetric(pmetricOf(rm), func(m pmetric.Metric) {
			if m.Name() != MetricLaunches && m.Name() != MetricMemcpyBytes {
				return
			}
			for k := range m.Sum().DataPoints().Len() {
				a := m.Sum().DataPoints().At(k).Attributes()
				name, ok := a.Get("cuda.kernel.name")
				if !ok {
					name, _ = a.Get("cuda.memcpy.kind")
				}
				d, _ := a.Get("cuda.device.index")
				got[fmt.Sprintf("%d %s %d", pid.Int(), name.Str(), d.Int())] += m.Sum().DataPoints().At(k).IntValue()
			}
		})
	}
	return got
}

// budgetProc is one process of a budget test: its source, pid and uid,
// the kernels it launches (k0, k1, ...), and whether it leaves after.
type budgetProc struct {
	src, pid, uid uint32
	kernels       int
	leave         bool
}

// TestSeriesShares: a process holds at most a quarter of MaxSeries, a
// uid's processes half; the series of processes that left and were
// emitted are given back when a live process needs room. Records beyond a
// share count in their process's overflow series.
func TestSeriesShares(t *testing.T) {
	tests := []struct {
		name   string
		procs  []budgetProc
		want   map[string]int64 // series of the processes still there
		folded uint64
	}{
		{"a process over its share folds, another keeps its own",
			[]budgetProc{{src: 1, pid: 10, uid: 1, kernels: 3}, {src: 2, pid: 20, uid: 2, kernels: 2}},
			map[string]int64{"10 k0 0": 1, "10 k1 0": 1, "10 other -1": 1, "20 k0 0": 1, "20 k1 0": 1}, 1},
		{"a uid over its share folds its next process, another uid keeps its own",
			[]budgetProc{{src: 1, pid: 10, uid: 1, kernels: 2}, {src: 2, pid: 20, uid: 1, kernels: 2},
				{src: 3, pid: 30, uid: 1, kernels: 1}, {src: 4, pid: 40, uid: 2, kernels: 1}},
			map[string]int64{"10 k0 0": 1, "10 k1 0": 1, "20 k0 0": 1, "20 k1 0": 1, "30 other -1": 1, "40 k0 0": 1}, 1},
		{"a uid's processes that left give their share back",
			[]budgetProc{{src: 1, pid: 10, uid: 1, kernels: 2, leave: true}, {src: 2, pid: 20, uid: 1, kernels: 2, leave: true},
				{src: 3, pid: 30, uid: 1, kernels: 2}},
			map[string]int64{"20 k0 0": 1, "20 k1 0": 1, "30 k0 0": 1, "30 k1 0": 1}, 0},
		{"processes that left give the node's series back",
			[]budgetProc{{src: 1, pid: 10, uid: 1, kernels: 2, leave: true}, {src: 2, pid: 20, uid: 1, kernels: 2},
				{src: 3, pid: 30, uid: 2, kernels: 2}, {src: 4, pid: 40, uid: 2, kernels: 2}, {src: 5, pid: 50, uid: 3, kernels: 2}},
			map[string]int64{"20 k0 0": 1, "20 k1 0": 1, "30 k0 0": 1, "30 k1 0": 1, "40 k0 0": 1, "40 k1 0": 1,
				"50 k0 0": 1, "50 k1 0": 1}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// 8 series: 2 per process, 4 per uid.
			tr := newTr(Options{Process: ProcessOptions{MaxSeries: 8}})
			now := time.Now()
			for _, p := range tc.procs {
				tr.Connect(p.src, Peer{PID: p.pid, UID: p.uid, Exe: "app", Start: 1})
				var s stream
				namedLaunches(&s, 0, kernelNames("k", p.kernels, 0), true)
				feedSrc(t, tr, p.src, &s, now)
				if p.leave {
					tr.Disconnect(p.src, now)
					tr.Metrics(now, nil) // emitted since it left: its series may go
				}
			}
			got := seriesByProc(tr.Metrics(now, nil))
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("series %v\nwant %v", got, tc.want)
			}
			if c := tr.Counters(); c.SeriesFolded != tc.folded {
				t.Errorf("%d records folded, want %d", c.SeriesFolded, tc.folded)
			}
		})
	}
}

// TestNameBudget: the kernel names one client's handles hold are bounded
// by ClientBudget.NameBytes. Over it, the client's idle handles are
// forgotten (counted); a name that finds the budget held by pending
// launches counts under "other" (counted); another client keeps its exact
// names, and a client that goes frees its budget.
func TestNameBudget(t *testing.T) {
	const budget = 16 << 10
	tests := []struct {
		name             string
		complete         bool // the flooding client's launches complete (its handles go idle)
		evicted, refused bool
	}{
		{"idle handles are evicted", true, true, false},
		{"names beyond pending launches' handles are refused", false, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTr(Options{LaunchTimeout: time.Hour, Process: ProcessOptions{Budget: ClientBudget{NameBytes: budget}}})
			now := time.Now()
			tr.Connect(1, Peer{PID: 10, UID: 1, Exe: "flood", Start: 1})
			tr.Connect(2, Peer{PID: 20, UID: 1, Exe: "honest", Start: 1})
			var flood, honest stream
			namedLaunches(&flood, 0, kernelNames("big", 64, 1000), tc.complete)
			namedLaunches(&honest, 0, []string{"gemm"}, true)
			feedSrc(t, tr, 1, &flood, now)
			feedSrc(t, tr, 2, &honest, now)
			if h := tr.clients.get(1).kernels; h.bytes > budget {
				t.Errorf("the flooding client holds %d bytes of names, budget %d", h.bytes, budget)
			}
			c := tr.Counters()
			if (c.NamesEvicted > 0) != tc.evicted || (c.NamesRefused > 0) != tc.refused {
				t.Errorf("%d handles evicted, %d names refused; want evictions %v, refusals %v",
					c.NamesEvicted, c.NamesRefused, tc.evicted, tc.refused)
			}
			tr.Expire(now.Add(2 * time.Hour))
			got := seriesByProc(tr.Metrics(now, nil))
			if got["20 gemm 0"] != 1 {
				t.Errorf("the honest client's launches %v, want gemm's", got)
			}
			if tc.refused && got["10 other -1"]+got["10 other 0"] == 0 {
				t.Errorf("no launch of the flooding client under other: %v", got)
			}
			// Gone, the client frees its handles; a new session of the
			// process gets a budget of its own.
			tr.Disconnect(1, now)
			if tr.clients.get(1) != nil {
				t.Fatal("client 1's state kept after it left")
			}
			tr.Connect(3, Peer{PID: 10, UID: 1, Exe: "flood", Start: 1})
			var again stream
			namedLaunches(&again, 100, []string{"k0"}, true)
			feedSrc(t, tr, 3, &again, now)
			if k, ok := tr.clients.get(3).kernels.get(100); !ok || k.name != "k0" {
				t.Errorf("the new session's handle is %+v, want k0", k)
			}
		})
	}
}

// TestPendingShares: with MaxPendingLaunches pending, the source that
// holds the most gives up its oldest launch, so two floods that each hold
// less than half the bound cannot evict a small client's launches.
func TestPendingShares(t *testing.T) {
	const limit = 100
	tr := newTr(Options{MaxPendingLaunches: limit, LaunchTimeout: time.Hour})
	now := time.Now()
	var victim stream
	for id := range uint64(10) {
		victim.add(&record.Launch{LaunchID: id + 1, Function: 1, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}})
	}
	feedSrc(t, tr, 1, &victim, now)
	for i := range 2000 {
		src := uint32(2 + i%2)
		l := &record.Launch{LaunchID: uint64(i + 1), Function: 1, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}}
		if err := tr.Handle(src, l.Append(nil), now); err != nil {
			t.Fatal(err)
		}
	}
	if got := tr.launches.pending.bySrc[1].pending; got != 10 {
		t.Errorf("the small client has %d launches pending, want its 10", got)
	}
	if p := tr.Pending(); p > limit {
		t.Errorf("%d pending, bound %d", p, limit)
	}
}

// TestNameBudgetMemory: 16 sessions naming 4,096 handles each with 4 KiB
// names hold about their budgets (16 × 1 MiB) and the names cache
// (8 MiB), not the 16 × 4,096 × 4 KiB (256 MiB+) they sent.
func TestNameBudgetMemory(t *testing.T) {
	const sessions, handles = 16, 4096
	tr := newTr(Options{})
	now := time.Now()
	pad := strings.Repeat("h", record.MaxKernelNameLen)
	before := heapInUse()
	for src := uint32(1); src <= sessions; src++ {
		tr.Connect(src, Peer{PID: 100 + src, UID: 1, Exe: "handles", Start: 1})
		for fn := range uint64(handles) {
			name := fmt.Sprintf("hostile_%02d_%05d_", src, fn)
			k := &record.KernelName{Function: fn + 1, Name: name + pad[len(name):]}
			if err := tr.Handle(src, k.Append(nil), now); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := heapInUse()
	t.Logf("heap %+d MiB, %d handles evicted", (int64(got)-int64(before))>>20, tr.Counters().NamesEvicted)
	if got > before+48<<20 {
		t.Errorf("heap grew by %d MiB, want ≤ 48 (16 budgets of 1 MiB and the 8 MiB names cache)", (got-before)>>20)
	}
	if c := tr.Counters(); c.NamesEvicted == 0 {
		t.Error("no handle evicted")
	}
}

// TestProcessNameBytes: a process's series hold at most maxProcNameBytes
// of kernel names; its names beyond them count under its "other",
// another process keeps its own.
func TestProcessNameBytes(t *testing.T) {
	tr := newTr(Options{})
	now := time.Now()
	long := kernelNames("long", 100, record.MaxKernelNameLen)
	tr.Connect(1, Peer{PID: 10, UID: 1, Exe: "long", Start: 1})
	tr.Connect(2, Peer{PID: 20, UID: 1, Exe: "honest", Start: 1})
	var s1, s2 stream
	namedLaunches(&s1, 0, long, true)
	namedLaunches(&s2, 0, []string{"gemm"}, true)
	feedSrc(t, tr, 1, &s1, now)
	feedSrc(t, tr, 2, &s2, now)
	got := seriesByProc(tr.Metrics(now, nil))
	own := maxProcNameBytes / record.MaxKernelNameLen
	if got["10 other 0"] != int64(len(long)-own) || got["20 gemm 0"] != 1 {
		t.Errorf("process 10: %d launches under other, want %d; process 20's gemm: %d, want 1",
			got["10 other 0"], len(long)-own, got["20 gemm 0"])
	}
	if c := tr.Counters(); c.NamesRefused != uint64(len(long)-own) {
		t.Errorf("%d names refused, want %d", c.NamesRefused, len(long)-own)
	}
}
