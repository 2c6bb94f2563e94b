package inject

import (
	"testing"
)

// BenchmarkInject measures patching a module with kernel_phases:
// verification, compilation and splicing (uncached), and a cache hit
// (hashing the module and the programs, copying the result).
func BenchmarkInject(b *testing.B) {
	modules := []struct {
		name string
		src  []byte
	}{
		{"gemm", samplePTX(b, "gemm", "sm_90")},
		{"vectoradd", samplePTX(b, "vectoradd", "sm_90")},
	}
	progs := kernelPhases(b)
	for _, m := range modules {
		b.Run(m.name+"/uncached", func(b *testing.B) {
			b.SetBytes(int64(len(m.src)))
			for b.Loop() {
				if _, _, err := Inject(m.src, progs, Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(m.name+"/cached", func(b *testing.B) {
			in, err := NewInjector(16, 64<<20)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(m.src)))
			for b.Loop() {
				if _, _, err := in.Inject(m.src, progs, Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
