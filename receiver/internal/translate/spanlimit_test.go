package translate

import (
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

func TestTokenBucket(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type step struct {
		at   time.Duration // after t0
		n    int
		want bool
	}
	tests := []struct {
		name  string
		rate  float64
		steps []step
	}{
		{"burst then empty", 3, []step{{0, 1, true}, {0, 1, true}, {0, 1, true}, {0, 1, false}}},
		{"refills at rate", 10, []step{{0, 10, true}, {0, 1, false}, {100 * time.Millisecond, 1, true}, {100 * time.Millisecond, 1, false}}},
		{"never above burst", 5, []step{{0, 1, true}, {time.Hour, 5, true}, {time.Hour, 1, false}}},
		{"trace larger than burst passes a full bucket, then debt", 4,
			[]step{{0, 10, true}, {time.Second, 1, false}, {1750 * time.Millisecond, 1, true}, {1750 * time.Millisecond, 1, false}}},
		{"partial trace needs its spans", 4, []step{{0, 2, true}, {0, 3, false}, {0, 2, true}, {0, 1, false}}},
		{"clock going back earns nothing", 2, []step{{time.Second, 2, true}, {0, 1, false}, {time.Second, 1, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b tokenBucket
			for i, s := range tt.steps {
				if got := b.take(t0.Add(s.at), s.n, tt.rate); got != s.want {
					t.Fatalf("step %d (+%v, %d spans): %v, want %v (tokens %.2f)", i, s.at, s.n, got, s.want, b.tokens)
				}
			}
		})
	}
}

// TestSpanLimitPerProcess floods one process's copies past the cap: its
// spans stop at the burst and are counted, the other process keeps
// every span, and both processes' metrics count every copy.
func TestSpanLimitPerProcess(t *testing.T) {
	now := time.Unix(2000, 0)
	var capped []uint32
	tr := newTr(Options{SpanLimit: SpanLimitOptions{PerSecond: 10, Now: func() time.Time { return now },
		OnCapped: func(pid uint32) { capped = append(capped, pid) }}})
	const flood, quiet = 100, 5
	for i := range flood {
		handle(t, tr, 1, &record.Memcpy{PID: 7, Bytes: 10, StartNS: uint64(i), EndNS: uint64(i) + 1, Kind: record.MemcpyHostToDevice})
		if i < quiet {
			handle(t, tr, 2, &record.Memcpy{PID: 8, Bytes: 10, StartNS: uint64(i), EndNS: uint64(i) + 1, Kind: record.MemcpyHostToDevice})
		}
	}
	perPID := map[int64]int{}
	td := tr.TakeTraces()
	for i := range td.ResourceSpans().Len() {
		rs := td.ResourceSpans().At(i)
		pid, _ := rs.Resource().Attributes().Get("process.pid")
		perPID[pid.Int()] += rs.ScopeSpans().At(0).Spans().Len()
	}
	if perPID[7] != 10 || perPID[8] != quiet {
		t.Errorf("spans per pid %v, want 7: 10 (the burst), 8: %d", perPID, quiet)
	}
	if len(capped) != 1 || capped[0] != 7 {
		t.Errorf("OnCapped calls %v, want one for pid 7", capped)
	}
	md := tr.Metrics(now, nil)
	var limited map[int64]int64
	bytes := map[string]uint64{}
	eachMetric(md, func(m pmetric.Metric) {
		switch m.Name() {
		case MetricSpansRateLimited:
			limited = map[int64]int64{}
			for i := range m.Sum().DataPoints().Len() {
				dp := m.Sum().DataPoints().At(i)
				pid, _ := dp.Attributes().Get("process.pid")
				limited[pid.Int()] = dp.IntValue()
			}
		case MetricMemcpyBytes:
			for i := range m.Sum().DataPoints().Len() {
				bytes[m.Name()] += uint64(m.Sum().DataPoints().At(i).IntValue())
			}
		}
	})
	if len(limited) != 1 || limited[7] != flood-10 {
		t.Errorf("%s = %v, want only pid 7: %d", MetricSpansRateLimited, limited, flood-10)
	}
	if got := bytes[MetricMemcpyBytes]; got != 10*(flood+quiet) {
		t.Errorf("memcpy bytes %d, want every copy's, %d", got, 10*(flood+quiet))
	}
	// A second later the bucket holds a second's worth again.
	now = now.Add(time.Second)
	handle(t, tr, 1, &record.Memcpy{PID: 7, Bytes: 10, StartNS: 1000, EndNS: 1001, Kind: record.MemcpyHostToDevice})
	if n := tr.SpanCount(); n != 1 {
		t.Errorf("spans after a second: %d, want 1", n)
	}
}

// TestSpanLimitLaunchCounted checks that a launch whose trace is capped
// still counts in the launch metrics, and its spans in the drop count.
func TestSpanLimitLaunchCounted(t *testing.T) {
	now := time.Unix(3000, 0)
	tr := newTr(Options{SpanLimit: SpanLimitOptions{PerSecond: 1, Now: func() time.Time { return now }}})
	var s stream
	s.calibrate(0)
	s.add(&record.KernelName{Function: 1, Name: "k"})
	s.launch(1, 1, 10_000, 1, 32, 0, true)
	s.launch(2, 1, 20_000, 1, 32, 0, true)
	feed(t, tr, &s, now)
	tr.Expire(now.Add(time.Minute))
	roots := spanByName(tr.TakeTraces())["k"]
	if len(roots) != 1 {
		t.Fatalf("%d launch spans, want 1 (the second is over the cap)", len(roots))
	}
	pts := metricPoints(tr.Metrics(now, nil))
	if pts[MetricLaunches]["k"] != 2 {
		t.Errorf("launches %v, want k: 2", pts[MetricLaunches])
	}
	// The launch, its launch call and its completion.
	if got := pts[MetricSpansRateLimited][""]; got != 3 {
		t.Errorf("%s = %d, want 3", MetricSpansRateLimited, got)
	}
}

func TestSpanLimitOff(t *testing.T) {
	tr := newTr(Options{})
	for i := range 1000 {
		handle(t, tr, 1, &record.Memcpy{PID: 7, Bytes: 1, StartNS: uint64(i), EndNS: uint64(i) + 1})
	}
	if n := tr.SpanCount(); n != 1000 {
		t.Errorf("%d spans, want all 1000 without a cap", n)
	}
}

func handle(t *testing.T, tr *Translator, src uint32, r interface{ Append([]byte) []byte }) {
	t.Helper()
	if err := tr.Handle(src, r.Append(nil), time.Now()); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkMemcpySpans is the cost of a copy's span without the cap,
// under a cap never reached (kept), and over it (dropped and counted).
func BenchmarkMemcpySpans(b *testing.B) {
	for _, bc := range []struct {
		name string
		rate int
	}{{"nocap", 0}, {"kept", 1 << 30}, {"dropped", 1}} {
		b.Run(bc.name, func(b *testing.B) {
			tr := newTr(Options{SpanLimit: SpanLimitOptions{PerSecond: bc.rate}})
			rec := (&record.Memcpy{PID: 7, Bytes: 1, StartNS: 1, EndNS: 2}).Append(nil)
			now := time.Now()
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if err := tr.Handle(1, rec, now); err != nil {
					b.Fatal(err)
				}
				if i%1024 == 1023 {
					tr.TakeTraces()
				}
			}
		})
	}
}
