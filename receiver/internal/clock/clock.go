// Package clock maps GPU %globaltimer readings and host CLOCK_MONOTONIC
// readings onto host CLOCK_REALTIME (Unix ns), the time base of OTLP.
//
// Every calibration belongs to one client (the receiver's source id of an
// authenticated connection): a client's calibration records change the
// mapping of that client's times only, never another's.
//
// GPU → realtime: per client and device, a least-squares line
// realtime = a + b·gpu over the last Window calibration records. With one
// record the slope is 1 (a pure offset). Each record's realtime is taken at
// its monotonic midpoint, so the fit inherits the record's uncertainty
// (half the host read interval, typically a few µs).
//
// Monotonic → realtime: one offset, realtime − monotonic, from the
// collector's own reading of both clocks (they are system-wide, so it holds
// for every process on the host). Until the collector has one, a client's
// latest calibration record gives that client's own offset.
//
// AddCalibration rejects records that do not fit (see its errors): a
// device beyond MaxDevices, time going backwards, a slope beyond 1 ± 1e-3
// (clocks that drift more than 1000 ppm are broken, not drifting), or a
// realtime − monotonic offset far from the collector's own.
package clock

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
)

// Window is the number of calibration records kept per device.
const Window = 16

// Bounds on what a client's records may create or claim.
const (
	MaxDevices = 64   // device ordinals a client may calibrate: 0..MaxDevices-1
	MaxClients = 4096 // clients with calibration state

	maxDrift     = 1e-3        // slope bound between two records: 1 ± maxDrift
	maxJitterNS  = 1_000_000   // read jitter allowed on top of the drift bound
	maxOffSkewNS = 1e9         // |record's realtime − monotonic − collector's| bound
	maxGPUStepNS = 86400 * 1e9 // longest gap between two records of a device (a day)
)

// Errors of AddCalibration, to test with errors.Is.
var (
	ErrDevice    = errors.New("device ordinal out of range")
	ErrClients   = errors.New("too many clients")
	ErrBackwards = errors.New("time goes backwards")
	ErrSlope     = errors.New("implausible GPU clock rate")
	ErrOffset    = errors.New("realtime − monotonic disagrees with the host")
)

type point struct{ gpu, mono, real uint64 }

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

// client is one client's calibration state.
type client struct {
	devices  map[uint32]*device
	monoOff  int64 // realtime − monotonic of its latest record
	haveMono bool
}

// Mapper holds calibration state. It is safe for concurrent use.
type Mapper struct {
	mu      sync.Mutex
	clients map[uint32]*client
	// own is realtime − monotonic from the collector's own clocks
	// (SetMonoOffset), read without mu: every record's times go through
	// it, from every poll shard.
	own atomic.Pointer[int64]
}

// New returns an empty Mapper.
func New() *Mapper { return &Mapper{clients: map[uint32]*client{}} }

// AddCalibration adds one joint reading of a device's %globaltimer with the
// host clocks, written by client id. A reading that does not fit is
// rejected with a wrapped Err* error and changes nothing.
func (m *Mapper) AddCalibration(id, dev uint32, gpuNS, monoNS, realNS uint64) error {
	if dev >= MaxDevices {
		return fmt.Errorf("calibration of device %d: %w (max %d)", dev, ErrDevice, MaxDevices-1)
	}
	off := int64(realNS) - int64(monoNS)
	m.mu.Lock()
	defer m.mu.Unlock()
	if own := m.own.Load(); own != nil && math.Abs(float64(off)-float64(*own)) > maxOffSkewNS {
		return fmt.Errorf("calibration of device %d: %w (%d ns vs %d ns)", dev, ErrOffset, off, *own)
	}
	c := m.clients[id]
	if c == nil {
		if len(m.clients) >= MaxClients {
			return fmt.Errorf("calibration of client %d: %w", id, ErrClients)
		}
		c = &client{devices: map[uint32]*device{}}
		m.clients[id] = c
	}
	d := c.devices[dev]
	p := point{gpuNS, monoNS, realNS}
	switch {
	case d == nil:
		d = &device{}
	case d.pts[(d.next+Window-1)%Window] == p:
		return nil // the same record again
	}
	if err := d.plausible(p); err != nil {
		return fmt.Errorf("calibration of device %d: %w", dev, err)
	}
	c.devices[dev] = d
	c.monoOff, c.haveMono = off, true
	d.pts[d.next] = p
	d.next = (d.next + 1) % Window
	if d.n < Window {
		d.n++
	}
	d.fit()
	return nil
}

