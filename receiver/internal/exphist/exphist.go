// Package exphist accumulates values into an OpenTelemetry base-2
// exponential histogram of bounded size and writes it into pdata.
//
// Bucket i at scale s holds values in (base^i, base^(i+1)] with
// base = 2^(2^-s). The histogram starts at MaxScale and halves its resolution
// (scale−1, merging bucket pairs) whenever the populated range would need
// more than MaxBuckets buckets, as the OpenTelemetry SDK does; memory per
// histogram is therefore bounded by MaxBuckets counters.
//
// A histogram given explicit bounds (SetBounds) counts into them instead,
// for backends without exponential histograms (Prometheus without native
// histograms).
package exphist

import (
	"math"
	"sort"

	"go.opentelemetry.io/collector/pdata/pmetric"
)

// Limits of every histogram.
const (
	MaxScale   = 8   // start resolution: 2^(1/256), about 0.3% relative error
	MaxBuckets = 160 // the SDK's default
)

// Hist is one histogram of non-negative values: exponential, or with the
// explicit bounds of SetBounds. The zero value is an empty exponential
// histogram.
type Hist struct {
	scale    int32
	init     bool
	offset   int32    // index of counts[0]
	counts   []uint64 // contiguous buckets
	zero     uint64
	count    uint64
	sum      float64
	min      float64
	max      float64
	bounds   []float64 // explicit upper bounds, shared and never modified; nil: exponential
	explicit []uint64  // len(bounds)+1 explicit bucket counts
}

// SetBounds makes an empty h count into explicit buckets with these
// upper bounds (increasing; bucket i holds (bounds[i-1], bounds[i]], the
// last one everything above). It does nothing to a histogram with values.
func (h *Hist) SetBounds(bounds []float64) {
	if h.count == 0 && len(bounds) > 0 {
		h.bounds, h.explicit = bounds, nil
	}
}

// Explicit reports whether h has explicit bounds.
func (h *Hist) Explicit() bool { return h.bounds != nil }

// Count is the number of recorded values.
func (h *Hist) Count() uint64 { return h.count }

// Sum is the sum of recorded values.
func (h *Hist) Sum() float64 { return h.sum }

// Scale is the current scale.
func (h *Hist) Scale() int32 {
	if !h.init {
		return MaxScale
	}
	return h.scale
}

// Record adds v; negative and NaN values count as zero.
func (h *Hist) Record(v float64) {
	if !h.init {
		h.init, h.scale = true, MaxScale
	}
	if !(v > 0) || math.IsInf(v, 0) {
		if math.IsInf(v, 1) {
			v = math.MaxFloat64
		} else {
			v = 0
		}
	}
	if h.count == 0 {
		h.min, h.max = v, v
	} else {
		h.min, h.max = math.Min(h.min, v), math.Max(h.max, v)
	}
	h.count++
	h.sum += v
	if h.bounds != nil {
		if h.explicit == nil {
			h.explicit = make([]uint64, len(h.bounds)+1)
		}
		h.explicit[sort.SearchFloat64s(h.bounds, v)]++
		return
	}
	if v == 0 {
		h.zero++
		return
	}
	idx := index(v, h.scale)
	if len(h.counts) == 0 {
		h.offset = idx
		h.counts = append(h.counts, 1)
		return
	}
	lo, hi := h.offset, h.offset+int32(len(h.counts))-1
	nlo, nhi := min(lo, idx), max(hi, idx)
	for int64(nhi)-int64(nlo)+1 > MaxBuckets {
		h.downscale()
		idx = index(v, h.scale)
		lo, hi = h.offset, h.offset+int32(len(h.counts))-1
		nlo, nhi = min(lo, idx), max(hi, idx)
	}
	if idx < lo {
		grown := make([]uint64, int(hi-idx+1), MaxBuckets)
		copy(grown[lo-idx:], h.counts)
		h.counts, h.offset = grown, idx
	} else if idx > hi {
		for range idx - hi {
			h.counts = append(h.counts, 0)
		}
	}
	h.counts[idx-h.offset]++
}

// downscale halves the resolution: bucket i becomes bucket i>>1.
func (h *Hist) downscale() {
	h.scale--
	if len(h.counts) == 0 {
		return
	}
	nlo := h.offset >> 1
	nhi := (h.offset + int32(len(h.counts)) - 1) >> 1
	merged := make([]uint64, int(nhi-nlo+1), MaxBuckets)
	for i, c := range h.counts {
		merged[((h.offset+int32(i))>>1)-nlo] += c
	}
	h.counts, h.offset = merged, nlo
}

// index is the bucket of v > 0 at scale s: ceil(log2(v)·2^s) − 1. With
// v = m·2^e, m in [1, 2), that is e·2^s plus how many of the octave's
// inner bucket bounds 2^(k/2^s) lie below m (octaveBounds), found by a binary
// search instead of a logarithm; at scale 0 and below, e >> −s.
func index(v float64, s int32) int32 {
	frac, exp := math.Frexp(v) // v = frac·2^exp, frac in [0.5, 1)
	e := int64(exp - 1)        // v = 2·frac · 2^e
	switch {
	case s <= 0:
		q := e >> -s // floor(e / 2^−s)
		if frac == 0.5 && e&(1<<-s-1) == 0 {
			q-- // an exact power of two on a bound is its bucket's upper end
		}
		return int32(q)
	case frac == 0.5:
		return int32(e<<s - 1)
	case s > MaxScale:
		return int32(math.Ceil(math.Log2(v)*math.Exp2(float64(s))) - 1)
	}
	tbl := octaveBounds[s]
	m := 2 * frac
	// The first bound >= m, by hand: slices.BinarySearch's NaN-aware
	// compare made index 24-28 ns against 15-17 (BenchmarkIndex).
	lo, hi := 0, len(tbl)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if tbl[mid] < m {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return int32(e<<s + int64(lo))
}

// octaveBounds[s] are the inner bucket bounds of one octave at scale s:
// 2^(k/2^s) for k = 1 … 2^s − 1.
var octaveBounds = func() (b [MaxScale + 1][]float64) {
	for s := 1; s <= MaxScale; s++ {
		n := 1 << s
		b[s] = make([]float64, n-1)
		for k := 1; k < n; k++ {
			b[s][k-1] = math.Exp2(float64(k) / float64(n))
		}
	}
	return b
}()

// CopyTo writes the histogram into dp (count, sum, min, max, zero count,
// scale and positive buckets).
func (h *Hist) CopyTo(dp pmetric.ExponentialHistogramDataPoint) {
	dp.SetScale(h.Scale())
	dp.SetCount(h.count)
	dp.SetSum(h.sum)
	if h.count > 0 {
		dp.SetMin(h.min)
		dp.SetMax(h.max)
	}
	dp.SetZeroCount(h.zero)
	dp.Positive().SetOffset(h.offset)
	dp.Positive().BucketCounts().FromRaw(h.counts)
}

// CopyToExplicit writes an explicit-bounds histogram into dp (count, sum,
// min, max, bounds and bucket counts).
func (h *Hist) CopyToExplicit(dp pmetric.HistogramDataPoint) {
	dp.SetCount(h.count)
	dp.SetSum(h.sum)
	if h.count > 0 {
		dp.SetMin(h.min)
		dp.SetMax(h.max)
	}
	dp.ExplicitBounds().FromRaw(h.bounds)
	counts := h.explicit
	if counts == nil {
		counts = make([]uint64, len(h.bounds)+1)
	}
	dp.BucketCounts().FromRaw(counts)
}
