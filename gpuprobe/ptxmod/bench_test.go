package ptxmod_test

import (
	"os"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin/fatbintest"
	"github.com/gpuprobe/gpuprobe/gpuprobe/ptxmod"
)

// benchPTX is the -G PTX of templates.cu for sm_90: debug sections,
// .loc lines, inline assembly and call sequences.
func benchPTX(b *testing.B) []byte {
	src, err := os.ReadFile(fatbintest.Build(b, fatbintest.Source(b, "templates.cu"), "templates.ptx", "-ptx", "-G", "-arch", "sm_90"))
	if err != nil {
		b.Fatal(err)
	}
	return src
}

func BenchmarkParse(b *testing.B) {
	src := benchPTX(b)
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ptxmod.Parse(src); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInstrument parses, inserts code at every probe point and
// prints the module.
func BenchmarkInstrument(b *testing.B) {
	src := benchPTX(b)
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		m, err := ptxmod.Parse(src)
		if err != nil {
			b.Fatal(err)
		}
		for _, k := range m.Kernels() {
			m.InsertTop(k, "\tcall gpuprobe_entry;\n")
			for _, s := range k.Exits {
				m.InsertBefore(s, "\tcall gpuprobe_exit;\n")
			}
			for _, a := range k.GlobalAccesses(true) {
				m.InsertAfter(a.Stmt, "\tcall gpuprobe_mem;\n")
			}
		}
		if _, err := m.Bytes(); err != nil {
			b.Fatal(err)
		}
	}
}
