package hostcall

import (
	"encoding/binary"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/shm"
)

// newServer starts a Server with a hash map "h" (u32 → u64, 4 entries)
// and an array "a" (2 × u64), collecting its messages.
func newServer(t testing.TB, opts Options) (*Server, map[string]HostMap, func() []Message) {
	t.Helper()
	maps := map[string]HostMap{}
	for _, m := range []*jit.Map{
		{Name: "h", Type: jit.MapTypeHash, KeySize: 4, ValueSize: 8, MaxEntries: 4},
		{Name: "a", Type: jit.MapTypeArray, KeySize: 4, ValueSize: 8, MaxEntries: 2},
	} {
		hm, err := NewHostMap(m)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { hm.Close() })
		maps[m.Name] = hm
	}
	var mu sync.Mutex
	var msgs []Message
	s, err := New(opts, maps, func(m Message) { mu.Lock(); msgs = append(msgs, m); mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Stop() })
	return s, maps, func() []Message { mu.Lock(); defer mu.Unlock(); return append([]Message(nil), msgs...) }
}

func u32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func u64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

// call is a GPU thread's host call, by the reference requester.
type call struct {
	helper  jit.HelperID
	args    [5]uint64
	payload []byte
	want    int64
}

func mapCall(h jit.HelperID, name string, flags uint64, payload []byte, want int64) call {
	return call{h, [5]uint64{0, 0, 0, flags, jit.HostMapID(name)}, payload, want}
}

// TestServe drives a real mailbox region with requests posted the way GPU
// code posts them (shm.Mailbox.Call): printk and puts become messages,
// map helpers work on the host maps, bad requests are refused and counted.
func TestServe(t *testing.T) {
	s, maps, msgs := newServer(t, Options{Timeout: time.Second}) // not a latency test
	hOff := int64(shm.DataOffset)                                // the hash's first slot
	steps := []struct {
		name string
		call
	}{
		{"printk", call{jit.HelperTracePrintk, [5]uint64{0, 12, 7, 1 << 33, 0xff}, []byte("t=%d %lu %x\x00"), int64(len("t=7 8589934592 ff"))}},
		{"puts", call{jit.HelperPuts, [5]uint64{}, []byte("hello\x00junk"), 0}},
		{"bad format", call{jit.HelperTracePrintk, [5]uint64{}, []byte("%d %d %d %d"), -errINVAL}},
		{"hash miss", mapCall(jit.HelperMapLookupElem, "h", 0, u32(5), -errNOENT)},
		{"hash insert", mapCall(jit.HelperMapUpdateElem, "h", flagNoExist, append(u32(5), u64(99)...), 0)},
		{"hash insert again", mapCall(jit.HelperMapUpdateElem, "h", flagNoExist, append(u32(5), u64(1)...), -errEXIST)},
		{"hash hit", mapCall(jit.HelperMapLookupElem, "h", 0, u32(5), hOff)},
		{"hash delete", mapCall(jit.HelperMapDeleteElem, "h", 0, u32(5), 0)},
		{"hash deleted", mapCall(jit.HelperMapLookupElem, "h", 0, u32(5), -errNOENT)},
		{"array update", mapCall(jit.HelperMapUpdateElem, "a", flagAny, append(u32(1), u64(42)...), 0)},
		{"array lookup", mapCall(jit.HelperMapLookupElem, "a", 0, u32(1), int64(shm.DataOffset+8))},
		{"array out of range", mapCall(jit.HelperMapLookupElem, "a", 0, u32(2), -errNOENT)},
		{"array delete", mapCall(jit.HelperMapDeleteElem, "a", 0, u32(0), -errINVAL)},
		{"unknown map", mapCall(jit.HelperMapLookupElem, "nope", 0, u32(0), -errNOENT)},
		{"short key", mapCall(jit.HelperMapLookupElem, "h", 0, []byte{1}, -errINVAL)},
		{"unknown helper", call{99, [5]uint64{}, nil, -errNOTSUP}},
	}
	for i, st := range steps {
		got, err := s.Mailbox().Call(uint32(st.helper), st.args, st.payload, uint64(i))
		if err != nil || got != st.want {
			t.Errorf("%s: got %d, %v; want %d", st.name, got, err, st.want)
		}
	}
	if v, _ := maps["a"].(*arrayMap).a.Uint64(1, 0); v != 42 {
		t.Errorf("array value 1 on the host: %d, want 42", v)
	}
	m := msgs()
	if len(m) != 3 || m[0].Text != "t=7 8589934592 ff" || m[0].Caller != 0 || m[1].Text != "hello" || m[1].Helper != jit.HelperPuts {
		t.Errorf("messages %+v", m)
	}
	if c := s.Counters(); c.Served != uint64(len(steps)) || c.Invalid != 4 || c.Rejected != 0 {
		t.Errorf("counters %+v, want %d served, 4 invalid", c, len(steps))
	}
}

