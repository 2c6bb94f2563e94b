package verifier

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cilium/ebpf/asm"
)

// contains reports whether the abstract scalar v admits the concrete x.
func contains(v value, x uint64) bool {
	if v.kind != kScalar || x < v.umin || x > v.umax || int64(x) < v.smin || int64(x) > v.smax {
		return false
	}
	if v.tz >= 64 {
		return x == 0
	}
	return x&(uint64(1)<<v.tz-1) == 0
}

// interesting returns a random concrete value, biased to edge cases.
func interesting(r *rand.Rand) uint64 {
	edges := []uint64{0, 1, 2, 3, 7, 8, 15, 16, 31, 32, 63, 64, 0x7f, 0x80, 0xff, 0x7fff, 0x8000, 0xffff,
		math.MaxInt32, math.MaxInt32 + 1, math.MaxUint32, math.MaxUint32 + 1, math.MaxInt64, math.MaxInt64 + 1, math.MaxUint64}
	switch r.IntN(4) {
	case 0:
		return edges[r.IntN(len(edges))]
	case 1:
		return edges[r.IntN(len(edges))] - uint64(r.IntN(3)) + 1
	case 2:
		return uint64(r.IntN(100))
	}
	return r.Uint64()
}

// abstractOf returns the abstract value joining some concrete samples, and
// the samples plus other members of it.
func abstractOf(r *rand.Rand) (value, []uint64) {
	n := 1 + r.IntN(3)
	xs := make([]uint64, 0, n+4)
	v := constant(interesting(r))
	xs = append(xs, v.umin)
	for k := 1; k < n; k++ {
		x := interesting(r)
		if r.IntN(2) == 0 {
			x = xs[0] + uint64(r.IntN(64))*8
		}
		xs = append(xs, x)
		v = join(v, constant(x))
	}
	// Other members: any value in the ranges with the known zero bits.
	for k := 0; k < 4; k++ {
		x := v.umin + uint64(r.Int64N(int64(min(v.umax-v.umin, math.MaxInt64-1))+1))
		if v.tz < 64 {
			x &^= uint64(1)<<v.tz - 1
		}
		if contains(v, x) {
			xs = append(xs, x)
		}
	}
	return v, xs
}

var aluOps = []asm.ALUOp{asm.Add, asm.Sub, asm.Mul, asm.Div, asm.SDiv, asm.Or, asm.And, asm.LSh, asm.RSh,
	asm.Neg, asm.Mod, asm.SMod, asm.Xor, asm.Mov, asm.ArSh, asm.MovSX8, asm.MovSX16, asm.MovSX32, asm.Swap}

// TestScalarALUSound checks that the abstract result of every ALU operation
// contains the concrete result for concrete operands in the abstract ones.
func TestScalarALUSound(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 20000; iter++ {
		op := aluOps[r.IntN(len(aluOps))]
		alu32 := r.IntN(2) == 0
		if op == asm.MovSX32 {
			alu32 = false
		}
		le := r.IntN(2) == 0
		imm := []int64{16, 32, 64}[r.IntN(3)]
		d, ds := abstractOf(r)
		s, ss := abstractOf(r)
		got := scalarALU(op, alu32, le, d, s, imm)
		for _, x := range ds {
			for _, y := range ss {
				want := evalALU(op, alu32, le, x, y, imm)
				if !contains(got, want) {
					t.Fatalf("%v (alu32 %v le %v imm %d): %#x op %#x = %#x, not in %+v\n(d %+v, s %+v)",
						op, alu32, le, imm, x, y, want, got, d, s)
				}
			}
		}
	}
}

var jumpOps = []asm.JumpOp{asm.JEq, asm.JNE, asm.JGT, asm.JGE, asm.JLT, asm.JLE, asm.JSGT, asm.JSGE, asm.JSLT, asm.JSLE, asm.JSet}

