package interp

import (
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/jit"
)

func TestSemantics(t *testing.T) {
	tests := []struct {
		name string
		src  string // "exit" is appended
		mem  []byte
		want uint64
	}{
		{"alu32 zero-extends", "lddw %r0, -1\nadd32 %r0, 1", nil, 0},
		{"alu32 zero-extends mov", "lddw %r0, -1\nmov32 %r0, %r0", nil, 0xffffffff},
		{"mov64 imm sign-extends", "mov %r0, -2", nil, 0xfffffffffffffffe},
		{"mov32 imm", "mov32 %r0, -2", nil, 0xfffffffe},
		{"div by zero", "mov %r0, 7\nmov %r1, 0\ndiv %r0, %r1", nil, 0},
		{"div32 by zero", "lddw %r0, -1\ndiv32 %r0, 0", nil, 0},
		{"mod by zero keeps dst", "lddw %r0, -7\nmod %r0, 0", nil, 0xfffffffffffffff9},
		{"mod32 by zero zeroes high", "lddw %r0, -7\nmod32 %r0, 0", nil, 0xfffffff9},
		{"div unsigned", "mov %r0, -8\ndiv %r0, 2", nil, 0x7ffffffffffffffc},
		{"sdiv", "mov %r0, -8\nsdiv %r0, 3", nil, 0xfffffffffffffffe},
		{"sdiv by zero", "mov %r0, -8\nsdiv %r0, 0", nil, 0},
		{"sdiv intmin by -1", "lddw %r0, 0x8000000000000000\nsdiv %r0, -1", nil, 0x8000000000000000},
		{"sdiv32 intmin by -1", "mov32 %r0, 0x80000000\nsdiv32 %r0, -1", nil, 0x80000000},
		{"smod sign of dividend", "mov %r0, -7\nsmod %r0, 3", nil, 0xffffffffffffffff},
		{"smod neg divisor", "mov %r0, 7\nsmod %r0, -3", nil, 1},
		{"smod by zero keeps", "mov %r0, -7\nsmod %r0, 0", nil, 0xfffffffffffffff9},
		{"smod32 by zero zeroes high", "mov %r0, -7\nsmod32 %r0, 0", nil, 0xfffffff9},
		{"smod intmin by -1", "lddw %r0, 0x8000000000000000\nsmod %r0, -1", nil, 0},
		{"lsh masks count", "mov %r0, 1\nmov %r1, 65\nlsh %r0, %r1", nil, 2},
		{"lsh32 masks count", "mov %r0, 1\nmov %r1, 33\nlsh32 %r0, %r1", nil, 2},
		{"rsh logical", "mov %r0, -1\nrsh %r0, 60", nil, 0xf},
		{"arsh", "mov %r0, -16\narsh %r0, 2", nil, 0xfffffffffffffffc},
		{"arsh32", "mov32 %r0, 0x80000000\narsh32 %r0, 4", nil, 0xf8000000},
		{"neg", "mov %r0, 5\nneg %r0", nil, 0xfffffffffffffffb},
		{"neg32", "mov %r0, 5\nneg32 %r0", nil, 0xfffffffb},
		{"xor or and", "mov %r0, 0xf0\nxor %r0, 0xff\nor %r0, 0x100\nand %r0, 0x10f", nil, 0x10f},
		{"mul32 wraps", "mov32 %r0, 0x10000\nmul32 %r0, 0x10000", nil, 0},
		{"movsx8 64", "mov %r1, 0x80\nmovsx864 %r0, %r1", nil, 0xffffffffffffff80},
		{"movsx8 32", "mov %r1, 0x80\nmovsx832 %r0, %r1", nil, 0xffffff80},
		{"movsx16 64", "mov %r1, 0x8000\nmovsx1664 %r0, %r1", nil, 0xffffffffffff8000},
		{"movsx32 64", "mov32 %r1, 0x80000000\nmovsx3264 %r0, %r1", nil, 0xffffffff80000000},
		{"be16", "lddw %r0, 0x1122334455667788\nbe16 %r0", nil, 0x8877},
		{"be32", "lddw %r0, 0x1122334455667788\nbe32 %r0", nil, 0x88776655},
		{"be64", "lddw %r0, 0x1122334455667788\nbe64 %r0", nil, 0x8877665544332211},
		{"le16 truncates", "lddw %r0, 0x1122334455667788\nle16 %r0", nil, 0x7788},
		{"le32 truncates", "lddw %r0, 0x1122334455667788\nle32 %r0", nil, 0x55667788},
		{"le64", "lddw %r0, 0x1122334455667788\nle64 %r0", nil, 0x1122334455667788},
		{"bswap16", "lddw %r0, 0x1122334455667788\nbswap16 %r0", nil, 0x8877},
		{"bswap64", "lddw %r0, 0x1122334455667788\nbswap64 %r0", nil, 0x8877665544332211},
		{"jeq imm sign-extended", "lddw %r1, -1\nmov %r0, 0\njeq %r1, -1, +1\nexit\nmov %r0, 1", nil, 1},
		{"jgt unsigned", "mov %r1, -1\nmov %r0, 0\njgt %r1, 1, +1\nexit\nmov %r0, 1", nil, 1},
		{"jsgt signed", "mov %r1, -1\nmov %r0, 0\njsgt %r1, 1, +1\nmov %r0, 1", nil, 1},
		{"jeq32 low half", "lddw %r1, 0x100000005\nmov %r0, 0\njeq32 %r1, 5, +1\nexit\nmov %r0, 1", nil, 1},
		{"jslt32 sign", "mov32 %r1, 0xffffffff\nmov %r0, 0\njslt32 %r1, 0, +1\nexit\nmov %r0, 1", nil, 1},
		{"jset", "mov %r1, 6\nmov %r0, 0\njset %r1, 2, +1\nexit\nmov %r0, 1", nil, 1},
		{"ja32", "mov %r0, 1\nja32 +1\nmov %r0, 2", nil, 1},
		{"ldx sizes", "ldxb %r0, [%r1+1]\nldxh %r2, [%r1+2]\nlsh %r2, 8\nor %r0, %r2", []byte{1, 2, 3, 4}, 0x040302},
		{"ldxsb", "ldxsb %r0, [%r1]", []byte{0x80}, 0xffffffffffffff80},
		{"ldxsh", "ldxsh %r0, [%r1]", []byte{0, 0x80}, 0xffffffffffff8000},
		{"ldxsw", "ldxsw %r0, [%r1]", []byte{0, 0, 0, 0x80}, 0xffffffff80000000},
		{"st imm sizes", "stdw [%r10-8], -1\nsth [%r10-8], 0\nldxdw %r0, [%r10-8]", nil, 0xffffffffffff0000},
		{"r2 is ctx length", "mov %r0, %r2", make([]byte, 12), 12},
		{"ctx write", "stb [%r1], 9\nldxb %r0, [%r1]", []byte{0}, 9},
		{"atomic add32 wraps in place", "stdw [%r10-8], -1\nmov %r1, 1\nlock add32 [%r10-8], %r1\nldxdw %r0, [%r10-8]", nil, 0xffffffff00000000},
		{"atomic fetch or", "stdw [%r10-8], 1\nmov %r1, 2\nlock fetch or [%r10-8], %r1\nldxdw %r0, [%r10-8]\nlsh %r0, 8\nor %r0, %r1", nil, 0x301},
		{"atomic xchg", "stdw [%r10-8], 7\nmov %r1, 9\nlock xchg [%r10-8], %r1\nldxdw %r0, [%r10-8]\nlsh %r0, 8\nor %r0, %r1", nil, 0x907},
		{"cmpxchg miss", "stdw [%r10-8], 7\nmov %r0, 1\nmov %r1, 9\nlock cmpxchg [%r10-8], %r1\nldxdw %r1, [%r10-8]\nlsh %r1, 8\nor %r0, %r1", nil, 0x707},
		{"cmpxchg32 hit", "lddw %r2, 0x500000007\nstxdw [%r10-8], %r2\nlddw %r0, 0xff00000007\nmov %r1, 9\nlock cmpxchg32 [%r10-8], %r1\nldxdw %r1, [%r10-8]\nlsh %r0, 40\nor %r0, %r1", nil, 0x70500000009},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r0, err := Run(program(t, tt.src+"\nexit"), tt.mem, &Env{})
			if err != nil {
				t.Fatal(err)
			}
			if r0 != tt.want {
				t.Fatalf("r0 = %#x, want %#x", r0, tt.want)
			}
		})
	}
}

