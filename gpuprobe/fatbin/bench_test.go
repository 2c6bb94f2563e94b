package fatbin_test

import (
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin"
	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin/fatbintest"
)

func benchFile(b *testing.B) string {
	tk := fatbintest.Find(b)
	return fatbintest.Build(b, fatbintest.Source(b, "gemm.cu"), "gemm", append(fatbintest.Gencode(tk.Archs()...), "-Xfatbin=-compress-all")...)
}

// BenchmarkOpen reads the fatbins of an executable (ELF sections,
// containers, entries, wrappers), without decompressing.
func BenchmarkOpen(b *testing.B) {
	file := benchFile(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := fatbin.Open(file); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPTX decompresses (LZ4) every PTX entry of the executable.
func BenchmarkPTX(b *testing.B) {
	f, err := fatbin.Open(benchFile(b))
	if err != nil {
		b.Fatal(err)
	}
	ptx, err := f.PTX()
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, e := range ptx {
		n += int64(e.UncompressedSize)
	}
	b.SetBytes(n)
	b.ReportAllocs()
	for b.Loop() {
		for _, e := range ptx {
			if _, err := e.Data(); err != nil {
				b.Fatal(err)
			}
		}
	}
}
