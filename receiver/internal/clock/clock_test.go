package clock

import (
	"errors"
	"math"
	"testing"
)

func TestGPUToReal(t *testing.T) {
	const real0 = 1_700_000_000_000_000_000
	tests := []struct {
		name  string
		cal   [][2]uint64 // {gpu, real}
		query uint64
		want  uint64
		tol   float64
	}{
		{"single point is an offset", [][2]uint64{{1000, real0}}, 1500, real0 + 500, 0},
		{"drift 100 ppm", [][2]uint64{{0, real0}, {1e9, real0 + 1e9 + 1e5}, {2e9, real0 + 2e9 + 2e5}}, 3e9, real0 + 3e9 + 3e5, 2},
		{"noisy points fit", [][2]uint64{{0, real0 + 10}, {1e9, real0 + 1e9 - 10}, {2e9, real0 + 2e9 + 10}, {3e9, real0 + 3e9 - 10}}, 4e9, real0 + 4e9, 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := New()
			for _, c := range tt.cal {
				if err := m.AddCalibration(1, 3, c[0], 5, c[1]); err != nil {
					t.Fatal(err)
				}
			}
			got, ok := m.GPUToReal(1, 3, tt.query)
			if !ok {
				t.Fatal("no mapping")
			}
			if d := math.Abs(float64(got) - float64(tt.want)); d > tt.tol {
				t.Fatalf("GPUToReal = %d, want %d ± %g (off by %g)", got, tt.want, tt.tol, d)
			}
		})
	}
}

func TestCalibrationRejected(t *testing.T) {
	const real0 = 1_700_000_000_000_000_000
	const mono0 = 1_000_000_000
	tests := []struct {
		name            string
		dev             uint32
		gpu, mono, real uint64
		want            error
	}{
		{"device out of range", MaxDevices, 2e9, mono0 + 1e9, real0 + 1e9, ErrDevice},
		{"gpu time backwards", 0, 5e8, mono0 + 1e9, real0 + 1e9, ErrBackwards},
		{"gpu time repeated", 0, 1e9, mono0 + 1e9, real0 + 1e9, ErrBackwards},
		{"monotonic backwards", 0, 2e9, mono0 - 1, real0 + 1e9, ErrBackwards},
		{"GPU clock 1000x slow", 0, 1e9 + 5000, mono0 + 5e6, real0 + 5e6, ErrSlope},
		{"realtime jumps 43 years", 0, 2e9, mono0 + 1e9, real0 + 1e9 + 43*365*86400e9, ErrOffset},
		{"a day between records", 0, 1e9 + 2*86400e9, mono0 + 2*86400e9, real0 + 2*86400e9, ErrSlope},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := New()
			m.SetMonoOffset(real0 - mono0)
			if err := m.AddCalibration(1, 0, 1e9, mono0, real0); err != nil {
				t.Fatal(err)
			}
			before, _ := m.GPUToReal(1, 0, 3e9)
			if err := m.AddCalibration(1, tt.dev, tt.gpu, tt.mono, tt.real); !errors.Is(err, tt.want) {
				t.Fatalf("AddCalibration = %v, want %v", err, tt.want)
			}
			if after, _ := m.GPUToReal(1, 0, 3e9); after != before {
				t.Fatalf("a rejected record moved the fit: %d → %d", before, after)
			}
		})
	}
}

// TestClientsIsolated: one client's records never move another's mapping.
func TestClientsIsolated(t *testing.T) {
	const real0 = 1_700_000_000_000_000_000
	m := New()
	if err := m.AddCalibration(1, 0, 1000, 1000, real0+1000); err != nil {
		t.Fatal(err)
	}
	want, _ := m.GPUToReal(1, 0, 5000)
	wantMono, _ := m.ClientMonoToReal(1, 5000)
	// Client 2 claims its device 0 runs 43 years later (no host offset
	// known yet, so it is accepted, for client 2 only).
	if err := m.AddCalibration(2, 0, 1000, 1000, real0+43*365*86400e9); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.GPUToReal(1, 0, 5000); got != want {
		t.Fatalf("client 1's GPU time moved: %d → %d", want, got)
	}
	if got, _ := m.ClientMonoToReal(1, 5000); got != wantMono {
		t.Fatalf("client 1's monotonic time moved: %d → %d", wantMono, got)
	}
	if _, ok := m.MonoToReal(5000); ok {
		t.Fatal("a client's record set the host offset")
	}
	m.Forget(1)
	if _, ok := m.GPUToReal(1, 0, 5000); ok {
		t.Fatal("mapping of a forgotten client")
	}
}