// plausible checks a new point against the device's newest one: both
// clocks move forward, by amounts that agree within the drift bound.
func (d *device) plausible(p point) error {
	if d.n == 0 {
		return nil
	}
	last := d.pts[(d.next+Window-1)%Window]
	if p.gpu <= last.gpu || p.mono < last.mono || p.real < last.real {
		return ErrBackwards
	}
	dg := float64(p.gpu - last.gpu)
	dr := float64(p.real - last.real)
	if dg > maxGPUStepNS || math.Abs(dr-dg) > maxDrift*dg+maxJitterNS {
		return fmt.Errorf("%w: %g ns of realtime over %g ns of GPU time", ErrSlope, dr, dg)
	}
	return nil
}

// Forget drops the calibration state of client id (it went away).
func (m *Mapper) Forget(id uint32) {
	m.mu.Lock()
	delete(m.clients, id)
	m.mu.Unlock()
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

// device returns the fit of client id's device dev, or nil (lock held).
func (m *Mapper) device(id, dev uint32) *device {
	c := m.clients[id]
	if c == nil {
		return nil
	}
	if d := c.devices[dev]; d != nil && d.n > 0 {
		return d
	}
	return nil
}

// GPUToReal maps a %globaltimer reading of client id's device dev to Unix
// ns; ok is false when that client has not calibrated dev.
func (m *Mapper) GPUToReal(id, dev uint32, gpuNS uint64) (uint64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.device(id, dev)
	if d == nil {
		return 0, false
	}
	off := d.a + d.slope*float64(int64(gpuNS-d.x0))
	return uint64(int64(d.y0) + int64(math.Round(off))), true
}

// SetMonoOffset sets realtime − monotonic from a reading of the collector's
// own clocks. It takes precedence over every client's records.
func (m *Mapper) SetMonoOffset(realMinusMono int64) {
	m.own.Store(&realMinusMono)
}

// MonoToReal maps a host CLOCK_MONOTONIC reading to Unix ns with the
// collector's own offset.
func (m *Mapper) MonoToReal(monoNS uint64) (uint64, bool) {
	own := m.own.Load()
	if own == nil {
		return 0, false
	}
	return uint64(int64(monoNS) + *own), true
}

// ClientMonoToReal maps a CLOCK_MONOTONIC reading of client id to Unix ns:
// with the collector's offset, else with the client's own calibration.
func (m *Mapper) ClientMonoToReal(id uint32, monoNS uint64) (uint64, bool) {
	if own := m.own.Load(); own != nil {
		return uint64(int64(monoNS) + *own), true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	off, ok := m.monoOffOf(id)
	return uint64(int64(monoNS) + off), ok
}

// monoOffOf is the realtime − monotonic offset for client id (lock held).
func (m *Mapper) monoOffOf(id uint32) (int64, bool) {
	if own := m.own.Load(); own != nil {
		return *own, true
	}
	if c := m.clients[id]; c != nil && c.haveMono {
		return c.monoOff, true
	}
	return 0, false
}

// MonoMinusGPU returns CLOCK_MONOTONIC − %globaltimer of client id's
// device dev at host time monoNS: the offset a GPU program adds to
// %globaltimer to get bpf_ktime_get_ns. ok is false before dev's first
// calibration.
func (m *Mapper) MonoMinusGPU(id, dev uint32, monoNS uint64) (int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.device(id, dev)
	monoOff, ok := m.monoOffOf(id)
	if d == nil || !ok {
		return 0, false
	}
	// The GPU time at monoNS (slope 1 is close enough to pick the point),
	// then the fitted line there.
	realNow := int64(monoNS) + monoOff
	gpu := uint64(int64(d.x0) + realNow - int64(d.y0) - int64(math.Round(d.a)))
	real := int64(d.y0) + int64(math.Round(d.a+d.slope*float64(int64(gpu-d.x0))))
	return real - monoOff - int64(gpu), true
}