// TestRateLimit: requests over the burst are answered -EBUSY at once and
// counted, and never reach the sink.
func TestRateLimit(t *testing.T) {
	s, _, msgs := newServer(t, Options{Rate: 1, Burst: 3, Timeout: time.Second})
	var busy int
	for i := 0; i < 10; i++ {
		if r, _ := s.Mailbox().Call(uint32(jit.HelperPuts), [5]uint64{}, []byte("x"), 0); r == -errBUSY {
			busy++
		}
	}
	if c := s.Counters(); busy != 7 || c.Rejected != 7 || len(msgs()) != 3 {
		t.Errorf("busy %d, counters %+v, %d messages; want 7 rejected, 3 messages", busy, c, len(msgs()))
	}
}

// TestLateCounted: a request nobody answered in time is counted late when
// the host sees it.
func TestLateCounted(t *testing.T) {
	s, err := New(Options{Timeout: time.Millisecond}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if r, _ := s.Mailbox().Call(uint32(jit.HelperPuts), [5]uint64{}, []byte("x"), 0); r != -110 {
		t.Fatalf("unserved call returned %d, want -ETIMEDOUT", r)
	}
	s.Start()
	deadline := time.Now().Add(5 * time.Second)
	for s.Counters().Late != 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if c := s.Counters(); c.Late != 1 || c.Served != 1 {
		t.Errorf("counters %+v, want 1 served late", c)
	}
}

// BenchmarkRoundTrip measures a requester's round trip (post, host
// answers, read the answer) through a real mailbox region with Serve
// polling, requests back to back as a printk-heavy kernel posts them; it
// reports the median and 99th percentile.
func BenchmarkRoundTrip(b *testing.B) {
	s, _, _ := newServer(b, Options{Rate: 1e12, Burst: 1e12, Timeout: time.Second})
	mb := s.Mailbox()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := mb.Call(uint32(jit.HelperMapLookupElem), [5]uint64{0, 0, 0, 0, jit.HostMapID("a")}, u32(1), 0); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(lat[len(lat)-1].Nanoseconds()), "max-ns")
}

// BenchmarkRoundTripAfterIdle measures the first request after the
// server has backed off to its longest sleep (5 ms idle): what a kernel's
// first host call pays; it must stay well inside DefaultTimeout.
func BenchmarkRoundTripAfterIdle(b *testing.B) {
	s, _, _ := newServer(b, Options{Rate: 1e12, Burst: 1e12, Timeout: time.Second})
	mb := s.Mailbox()
	lat := make([]time.Duration, 0, b.N)
	for i := 0; i < b.N; i++ {
		time.Sleep(5 * time.Millisecond)
		t0 := time.Now()
		if _, err := mb.Call(uint32(jit.HelperMapLookupElem), [5]uint64{0, 0, 0, 0, jit.HostMapID("a")}, u32(1), 0); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(lat[len(lat)-1].Nanoseconds()), "max-ns")
}

// TestOverRateClientCostsItsRate: a client posting requests as fast as it
// can, beyond its rate, makes the server poll no more than the rate
// allows: the requests it answers (served or rejected) stay within a few
// slots per token. Guards against Serve polling without pause while
// requests keep coming.
func TestOverRateClientCostsItsRate(t *testing.T) {
	const rate, burst, slots, run = 1000, 10, 4, 300 * time.Millisecond
	s, _, _ := newServer(t, Options{Rate: rate, Burst: burst, Slots: slots, Timeout: time.Second})
	var wg sync.WaitGroup
	stop := time.Now().Add(run)
	for g := range slots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				_, _ = s.Mailbox().Call(uint32(jit.HelperPuts), [5]uint64{}, []byte("x"), uint64(g))
			}
		}()
	}
	wg.Wait()
	c := s.Counters()
	seen := c.Served // every answer, -EBUSY ones included
	t.Logf("%d requests answered in %v (%d of them -EBUSY)", seen, run, c.Rejected)
	if limit := uint64(slots * (rate*run.Seconds() + burst) * 2); seen > limit {
		t.Fatalf("%d requests answered in %v, want at most %d (%d slots per token)", seen, run, limit, slots)
	}
}