func TestFaults(t *testing.T) {
	arr := arrayMap("a", jit.MapTypeGPUArray, 8, 2)
	lookup := "stw [%r10-4], 0\nldmap %r1, a\nmov %r2, %r10\nadd %r2, -4\ncall 1\njne %r0, 0, +1\nexit\n"
	tests := []struct {
		name, src string
		mem       []byte
		want      string
	}{
		{"ctx overrun", "ldxw %r0, [%r1+2]\nexit", []byte{1, 2, 3, 4}, "insn 0 (line 1: ldxw %r0, [%r1+2]): read of 4 bytes at ctx+2 is out of bounds (ctx is 4 bytes)"},
		{"ctx underrun", "ldxb %r0, [%r1-1]\nexit", []byte{1}, "not a valid pointer"},
		{"stack below frame", "ldxdw %r0, [%r10-520]\nexit", nil, "insn 0 (line 1: ldxdw %r0, [%r10-520]): read of 8 bytes at r10-520 is outside the 512-byte stack frame"},
		{"stack above top", "stb [%r10], 1\nexit", nil, "write of 1 bytes at r10+0 is outside"},
		{"null", "mov %r1, 0\nldxdw %r0, [%r1+8]\nexit", nil, "insn 1 (line 2: ldxdw %r0, [%r1+8]): read of 8 bytes at 0x8: null pointer dereference"},
		{"wild pointer", "lddw %r1, 0x123456789\nldxb %r0, [%r1]\nexit", nil, "not a valid pointer"},
		{"map handle deref", "ldmap %r1, a\nldxdw %r0, [%r1]\nexit", nil, "map handles are not pointers"},
		{"map value overrun", lookup + "ldxdw %r0, [%r0+4]\nexit", nil, "crosses the end of the 8-byte value"},
		{"past the last value", strings.Replace(lookup, "stw [%r10-4], 0", "stw [%r10-4], 1", 1) + "ldxb %r0, [%r0+8]\nexit", nil, "beyond the value"},
		{"fell off end", "mov %r0, 1", nil, "fell off the end"},
		{"unknown helper", "call 4242\nexit", nil, "insn 0 (line 1: call 4242): unknown helper 4242"},
		{"bad map arg", "mov %r1, 5\ncall 1\nexit", nil, "map argument (r1) is 0x5, not a map handle"},
		{"bad key pointer", "ldmap %r1, a\nmov %r2, 0\ncall 1\nexit", nil, "key of map \"a\" (r2): read of 4 bytes at 0x0: null pointer dereference"},
		{"thread idx bad pointer", "mov %r1, %r10\nadd %r1, -8\nmov %r2, 0\nmov %r3, 0\ncall 505\nexit", nil, "get_thread_idx: pointer r2"},
		{"deep recursion", "call local f\nexit\nf:\ncall local f\nexit", nil, "call depth exceeds 8 frames"},
		{"map handle load alone is fine", "ldmap %r1, a\nmov %r0, 0\nexit", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Run(program(t, tt.src, arr), tt.mem, &Env{})
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want %q", err, tt.want)
			}
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error is %T, want *interp.Error", err)
			}
		})
	}
}

