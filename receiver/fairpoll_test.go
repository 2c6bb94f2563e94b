package receiver

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"

	"github.com/gpuprobe/gpuprobe/receiver/internal/metadatatest"
)

func TestFillLevel(t *testing.T) {
	many := make([]int, 1000)
	for i := range many {
		many[i] = 4096
	}
	tests := []struct {
		name    string
		waiting []int
		budget  int
		want    int
	}{
		{"nothing waiting", nil, 16384, 16384},
		{"all fit", []int{100, 200}, 16384, 16384},
		{"small ones get all, busy ones share the rest", []int{100000, 100, 100000}, 16384, 8142},
		{"even split", []int{8192, 8192, 8192, 8192}, 16384, 4096},
		{"never below minShare", many, 16384, minShare},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fillLevel(append([]int(nil), tt.waiting...), tt.budget); got != tt.want {
				t.Errorf("fillLevel(%v…, %d) = %d, want %d", tt.waiting[:min(len(tt.waiting), 4)], tt.budget, got, tt.want)
			}
		})
	}
}

// TestPlanSharesHonestReadEveryPass: beside clients whose rings are full,
// a client with a few records gets them all in one pass, and the pass
// stays within its budget.
func TestPlanSharesHonestReadEveryPass(t *testing.T) {
	cfg := testConfig(t)
	var sources []*source
	for i, n := range []int{2048, 10, 2048, 2048} {
		g := newTestRing(t, cfg.Buffers.SlotSize, 2048)
		produceUntil(t, g, uint32(100+i), n)
		sources = append(sources, &source{id: uint32(i + 1), launch: newRingReader(g, false)})
	}
	const budget = 1024
	shares := planShares(sources, budget)
	if shares[1] != 10 {
		t.Errorf("the honest client's share is %d, want its 10 records", shares[1])
	}
	total := 0
	for i, s := range shares {
		total += s
		if i != 1 && s != (budget-10)/3 {
			t.Errorf("busy client %d: share %d, want %d", i, s, (budget-10)/3)
		}
	}
	if total > budget {
		t.Errorf("a pass resolves %d tickets, budget %d", total, budget)
	}
}

func TestRotate(t *testing.T) {
	s := []*source{{id: 1}, {id: 2}, {id: 3}}
	for turn, want := range [][]uint32{{1, 2, 3}, {2, 3, 1}, {3, 1, 2}, {1, 2, 3}} {
		got := rotate(append([]*source(nil), s...), uint32(turn))
		for i := range got {
			if got[i].id != want[i] {
				t.Fatalf("turn %d: order %v…, want %v", turn, got[i].id, want)
			}
		}
	}
}

// TestShutdownFreezesRings: records a client writes after the first
// handle's Shutdown began are counted as dropped, not read, so the
// shutdown's work is bounded by what the rings held when it began.
func TestShutdownFreezesRings(t *testing.T) {
	tel := componenttest.NewTelemetry()
	defer func() { _ = tel.Shutdown(context.Background()) }()
	cfg := testConfig(t)
	cfg.PollInterval = time.Minute // nothing read before Shutdown
	cfg.Limits.SpansPerSecond = 0
	cfg.ShutdownTimeout = 5 * time.Minute // the accounting, not the deadline, is tested
	tr, mr, traces, _ := startBothWith(t, metadatatest.NewSettings(tel), cfg)
	r := tr.(*handle).r
	g := newTestRing(t, cfg.Buffers.SlotSize, 1024)
	before, _ := produceUntil(t, g, 1000, 300)
	r.AddRing(g)
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	after, _ := produceUntil(t, g, 1001, 200)
	if err := mr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := launchSpans(traces); n != before {
		t.Errorf("%d launch spans, want %d (written before the shutdown)", n, before)
	}
	if n := internalSum(tel, "otelcol_gpuprobe.receiver.records.read"); n != int64(before) {
		t.Errorf("records.read %d, want %d", n, before)
	}
	if n := internalSum(tel, "otelcol_gpuprobe.receiver.records.dropped"); n != int64(after) {
		t.Errorf("records.dropped %d, want %d (written after the shutdown began)", n, after)
	}
}

// TestPollPassFair: beside eight clients whose rings hold more than a
// pass's budget, one poll pass reads all of a client with a few records,
// shares the budget evenly among the others, and says records are left
// for the next pass, so that a pass's time does not grow with the
// busiest clients' backlog.
func TestPollPassFair(t *testing.T) {
	cfg := testConfig(t)
	cfg.PollInterval = time.Minute // the test runs the pass itself
	tr, mr, _, _ := startBoth(t, cfg)
	defer shutdownWithin(t, shutdownBound+time.Second, tr, mr)
	r := tr.(*handle).r
	const busy, each, few = 8, 4096, 10
	var fewID uint32
	for i := range busy + 1 {
		g := newTestRing(t, cfg.Buffers.SlotSize, each)
		n := each
		if i == busy {
			n = few
		}
		if p, _ := produceUntil(t, g, uint32(2000+i), n); p != n {
			t.Fatalf("ring %d: %d of %d published", i, p, n)
		}
		if id := r.AddRing(g); i == busy {
			fewID = id
		}
	}
	r.mu.Lock()
	sources := append([]*source(nil), r.srcs.list...)
	r.mu.Unlock()
	if !r.pollOnce(context.Background(), time.Now(), false, false) {
		t.Error("the pass says nothing is left, with 8 rings holding more than its budget")
	}
	share := (passBudget - few) / busy
	total := 0
	for _, s := range sources {
		read := int(s.launch.cons.Position())
		total += read
		want := share
		if s.id == fewID {
			want = few
		}
		if read != want {
			t.Errorf("source %d: %d records read in one pass, want %d", s.id, read, want)
		}
	}
	if total > passBudget {
		t.Errorf("one pass read %d records, budget %d", total, passBudget)
	}
}
