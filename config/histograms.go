package config

import (
	"math"
	"slices"
)

// HistogramsConfig chooses the kind of the duration histograms (kernel
// execution, queue, host wait, warp execution and exit skew, memory copy,
// host call).
type HistogramsConfig struct {
	// Kind is HistogramsExponential (base-2 exponential histograms, scale
	// up to 8) or HistogramsExplicit (fixed bucket bounds, for backends
	// without exponential histograms, e.g. Prometheus without native
	// histograms).
	Kind string `mapstructure:"kind"`
	// Buckets are the explicit upper bounds in seconds, increasing
	// (explicit kind only); empty: DefaultDurationBuckets.
	Buckets []float64 `mapstructure:"buckets"`
}

// Values of histograms::kind.
const (
	HistogramsExponential = "exponential"
	HistogramsExplicit    = "explicit"
)

// maxBuckets bounds histograms::buckets (Prometheus' classic histograms
// cost one series per bucket).
const maxBuckets = 64

// DefaultDurationBuckets are the explicit bounds, in seconds, of the
// duration histograms: 1-2.5-5 steps from 1 µs (a short kernel) to 10 s.
var DefaultDurationBuckets = []float64{
	1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4,
	1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
}

// DurationBounds returns the explicit bounds of the duration histograms,
// nil for exponential ones.
func (h HistogramsConfig) DurationBounds() []float64 {
	if h.Kind != HistogramsExplicit {
		return nil
	}
	if len(h.Buckets) == 0 {
		return slices.Clone(DefaultDurationBuckets)
	}
	return slices.Clone(h.Buckets)
}

func (h *HistogramsConfig) validate(l *errs) {
	switch h.Kind {
	case HistogramsExponential:
		if len(h.Buckets) > 0 {
			l.add("histograms::buckets", "only with histograms::kind %q, kind is %q", HistogramsExplicit, h.Kind)
		}
	case HistogramsExplicit:
	default:
		l.add("histograms::kind", "must be %q or %q, got %q", HistogramsExponential, HistogramsExplicit, h.Kind)
	}
	if len(h.Buckets) > maxBuckets {
		l.add("histograms::buckets", "must list at most %d bounds, got %d", maxBuckets, len(h.Buckets))
	}
	for i, b := range h.Buckets {
		switch {
		case !(b > 0) || math.IsInf(b, 0):
			l.add("histograms::buckets", "must be positive finite seconds, got %v at [%d]", b, i)
		case i > 0 && b <= h.Buckets[i-1]:
			l.add("histograms::buckets", "must increase, got %v after %v at [%d]", b, h.Buckets[i-1], i)
		}
	}
}
