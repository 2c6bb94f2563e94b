package ptxmod

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin/fatbintest"
)

// TestLexerReserves: tokenizing allocates for the tokens found, not for
// len(src)/4 of them up front (main reserved 32 bytes × len(src)/4: 8 GiB
// for 1 GiB of text; here 2 GiB of token slice for 64 MiB of comment).
func TestLexerReserves(t *testing.T) {
	src := append([]byte(".version 7.8\n// "), bytes.Repeat([]byte("x"), 64<<20)...)
	var err error
	n := fatbintest.Allocated(func() {
		lx := lexer{src: src, lines: newLineTable(src), maxTokens: DefaultLimits.MaxTokens}
		_, err = lx.tokenize()
	})
	if err != nil {
		t.Fatal(err)
	}
	if n > 1<<20 {
		t.Errorf("tokenizing 64 MiB of comment allocated %d bytes, want at most 1 MiB", n)
	}
}

func TestLimits(t *testing.T) {
	kernels := func(n int) []byte {
		b := []byte(".version 7.8\n.target sm_80\n.address_size 64\n")
		for i := 0; i < n; i++ {
			b = fmt.Appendf(b, ".entry k%d()\n{\n\tret;\n}\n", i)
		}
		return b
	}
	tests := []struct {
		name  string
		src   []byte
		l     Limits
		limit string // "": parses
		line  int
	}{
		{"under", kernels(10), Limits{MaxBytes: 1 << 20, MaxTokens: 100, MaxFuncs: 10}, "", 0},
		{"bytes", kernels(10), Limits{MaxBytes: 100, MaxTokens: 1 << 20, MaxFuncs: 1 << 20}, "Limits.MaxBytes", 1},
		{"tokens", kernels(10), Limits{MaxBytes: 1 << 20, MaxTokens: 50, MaxFuncs: 1 << 20}, "Limits.MaxTokens", 25},
		{"funcs", kernels(10), Limits{MaxBytes: 1 << 20, MaxTokens: 1 << 20, MaxFuncs: 3}, "Limits.MaxFuncs", 16},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseLimits(tt.src, tt.l)
			var le *LimitError
			switch {
			case tt.limit == "" && err != nil:
				t.Fatal(err)
			case tt.limit != "" && (!errors.As(err, &le) || le.Limit != tt.limit || le.Line != tt.line || !errors.Is(err, ErrLimit)):
				t.Fatalf("error %v (%#v), want a *LimitError for %s at line %d", err, le, tt.limit, tt.line)
			}
		})
	}
}

// TestParseCost: Cost bounds what parsing allocates, on the shapes that
// cost the most per token (ParseLimits's TotalAlloc: garbage included).
func TestParseCost(t *testing.T) {
	dense := bytes.Repeat([]byte("{"), 1<<20) // a token a byte: the worst case
	var body []byte
	for i := 0; len(body) < 4<<20; i++ {
		body = fmt.Appendf(body, "\tld.global.u32 %%r%d, [%%rd%d+%d];\n\tadd.s32 %%r%d, %%r%d, %d;\n", i%100, i%10, i*4, i%100, i%100, i)
	}
	typical := append([]byte(".version 7.8\n.target sm_80\n.address_size 64\n.entry k()\n{\n"), append(body, "\tret;\n}\n"...)...)
	for _, c := range []struct {
		name string
		src  []byte
	}{
		{"dense", dense},
		{"typical", typical},
		{"ret;", append([]byte(".version 7.8\n.target sm_80\n.address_size 64\n.entry k()\n{\n"), append(bytes.Repeat([]byte("ret;"), 1<<18), '}')...)},
		{"ld;", append([]byte(".version 7.8\n.target sm_80\n.address_size 64\n.entry k()\n{\n"), append(bytes.Repeat([]byte("ld [a];"), 1<<18), '}')...)},
		{"kernels", bytes.Repeat([]byte(".entry k{}"), 1<<17)},
		{"lines", bytes.Repeat([]byte("\n"), 1<<20)},
	} {
		cost, err := Cost(c.src, DefaultLimits)
		if err != nil {
			t.Fatal(err)
		}
		n := fatbintest.Allocated(func() { ParseLimits(c.src, DefaultLimits) })
		t.Logf("%s: %d bytes of source, %d allocated, Cost %d", c.name, len(c.src), n, cost)
		if n > uint64(cost) {
			t.Errorf("%s: parsing allocated %d bytes, more than its Cost %d", c.name, n, cost)
		}
	}
}