// TestNarrowSound checks branch narrowing: concrete operands that take an
// edge must stay inside the narrowed values, and an edge found impossible
// must really be.
func TestNarrowSound(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for iter := 0; iter < 20000; iter++ {
		op := jumpOps[r.IntN(len(jumpOps))]
		j32 := r.IntN(3) == 0
		d, ds := abstractOf(r)
		s, ss := abstractOf(r)
		for _, cond := range []bool{true, false} {
			nd, ns := narrow(op, j32, d, s, cond)
			for _, x := range ds {
				for _, y := range ss {
					if compare(op, j32, x, y) != cond {
						continue
					}
					if !contains(nd, x) || !contains(ns, y) {
						t.Fatalf("%v j32=%v cond=%v: %#x, %#x take the edge but narrowed to %+v, %+v\n(d %+v, s %+v)",
							op, j32, cond, x, y, nd, ns, d, s)
					}
				}
			}
		}
	}
}

// TestEvalALU pins the RFC 9669 corner cases of the constant evaluator.
func TestEvalALU(t *testing.T) {
	const intMin64 = uint64(1) << 63
	cases := []struct {
		name   string
		op     asm.ALUOp
		alu32  bool
		d, s   uint64
		want   uint64
		le     bool
		swapSz int64
	}{
		{"div by zero", asm.Div, false, 7, 0, 0, false, 0},
		{"div32 by zero", asm.Div, true, 7, 0, 0, false, 0},
		{"mod by zero keeps dst", asm.Mod, false, 7, 0, 7, false, 0},
		{"mod32 by zero keeps the low half", asm.Mod, true, 1<<32 | 7, 0, 7, false, 0},
		{"sdiv INT_MIN by -1", asm.SDiv, false, intMin64, math.MaxUint64, intMin64, false, 0},
		{"sdiv32 INT_MIN by -1", asm.SDiv, true, 0x80000000, 0xffffffff, 0x80000000, false, 0},
		{"smod INT_MIN by -1", asm.SMod, false, intMin64, math.MaxUint64, 0, false, 0},
		{"smod by zero keeps dst", asm.SMod, false, uint64(1<<64 - 5), 0, uint64(1<<64 - 5), false, 0},
		{"smod32 sign follows the dividend", asm.SMod, true, uint64(uint32(0xfffffff9)), 3, 0xffffffff, false, 0},
		{"sdiv rounds toward zero", asm.SDiv, false, uint64(1<<64 - 7), 2, uint64(1<<64 - 3), false, 0},
		{"add32 zero-extends", asm.Add, true, 0xffffffff, 1, 0, false, 0},
		{"lsh masks the count", asm.LSh, false, 1, 65, 2, false, 0},
		{"lsh32 masks the count", asm.LSh, true, 1, 33, 2, false, 0},
		{"arsh32", asm.ArSh, true, 0x80000000, 4, 0xf8000000, false, 0},
		{"arsh64", asm.ArSh, false, intMin64, 63, math.MaxUint64, false, 0},
		{"movsx8", asm.MovSX8, false, 0, 0x80, uint64(1<<64 - 128), false, 0},
		{"movsx16 in ALU32", asm.MovSX16, true, 0, 0x8000, 0xffff8000, false, 0},
		{"movsx32", asm.MovSX32, false, 0, 0x80000000, 0xffffffff80000000, false, 0},
		{"neg32", asm.Neg, true, 1, 0, 0xffffffff, false, 0},
		{"be16", asm.Swap, true, 0x1234, 0, 0x3412, false, 16},
		{"le16 truncates", asm.Swap, true, 0xabcd1234, 0, 0x1234, true, 16},
		{"be32", asm.Swap, true, 0x1122334455667788, 0, 0x88776655, false, 32},
		{"bswap16", asm.Swap, false, 0xff1234, 0, 0x3412, false, 16},
		{"bswap64", asm.Swap, false, 0x0102030405060708, 0, 0x0807060504030201, false, 64},
		{"mul32 wraps", asm.Mul, true, 0x80000000, 2, 0, false, 0},
	}
	for _, tc := range cases {
		if got := evalALU(tc.op, tc.alu32, tc.le, tc.d, tc.s, tc.swapSz); got != tc.want {
			t.Errorf("%s: got %#x, want %#x", tc.name, got, tc.want)
		}
	}
}