func TestSlopeClamped(t *testing.T) {
	m := New()
	// Readings 1.5 ms apart with 900 µs of jitter pass the record check;
	// the fitted slope is still clamped to 1 ± 1e-3.
	for _, p := range [][2]uint64{{0, 1e12}, {1.5e6, 1e12 + 2.4e6}} {
		if err := m.AddCalibration(0, 0, p[0], 0, p[1]); err != nil {
			t.Fatal(err)
		}
	}
	a, _ := m.GPUToReal(0, 0, 1e6)
	b, _ := m.GPUToReal(0, 0, 2e6)
	if d := int64(b - a); d < 1e6 || d > 1e6+1e3+1 {
		t.Fatalf("1 ms of GPU time maps to %d ns", d)
	}
}

func TestUncalibratedDevice(t *testing.T) {
	m := New()
	if _, ok := m.GPUToReal(0, 0, 1); ok {
		t.Fatal("mapped without calibration")
	}
	if _, ok := m.MonoToReal(1); ok {
		t.Fatal("mono mapped without offset")
	}
	m.SetMonoOffset(1000)
	if got, _ := m.MonoToReal(5); got != 1005 {
		t.Fatalf("MonoToReal = %d", got)
	}
	if err := m.AddCalibration(0, 1, 10, 100, 1100); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.ClientMonoToReal(0, 200); got != 1200 {
		t.Fatalf("ClientMonoToReal after calibration = %d", got)
	}
	if _, ok := m.GPUToReal(0, 0, 1); ok {
		t.Fatal("device 0 mapped by device 1's calibration")
	}
}

func TestWindowForgetsOldPoints(t *testing.T) {
	m := New()
	const real0 = 1_000_000_000_000
	// An old regime with an offset 1 ms off, then Window points of a new one.
	if err := m.AddCalibration(0, 0, 0, 0, real0+1e6); err != nil {
		t.Fatal(err)
	}
	for i := range Window {
		g := uint64(1e9 * (i + 1))
		if err := m.AddCalibration(0, 0, g, 0, real0+g); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := m.GPUToReal(0, 0, 20e9)
	if got != real0+20e9 {
		t.Fatalf("GPUToReal = %d, want %d", got, uint64(real0+20e9))
	}
}

func TestMonoMinusGPU(t *testing.T) {
	m := New()
	if _, ok := m.MonoMinusGPU(0, 0, 1000); ok {
		t.Fatal("MonoMinusGPU before any calibration: ok")
	}
	const gpuOff = 1_795_000_000_000_000_000 // globaltimer ≈ Unix time
	const realOff = 1_700_000_000_000_000_000
	for i := uint64(0); i < 4; i++ {
		mono := 5_000_000_000 + i*1_000_000_000
		if err := m.AddCalibration(0, 2, mono+gpuOff, mono, mono+realOff); err != nil {
			t.Fatal(err)
		}
	}
	got, ok := m.MonoMinusGPU(0, 2, 9_000_000_000)
	if !ok || got != -gpuOff {
		t.Fatalf("MonoMinusGPU = %d, %v; want %d", got, ok, int64(-gpuOff))
	}
	if _, ok := m.MonoMinusGPU(0, 1, 5); ok {
		t.Fatal("MonoMinusGPU of an uncalibrated device: ok")
	}
	if _, ok := m.MonoMinusGPU(1, 2, 5); ok {
		t.Fatal("MonoMinusGPU of another client's device: ok")
	}
}

// BenchmarkClientMonoToReal maps host times from parallel goroutines, as
// the receiver's poll shards do with one Mapper for every record.
func BenchmarkClientMonoToReal(b *testing.B) {
	m := New()
	m.SetMonoOffset(1 << 40)
	b.RunParallel(func(pb *testing.PB) {
		var sum uint64
		for i := uint64(0); pb.Next(); i++ {
			v, _ := m.ClientMonoToReal(uint32(i&15), i)
			sum += v
		}
		_ = sum
	})
}
