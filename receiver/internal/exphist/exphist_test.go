package exphist

import (
	"math"
	"math/rand"
	"slices"
	"testing"

	"go.opentelemetry.io/collector/pdata/pmetric"
)

// bounds returns the (lower, upper] range of bucket i at scale s.
func bounds(i, s int32) (float64, float64) {
	base := math.Exp2(math.Exp2(-float64(s)))
	return math.Pow(base, float64(i)), math.Pow(base, float64(i+1))
}

func TestIndexBoundaries(t *testing.T) {
	tests := []struct {
		v     float64
		scale int32
		want  int32
	}{
		{1, 0, -1}, // 1 is the upper bound of (0.5, 1]
		{1.5, 0, 0},
		{2, 0, 0},
		{4, 0, 1},
		{4.1, 0, 2},
		{1, 3, -1},
		{0.25, 0, -3},
		{1e-9, 8, int32(math.Ceil(math.Log2(1e-9)*256)) - 1},
	}
	for _, tt := range tests {
		if got := index(tt.v, tt.scale); got != tt.want {
			t.Errorf("index(%g, %d) = %d, want %d", tt.v, tt.scale, got, tt.want)
		}
	}
}

func TestRecordKeepsValuesInTheirBuckets(t *testing.T) {
	tests := []struct {
		name   string
		values []float64
	}{
		{"narrow", []float64{1.0e-6, 1.1e-6, 1.2e-6}},
		{"wide (forces downscale)", []float64{1e-9, 1e-3, 1, 1e3, 5e5}},
		{"with zeros", []float64{0, 0, 2, -1}},
		{"descending", []float64{1e6, 1e3, 1, 1e-3, 1e-6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Hist
			for _, v := range tt.values {
				h.Record(v)
			}
			if len(h.counts) > MaxBuckets {
				t.Fatalf("%d buckets > %d", len(h.counts), MaxBuckets)
			}
			// Every positive value lies in the bucket it was counted in.
			want := map[int32]uint64{}
			var zeros uint64
			for _, v := range tt.values {
				if v <= 0 {
					zeros++
					continue
				}
				i := index(v, h.scale)
				lo, hi := bounds(i, h.scale)
				if !(v > lo*(1-1e-12) && v <= hi*(1+1e-12)) {
					t.Fatalf("value %g not in bucket %d (%g, %g]", v, i, lo, hi)
				}
				want[i]++
			}
			for i, c := range h.counts {
				if c != want[h.offset+int32(i)] {
					t.Fatalf("bucket %d: %d, want %d", h.offset+int32(i), c, want[h.offset+int32(i)])
				}
			}
			if h.zero != zeros || h.Count() != uint64(len(tt.values)) {
				t.Fatalf("zero %d count %d", h.zero, h.count)
			}
			dp := pmetric.NewExponentialHistogramDataPoint()
			h.CopyTo(dp)
			if dp.Count() != uint64(len(tt.values)) || dp.Scale() != h.scale || dp.ZeroCount() != zeros {
				t.Fatalf("data point %d/%d/%d", dp.Count(), dp.Scale(), dp.ZeroCount())
			}
			var total uint64
			for _, c := range dp.Positive().BucketCounts().AsRaw() {
				total += c
			}
			if total+zeros != dp.Count() {
				t.Fatalf("buckets hold %d + %d zeros, count %d", total, zeros, dp.Count())
			}
		})
	}
}

func BenchmarkRecord(b *testing.B) {
	var h Hist
	v := 1e-6
	for i := range b.N {
		h.Record(v * float64(1+i%1000))
	}
}

func TestExplicitBounds(t *testing.T) {
	limits := []float64{1e-3, 1e-2, 1e-1}
	tests := []struct {
		name   string
		values []float64
		want   []uint64
	}{
		{"empty", nil, []uint64{0, 0, 0, 0}},
		{"a bound is its bucket's upper edge", []float64{1e-3, 1e-2, 1e-1}, []uint64{1, 1, 1, 0}},
		{"between and beyond", []float64{0, 5e-4, 2e-3, 0.5, 7}, []uint64{2, 1, 0, 2}},
		{"negative and NaN count as zero", []float64{-1, math.NaN()}, []uint64{2, 0, 0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Hist
			h.SetBounds(limits)
			for _, v := range tt.values {
				h.Record(v)
			}
			dp := pmetric.NewHistogramDataPoint()
			h.CopyToExplicit(dp)
			if got := dp.BucketCounts().AsRaw(); !slices.Equal(got, tt.want) {
				t.Errorf("buckets %v, want %v", got, tt.want)
			}
			if got := dp.ExplicitBounds().AsRaw(); !slices.Equal(got, limits) {
				t.Errorf("bounds %v", got)
			}
			if dp.Count() != uint64(len(tt.values)) || !h.Explicit() {
				t.Errorf("count %d, explicit %v", dp.Count(), h.Explicit())
			}
		})
	}
}

func TestSetBoundsOnlyWhenEmpty(t *testing.T) {
	var h Hist
	h.Record(1)
	h.SetBounds([]float64{1})
	if h.Explicit() {
		t.Fatal("a histogram with values became explicit")
	}
}

// TestIndexMatchesLog: the table search gives the bucket of the
// definition, ceil(log2(v)·2^s) − 1, for random values and exact powers
// of two at every scale from −4 to MaxScale, and puts every inner bound
// in the bucket it ends and the next float in the next one.
func TestIndexMatchesLog(t *testing.T) {
	def := func(v float64, s int32) int32 {
		if frac, exp := math.Frexp(v); frac == 0.5 {
			return int32(math.Ceil(float64(exp-1)*math.Exp2(float64(s))) - 1)
		}
		return int32(math.Ceil(math.Log2(v)*math.Exp2(float64(s))) - 1)
	}
	check := func(v float64, s int32) {
		t.Helper()
		if got, want := index(v, s), def(v, s); got != want {
			t.Fatalf("index(%v, %d) = %d, want %d", v, s, got, want)
		}
	}
	r := rand.New(rand.NewSource(1))
	for range 200000 {
		check(math.Exp2(r.Float64()*80-40), int32(r.Intn(13)-4))
	}
	for s := int32(-4); s <= MaxScale; s++ {
		for e := -40; e < 40; e++ {
			check(math.Ldexp(1, e), s)
		}
		if s > 0 {
			// At a bound 2^(e + k/2^s) the logarithm rounds either way:
			// the bound belongs to bucket e·2^s + k − 1, the next float
			// above it to the next one.
			for k, b := range octaveBounds[s] {
				for _, e := range []int{-10, 0, 7} {
					at := int32(e<<s + k) // bucket whose upper bound is b·2^e
					if got := index(math.Ldexp(b, e), s); got != at {
						t.Fatalf("index(2^%d·%v, %d) = %d, want %d", e, b, s, got, at)
					}
					if got := index(math.Ldexp(math.Nextafter(b, 3), e), s); got != at+1 {
						t.Fatalf("index(2^%d·next(%v), %d) = %d, want %d", e, b, s, got, at+1)
					}
				}
			}
		}
	}
}

func BenchmarkIndex(b *testing.B) {
	var sum int32
	for i := range b.N {
		sum += index(1e-6*float64(1+i%1000), MaxScale)
	}
	_ = sum
}
