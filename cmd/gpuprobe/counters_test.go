package main

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
	"go.uber.org/zap"
)

const testHeader = `{"type":"meta","device":1,"uuid":"101112131415161718191a1b1c1d1e1f","name":"Mock GPU","chip":"MOCK100","interval_ns":1000,` +
	`"metrics":["sm__throughput.avg.pct_of_peak_sustained_elapsed","dram__bytes_read.sum.per_second"],"keys":["a","b"],"left_out":{},` +
	`"clock":{"realtime_ns":5,"monotonic_ns":500000,"cupti_ns":1000000}}`

// fakePublisher keeps what forward published, decoded.
type fakePublisher struct {
	sets    []record.CounterSet
	samples []record.CounterSample
	full    bool // every sample dropped, as by a full ring
}

func (f *fakePublisher) set(b []byte) shm.ProduceResult {
	var s record.CounterSet
	if err := s.Decode(b); err != nil {
		panic(err)
	}
	f.sets = append(f.sets, s)
	return shm.Published
}

func (f *fakePublisher) sample(b []byte) shm.ProduceResult {
	if f.full {
		return shm.Dropped
	}
	var s record.CounterSample
	if err := s.Decode(b); err != nil {
		panic(err)
	}
	f.samples = append(f.samples, s)
	return shm.Published
}

func sampleLine(start, end uint64, v ...float64) string {
	vs := make([]string, len(v))
	for i, x := range v {
		vs[i] = fmt.Sprint(x)
	}
	return fmt.Sprintf(`{"type":"sample","start":%d,"end":%d,"v":[%s]}`, start, end, strings.Join(vs, ","))
}

// TestForward: the header becomes a set with the GPU's UUID, samples move
// onto CLOCK_MONOTONIC (offset −500000 from the header's clock), a gap
// flags lost samples, and each kind of bad line is counted and skipped.
func TestForward(t *testing.T) {
	lines := []string{
		testHeader,
		sampleLine(1_000_000, 1_001_000, 1, 2),
		"not json",
		sampleLine(1_001_000, 1_002_000, 1),    // one value, two metrics
		sampleLine(1_002_000, 1_001_000, 1, 2), // ends before it starts
		sampleLine(1_000_500, 1_001_500, 1, 2), // overlaps the previous
		`{"type":"sample","start":1002000,"end":1003000,"v":[nan,1]}`, // not JSON: null is
		`{"type":"weird"}`,
		testHeader, // a second header
		`{"type":"sample","start":1001000,"end":1002000,"v":[3,4]}` + strings.Repeat(" ", maxCounterLine),
		sampleLine(1_001_000, 1_002_000, 3, 4),
		`{"type":"sample","start":1005000,"end":1006000,"v":[5,null]}`, // 3 µs gap: samples lost
		`{"type":"end","samples":3,"clock":{"monotonic_ns":600000,"cupti_ns":1100100}}`,
	}
	var pub fakePublisher
	st, err := forward(strings.NewReader(strings.Join(lines, "\n")), &pub, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if len(pub.sets) != 1 || pub.sets[0].UUIDString() != "10111213-1415-1617-1819-1a1b1c1d1e1f" || pub.sets[0].Device != 1 || pub.sets[0].IntervalNS != 1000 {
		t.Fatalf("sets %+v", pub.sets)
	}
	want := []record.CounterSample{
		{StartNS: 500_000, EndNS: 501_000, Device: 1, Values: []float64{1, 2}},
		{StartNS: 501_000, EndNS: 502_000, Device: 1, Values: []float64{3, 4}},
		{StartNS: 505_000, EndNS: 506_000, Device: 1, Values: []float64{5, math.NaN()}, Flags: record.CounterOverflowBefore},
	}
	if len(pub.samples) != len(want) {
		t.Fatalf("%d samples published, want %d: %+v", len(pub.samples), len(want), pub.samples)
	}
	for i, w := range want {
		g := pub.samples[i]
		if g.StartNS != w.StartNS || g.EndNS != w.EndNS || g.Device != w.Device || g.Flags != w.Flags ||
			fmt.Sprint(g.Values) != fmt.Sprint(w.Values) || g.SetHash != pub.sets[0].Hash() {
			t.Errorf("sample %d = %+v, want %+v", i, g, w)
		}
	}
	if st.bad != 8 || st.published != 4 || st.drift != -100 {
		t.Errorf("stats %+v: want 8 bad lines, 4 records published, drift -100 ns", st)
	}
}

// TestForwardHeaderErrors: nothing can be labelled without a good header,
// so a bad one ends the forwarding with the reason.
func TestForwardHeaderErrors(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{
		{"empty", "", "no header line"},
		{"sample first", sampleLine(1, 2, 1), "before the header"},
		{"no clock", strings.Replace(testHeader, `,"cupti_ns":1000000`, "", 1), "no clock reading with cupti_ns"},
		{"bad uuid", strings.Replace(testHeader, "101112", "zz", 1), "is not 32 hex digits"},
		{"bad metric name", strings.Replace(testHeader, "sm__throughput", `sm\"x`, 1), "is not one of"},
		{"no metrics", strings.Replace(testHeader, `"metrics":["sm__throughput.avg.pct_of_peak_sustained_elapsed","dram__bytes_read.sum.per_second"]`, `"metrics":[]`, 1), "0 metrics"},
		{"no device", strings.Replace(testHeader, `"device":1,`, "", 1), "no device"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := forward(strings.NewReader(c.in), &fakePublisher{}, zap.NewNop())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("forward = %v, want %q", err, c.want)
			}
		})
	}
}

func TestForwardCountsDrops(t *testing.T) {
	in := testHeader + "\n" + sampleLine(1_000_000, 1_001_000, 1, 2) + "\n"
	st, err := forward(strings.NewReader(in), &fakePublisher{full: true}, zap.NewNop())
	if err != nil || st.dropped != 1 || st.published != 1 {
		t.Fatalf("stats %+v, %v: want the set published, the sample dropped", st, err)
	}
}

// FuzzCounterLine: no line panics the parser; whatever it takes as a
// sample is one the collector decodes, in order, on its set.
func FuzzCounterLine(f *testing.F) {
	f.Add([]byte(sampleLine(1_000_000, 1_001_000, 1, 2)))
	f.Add([]byte(`{"type":"end"}`))
	f.Add([]byte(testHeader))
	f.Add([]byte(`{"type":"sample","start":18446744073709551615,"end":0,"v":[1e308,-1e308]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var p lineParser
		if _, err := p.line([]byte(testHeader)); err != nil {
			t.Fatal(err)
		}
		prev := p.lastEnd
		res, err := p.line(b)
		if err != nil || res.sample == nil {
			return
		}
		var s record.CounterSample
		if err := s.Decode(res.sample.Append(nil)); err != nil {
			t.Fatalf("the parser made a sample the collector refuses: %v", err)
		}
		if s.StartNS < prev || s.EndNS < s.StartNS || len(s.Values) != 2 || s.SetHash != p.hash {
			t.Fatalf("sample %+v out of order or off its set", s)
		}
	})
}
