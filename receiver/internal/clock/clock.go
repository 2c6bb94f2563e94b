// Package clock maps GPU %globaltimer readings and host CLOCK_MONOTONIC
// readings onto host CLOCK_REALTIME (Unix ns), the time base of OTLP.
//
// GPU → realtime: per device, a least-squares line realtime = a + b·gpu over
// the last Window calibration records of that device. With one record the
// slope is 1 (a pure offset). The slope is clamped to 1 ± 1e-3 (clocks that
// drift more than 1000 ppm are broken, not drifting), so one bad record
// cannot fold the time axis. Each record's realtime is taken at its
// monotonic midpoint, so the fit inherits the record's uncertainty (half the
// host read interval, typically a few µs).
//
// Monotonic → realtime: one offset, realtime − monotonic, from the latest
// calibration record of any device, or from the collector's own reading of
// both clocks (they are system-wide, so the collector's reading is valid for
// every process on the host).
package clock

import (
	"math"
	"sync"
)

// Window is the number of calibration records kept per device.
const Window = 16

const maxDrift = 1e-3

type point struct{ gpu, real uint64 }

type device struct {
	pts  [Window]point
	n    int // points held
	next int // next slot to write
	// fitted line real = y0 + a + slope·(gpu − x0), kept relative to the
	// newest point: float64 cannot hold Unix ns (~1.7e18) to the ns.
	x0, y0 uint64
	a      float64
	slope  float64
}

// Mapper holds calibration state. It is safe for concurrent use.
type Mapper struct {
	mu       sync.Mutex
	devices  map[uint32]*device
	monoOff  int64 // realtime − monotonic
	haveMono bool
}

// New returns an empty Mapper.
func New() *Mapper { return &Mapper{devices: map[uint32]*device{}} }

// AddCalibration adds one joint reading of a device's %globaltimer with the
// host clocks.
func (m *Mapper) AddCalibration(dev uint32, gpuNS, monoNS, realNS uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.monoOff, m.haveMono = int64(realNS)-int64(monoNS), true
	d := m.devices[dev]
	if d == nil {
		d = &device{}
		m.devices[dev] = d
	}
	d.pts[d.next] = point{gpuNS, realNS}
	d.next = (d.next + 1) % Window
	if d.n < Window {
		d.n++
	}
	d.fit()
}

// fit recomputes the line through the held points.
func (d *device) fit() {
	// Work relative to the newest point to keep float64 precision (values
	// are ~1e18 ns; differences are small).
	ref := d.pts[(d.next+Window-1)%Window]
	d.x0, d.y0, d.a, d.slope = ref.gpu, ref.real, 0, 1
	if d.n < 2 {
		return
	}
	var sx, sy, sxx, sxy float64
	for i := range d.n {
		x := float64(int64(d.pts[i].gpu - ref.gpu))
		y := float64(int64(d.pts[i].real - ref.real))
		sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
	}
	n := float64(d.n)
	den := n*sxx - sx*sx
	if den <= 0 {
		return
	}
	b := (n*sxy - sx*sy) / den
	b = min(max(b, 1-maxDrift), 1+maxDrift)
	a := (sy - b*sx) / n
	d.slope, d.a = b, a
}

// GPUToReal maps a %globaltimer reading of dev to Unix ns; ok is false when
// no calibration of dev has been seen.
func (m *Mapper) GPUToReal(dev uint32, gpuNS uint64) (uint64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.devices[dev]
	if d == nil || d.n == 0 {
		return 0, false
	}
	off := d.a + d.slope*float64(int64(gpuNS-d.x0))
	return uint64(int64(d.y0) + int64(math.Round(off))), true
}

// SetMonoOffset sets realtime − monotonic from a reading of the collector's
// own clocks; a later calibration record replaces it.
func (m *Mapper) SetMonoOffset(realMinusMono int64) {
	m.mu.Lock()
	m.monoOff, m.haveMono = realMinusMono, true
	m.mu.Unlock()
}

// MonoToReal maps a host CLOCK_MONOTONIC reading to Unix ns.
func (m *Mapper) MonoToReal(monoNS uint64) (uint64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.haveMono {
		return 0, false
	}
	return uint64(int64(monoNS) + m.monoOff), true
}

// MonoMinusGPU returns CLOCK_MONOTONIC − %globaltimer of dev at host time
// monoNS: the offset a GPU program adds to %globaltimer to get
// bpf_ktime_get_ns. ok is false before dev's first calibration.
func (m *Mapper) MonoMinusGPU(dev uint32, monoNS uint64) (int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.devices[dev]
	if d == nil || d.n == 0 || !m.haveMono {
		return 0, false
	}
	// The GPU time at monoNS (slope 1 is close enough to pick the point),
	// then the fitted line there.
	realNow := int64(monoNS) + m.monoOff
	gpu := uint64(int64(d.x0) + realNow - int64(d.y0) - int64(math.Round(d.a)))
	real := int64(d.y0) + int64(math.Round(d.a+d.slope*float64(int64(gpu-d.x0))))
	return real - m.monoOff - int64(gpu), true
}
