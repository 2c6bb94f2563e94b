package main

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/gpuprobe/gpuprobe/record"
)

// The sampler's JSON lines (counters/src/sample.c describes them) become
// records here: the header line a record.CounterSet, each sample line a
// record.CounterSample with its times moved from CUPTI's clock onto
// CLOCK_MONOTONIC, the clock of the windows it is joined to.

// maxCounterLine bounds one line of the sampler's output: a header of 16
// metric names is about 4 KiB, a sample of 16 values under 400 bytes.
const maxCounterLine = 64 << 10

// samplerLine is any line of the sampler; Type says which fields it has.
type samplerLine struct {
	Type       string        `json:"type"`
	Device     *uint32       `json:"device"`
	UUID       string        `json:"uuid"`
	IntervalNS uint64        `json:"interval_ns"`
	Metrics    []string      `json:"metrics"`
	Clock      *samplerClock `json:"clock"`
	Start      uint64        `json:"start"`
	End        uint64        `json:"end"`
	V          []*float64    `json:"v"` // null: no value (a ratio over an idle sample)
	Samples    uint64        `json:"samples"`
	Overflows  uint64        `json:"overflows"`
}

// samplerClock is CUPTI's timestamp read between host clock readings.
type samplerClock struct {
	MonotonicNS uint64  `json:"monotonic_ns"`
	CuptiNS     *uint64 `json:"cupti_ns"`
}

// lineParser turns the sampler's lines into records, in order: the
// header first, then samples, then the end line.
type lineParser struct {
	set     *record.CounterSet // from the header; nil before it
	hash    uint32
	offset  int64  // CLOCK_MONOTONIC − CUPTI time, from the header's clock
	lastEnd uint64 // end of the last sample taken (CLOCK_MONOTONIC)
	ended   bool
	end     samplerLine // the end line, once it came
	drift   int64       // the end line's offset − the header's (ns)
}

// errBeforeHeader: a sample came before the header that names its metrics.
var errBeforeHeader = errors.New("a sample line before the header line")

// parsed is what one line gave: a set, a sample, or neither (the end).
type parsed struct {
	set    *record.CounterSet
	sample *record.CounterSample
}

// line parses one line (without its newline). An error names what is
// wrong with the line; the parser's state is unchanged by a bad line.
func (p *lineParser) line(b []byte) (parsed, error) {
	var l samplerLine
	if len(b) > maxCounterLine {
		return parsed{}, fmt.Errorf("line of %d bytes, over %d", len(b), maxCounterLine)
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return parsed{}, fmt.Errorf("not a JSON object: %w", err)
	}
	switch l.Type {
	case "meta":
		s, err := p.header(&l)
		return parsed{set: s}, err
	case "sample":
		s, err := p.sample(&l)
		return parsed{sample: s}, err
	case "end":
		return parsed{}, p.finish(&l)
	default:
		return parsed{}, fmt.Errorf("unknown line type %q", l.Type)
	}
}

// header checks the header line and makes the set it describes.
func (p *lineParser) header(l *samplerLine) (*record.CounterSet, error) {
	if p.set != nil {
		return nil, errors.New("a second header line")
	}
	if l.Device == nil {
		return nil, errors.New("header: no device")
	}
	if n := len(l.Metrics); n == 0 || n > record.MaxCounterValues {
		return nil, fmt.Errorf("header: %d metrics, want 1..%d", n, record.MaxCounterValues)
	}
	joined := 0
	for _, m := range l.Metrics {
		if err := record.CheckCounterName(m); err != nil {
			return nil, fmt.Errorf("header: metric %w", err)
		}
		joined += len(m) + 1
	}
	if joined-1 > record.MaxCounterNamesLen {
		return nil, fmt.Errorf("header: metric names of %d bytes, over %d", joined-1, record.MaxCounterNamesLen)
	}
	if l.Clock == nil || l.Clock.CuptiNS == nil || l.Clock.MonotonicNS == 0 {
		return nil, errors.New("header: no clock reading with cupti_ns (this CUPTI has no cuptiGetTimestamp): sample times cannot be mapped onto CLOCK_MONOTONIC")
	}
	s := &record.CounterSet{IntervalNS: l.IntervalNS, Device: *l.Device, Names: l.Metrics}
	if l.UUID != "" {
		u, err := hex.DecodeString(l.UUID)
		if err != nil || len(u) != 16 {
			return nil, fmt.Errorf("header: uuid %q is not 32 hex digits", l.UUID)
		}
		copy(s.UUID[:], u)
	}
	p.set, p.hash = s, s.Hash()
	p.offset = int64(l.Clock.MonotonicNS) - int64(*l.Clock.CuptiNS)
	return s, nil
}

// sample checks one sample line and maps it onto CLOCK_MONOTONIC.
func (p *lineParser) sample(l *samplerLine) (*record.CounterSample, error) {
	switch {
	case p.set == nil:
		return nil, errBeforeHeader
	case p.ended:
		return nil, errors.New("a sample line after the end line")
	case len(l.V) != len(p.set.Names):
		return nil, fmt.Errorf("sample with %d values, the header names %d metrics", len(l.V), len(p.set.Names))
	case l.End < l.Start:
		return nil, fmt.Errorf("sample ends (%d) before it starts (%d)", l.End, l.Start)
	}
	start, ok1 := shift(l.Start, p.offset)
	end, ok2 := shift(l.End, p.offset)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("sample [%d, %d) is out of CLOCK_MONOTONIC's range after the header's offset %d", l.Start, l.End, p.offset)
	}
	if start < p.lastEnd {
		return nil, fmt.Errorf("sample starts at %d, before the previous one ended (%d)", start, p.lastEnd)
	}
	vs := make([]float64, len(l.V))
	for i, v := range l.V {
		vs[i] = math.NaN() // the collector leaves it out of the metric's mean
		if v != nil {
			vs[i] = *v
		}
	}
	s := &record.CounterSample{StartNS: start, EndNS: end, Device: p.set.Device, SetHash: p.hash, Values: vs}
	// A gap of more than half an interval after the last sample: samples
	// were lost there (a hardware-buffer overflow).
	if p.lastEnd != 0 && p.set.IntervalNS > 0 && start-p.lastEnd > p.set.IntervalNS/2 {
		s.Flags |= record.CounterOverflowBefore
	}
	p.lastEnd = end
	return s, nil
}

// finish takes the end line and the clock drift since the header.
func (p *lineParser) finish(l *samplerLine) error {
	if p.ended {
		return errors.New("a second end line")
	}
	p.ended, p.end = true, *l
	if p.set != nil && l.Clock != nil && l.Clock.CuptiNS != nil {
		p.drift = int64(l.Clock.MonotonicNS) - int64(*l.Clock.CuptiNS) - p.offset
	}
	return nil
}

// shift adds off to t, reporting false when the result leaves [1, 2^63).
func shift(t uint64, off int64) (uint64, bool) {
	if t >= math.MaxInt64 {
		return 0, false
	}
	v := int64(t) + off
	if (off > 0 && v < int64(t)) || v <= 0 {
		return 0, false
	}
	return uint64(v), true
}
