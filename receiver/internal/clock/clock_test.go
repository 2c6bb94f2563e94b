package clock

import (
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
				m.AddCalibration(3, c[0], 5, c[1])
			}
			got, ok := m.GPUToReal(3, tt.query)
			if !ok {
				t.Fatal("no mapping")
			}
			if d := math.Abs(float64(got) - float64(tt.want)); d > tt.tol {
				t.Fatalf("GPUToReal = %d, want %d ± %g (off by %g)", got, tt.want, tt.tol, d)
			}
		})
	}
}

func TestSlopeClamped(t *testing.T) {
	m := New()
	// Two readings claiming the GPU clock runs 1000× slow: the slope is
	// clamped to 1+1e-3.
	m.AddCalibration(0, 0, 0, 1e12)
	m.AddCalibration(0, 1000, 0, 1e12+1e6)
	a, _ := m.GPUToReal(0, 1e6)
	b, _ := m.GPUToReal(0, 2e6)
	if d := int64(b - a); d < 1e6 || d > 1e6+1e3+1 {
		t.Fatalf("1 ms of GPU time maps to %d ns", d)
	}
}

func TestUncalibratedDevice(t *testing.T) {
	m := New()
	if _, ok := m.GPUToReal(0, 1); ok {
		t.Fatal("mapped without calibration")
	}
	if _, ok := m.MonoToReal(1); ok {
		t.Fatal("mono mapped without offset")
	}
	m.SetMonoOffset(1000)
	if got, _ := m.MonoToReal(5); got != 1005 {
		t.Fatalf("MonoToReal = %d", got)
	}
	m.AddCalibration(1, 10, 100, 500)
	if got, _ := m.MonoToReal(200); got != 600 {
		t.Fatalf("MonoToReal after calibration = %d", got)
	}
	if _, ok := m.GPUToReal(0, 1); ok {
		t.Fatal("device 0 mapped by device 1's calibration")
	}
}

func TestWindowForgetsOldPoints(t *testing.T) {
	m := New()
	const real0 = 1_000_000_000_000
	// An old regime with a big offset, then Window points of a new one.
	m.AddCalibration(0, 0, 0, real0+1e6)
	for i := range Window {
		g := uint64(1e9 * (i + 1))
		m.AddCalibration(0, g, 0, real0+g)
	}
	got, _ := m.GPUToReal(0, 20e9)
	if got != real0+20e9 {
		t.Fatalf("GPUToReal = %d, want %d", got, uint64(real0+20e9))
	}
}

func TestMonoMinusGPU(t *testing.T) {
	m := New()
	if _, ok := m.MonoMinusGPU(0, 1000); ok {
		t.Fatal("MonoMinusGPU before any calibration: ok")
	}
	const gpuOff = 1_795_000_000_000_000_000 // globaltimer ≈ Unix time
	const realOff = 1_700_000_000_000_000_000
	for i := uint64(0); i < 4; i++ {
		mono := 5_000_000_000 + i*1_000_000_000
		m.AddCalibration(2, mono+gpuOff, mono, mono+realOff)
	}
	got, ok := m.MonoMinusGPU(2, 9_000_000_000)
	if !ok || got != -gpuOff {
		t.Fatalf("MonoMinusGPU = %d, %v; want %d", got, ok, int64(-gpuOff))
	}
	if _, ok := m.MonoMinusGPU(1, 5); ok {
		t.Fatal("MonoMinusGPU of an uncalibrated device: ok")
	}
}