func TestPrepareErrors(t *testing.T) {
	ok := program(t, "mov %r0, 0\nexit")
	tests := []struct {
		name string
		edit func(p *jit.Program)
		want string
	}{
		{"empty", func(p *jit.Program) { p.Insns = nil }, "no instructions"},
		{"write r10", func(p *jit.Program) { p.Insns[0].Dst = 10 }, "insn 0 (line 1: mov %r0, 0): r10 (the frame pointer) is read-only"},
		{"jump out", func(p *jit.Program) { *p = *program(t, "ja +5\nexit") }, "insn 0 (line 1: ja +5): jump target +5 (slot 6) is outside the program"},
		{"jump into lddw", func(p *jit.Program) { *p = *program(t, "ja +1\nlddw %r0, 1\nexit") }, "inside an lddw"},
		{"missing map", func(p *jit.Program) { *p = *program(t, "ldmap %r1, nope\nexit") }, `map "nope" is not in Program.Maps`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := *ok
			p.Insns = append(p.Insns[:0:0], ok.Insns...)
			tt.edit(&p)
			_, err := Prepare(&p)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Prepare error = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestCalls(t *testing.T) {
	tests := []struct {
		name, src string
		want      uint64
	}{
		{"callee-saved and args", `mov %r1, 3
mov %r2, 4
mov %r6, 100
call local add
add %r0, %r6
exit
add:
mov %r0, %r1
add %r0, %r2
mov %r6, 7
exit`, 107},
		{"fresh zeroed frame", `stdw [%r10-8], 55
call local f
exit
f:
ldxdw %r0, [%r10-8]
exit`, 0},
		{"caller frame via pointer", `stdw [%r10-8], 55
mov %r1, %r10
add %r1, -8
call local f
ldxdw %r0, [%r10-8]
exit
f:
ldxdw %r2, [%r1]
add %r2, 1
stxdw [%r1], %r2
mov %r0, 0
exit`, 56},
		{"r10 restored", `mov %r6, %r10
call local f
mov %r0, %r10
sub %r0, %r6
exit
f:
stdw [%r10-8], 1
exit`, 0},
		{"nested 7 deep", `mov %r0, 0
call local f1
exit
f1:
add %r0, 1
call local f2
exit
f2:
add %r0, 1
call local f3
exit
f3:
add %r0, 1
call local f4
exit
f4:
add %r0, 1
call local f5
exit
f5:
add %r0, 1
call local f6
exit
f6:
add %r0, 1
call local f7
exit
f7:
add %r0, 1
exit`, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r0, err := Run(program(t, tt.src), nil, &Env{})
			if err != nil {
				t.Fatal(err)
			}
			if r0 != tt.want {
				t.Fatalf("r0 = %d, want %d", r0, tt.want)
			}
		})
	}
}

func TestLoopBudget(t *testing.T) {
	tests := []struct {
		name string
		n    string // iterations
		want uint64
	}{
		{"bounded loop finishes", "1000", 1000},
		{"budget backward jumps are allowed", "65537", 65537},
		{"one more backward jump ends with r0 = 0", "65538", 0},
		{"infinite loop ends", "0", 0}, // counts down from 0: wraps, never reaches 0 again in budget
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := "mov %r0, 0\nmov %r1, " + tt.n + "\nloop:\nadd %r0, 1\nsub %r1, 1\njne %r1, 0, loop\nexit"
			r0, err := Run(program(t, src), nil, &Env{})
			if err != nil {
				t.Fatal(err)
			}
			if r0 != tt.want {
				t.Fatalf("r0 = %d, want %d", r0, tt.want)
			}
		})
	}
	if jit.LoopBudget != 65536 {
		t.Fatalf("test assumes LoopBudget 65536, got %d", jit.LoopBudget)
	}
}

func TestRunWarp(t *testing.T) {
	// Each lane contributes laneid+1; odd lanes then diverge and take a
	// second sum among themselves only.
	src := `call 511
mov %r6, %r0
mov %r1, %r0
add %r1, 1
call 601
mov %r7, %r0
mov %r1, %r6
add %r1, 1
call 602
lsh %r0, 16
or %r7, %r0
call 604
lsh %r0, 24
or %r7, %r0
jset %r6, 1, odd
call 600
lsh %r0, 32
or %r0, %r7
exit
odd:
call 605
lsh %r0, 32
or %r0, %r7
exit`
	p := program(t, src)
	lanes := WarpLanes(&Env{}, nil, 8)
	got, err := RunWarp(p, lanes)
	if err != nil {
		t.Fatal(err)
	}
	const sum = 36 // 1..8
	base := uint64(sum) | 1<<16 | 8<<24
	for i, r0 := range got {
		var hi uint64
		if i%2 == 1 {
			hi = 0b10101010 // activemask of the odd lanes
		} else if i == 0 {
			hi = 1 // leader among the even lanes
		}
		if want := base | hi<<32; r0 != want {
			t.Errorf("lane %d: r0 = %#x, want %#x", i, r0, want)
		}
	}
	// Lanes that exit early do not take part in later collectives.
	src2 := "call 511\njlt %r0, 4, +2\nmov %r0, 0\nexit\ncall 604\nexit"
	got, err = RunWarp(program(t, src2), WarpLanes(&Env{}, nil, 32))
	if err != nil {
		t.Fatal(err)
	}
	for i, r0 := range got {
		want := uint64(0)
		if i < 4 {
			want = 4
		}
		if r0 != want {
			t.Errorf("early exit: lane %d r0 = %d, want %d", i, r0, want)
		}
	}
	if _, err := RunWarp(p, nil); err == nil {
		t.Error("RunWarp with no lanes succeeded")
	}
	if _, err := RunWarp(p, WarpLanes(&Env{}, nil, 33)); err == nil {
		t.Error("RunWarp with 33 lanes succeeded")
	}
	bad := WarpLanes(&Env{}, nil, 2)
	bad[1].Env.Maps = NewMaps()
	if _, err := RunWarp(p, bad); err == nil || !strings.Contains(err.Error(), "different Maps") {
		t.Errorf("RunWarp with two map stores: %v", err)
	}
	faulty := program(t, "call 511\njeq %r0, 3, +2\nmov %r0, 0\nexit\nldxb %r0, [%r1]\nexit")
	if _, err := RunWarp(faulty, WarpLanes(&Env{}, nil, 4)); err == nil || !strings.HasPrefix(err.Error(), "lane 3: insn 4") {
		t.Errorf("fault in lane 3: %v", err)
	}
}

func BenchmarkInterp(b *testing.B) {
	// Sum of i*i for i < 1000 with a bounds-checked stack spill per
	// iteration: about 7 instructions per iteration.
	src := `mov %r0, 0
mov %r1, 0
loop:
mov %r2, %r1
mul %r2, %r1
add %r0, %r2
stxdw [%r10-8], %r0
ldxdw %r0, [%r10-8]
add %r1, 1
jlt %r1, 1000, loop
exit`
	m, err := Prepare(program(b, src))
	if err != nil {
		b.Fatal(err)
	}
	env := &Env{Maps: NewMaps()}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.Run(nil, env); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(7002*b.N)/b.Elapsed().Seconds()/1e6, "Minsn/s")
}

func BenchmarkInterpMapUpdate(b *testing.B) {
	p := program(b, strings.ReplaceAll(counterProg, "r6val", "1"), arrayMap("counts", jit.MapTypeGPUArray, 8, 4))
	m, err := Prepare(p)
	if err != nil {
		b.Fatal(err)
	}
	env := &Env{Maps: NewMaps()}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.Run(nil, env); err != nil {
			b.Fatal(err)
		}
	}
}
