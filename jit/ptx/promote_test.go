package ptx

import (
	"encoding/binary"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/verifier"
)

// TestFrameSlots runs programs that keep values in frame slots across
// helper calls, with and without the verifier's facts, on the emulator:
// with them, a slot that is only ever stored and loaded whole at r10+off
// (or read as a loaded key) is a register (no st.local/ld.local for it),
// a slot also reached through a pointer stays in memory, and every program
// returns the same value either way.
func TestFrameSlots(t *testing.T) {
	unknown := seq(call(jit.HelperKtimeGetNs), asm.RSh.Imm(asm.R0, 63)) // 0 at run time, 0 or 1 to the verifier
	tests := []struct {
		name     string
		insns    asm.Instructions
		want     uint64
		inRegs   []int64 // slots kept in registers under the proofs
		inMemory []int64 // slots that stay in local memory
	}{
		{"spills across calls", concat(
			seq(asm.Mov.Imm(asm.R6, 5), asm.StoreMem(asm.R10, -8, asm.R6, asm.DWord),
				stImm64(-16, 7)),
			unknown,
			seq(asm.LoadMem(asm.R1, asm.R10, -8, asm.DWord), asm.LoadMem(asm.R2, asm.R10, -16, asm.DWord),
				asm.Add.Reg(asm.R1, asm.R2), asm.StoreMem(asm.R10, -8, asm.R1, asm.DWord)),
			unknown,
			seq(asm.LoadMem(asm.R0, asm.R10, -8, asm.DWord), asm.Return())), 12, []int64{-8, -16}, nil},
		{"a slot reached through a pointer", concat(
			seq(stImm64(-8, 4), stImm64(-16, 9),
				asm.Mov.Reg(asm.R3, asm.R10), asm.Add.Imm(asm.R3, -16), asm.Mov.Imm(asm.R4, 10),
				asm.StoreMem(asm.R3, 0, asm.R4, asm.DWord)),
			unknown,
			seq(asm.LoadMem(asm.R1, asm.R10, -8, asm.DWord), asm.LoadMem(asm.R0, asm.R10, -16, asm.DWord),
				asm.Add.Reg(asm.R0, asm.R1), asm.Return())), 14, []int64{-8}, []int64{-16}},
		{"a slot read in halves as keys", concat(
			unknown,
			seq(asm.LoadImm(asm.R6, 3<<32|1, asm.DWord), asm.Add.Reg(asm.R6, asm.R0), asm.StoreMem(asm.R10, -8, asm.R6, asm.DWord)),
			keyLookup(-8), seq(asm.Mov.Reg(asm.R7, asm.R0)), // counts[1] = 10
			keyLookup(-4), seq(asm.Add.Reg(asm.R0, asm.R7), asm.Return())), // + counts[3] = 30
			40, []int64{-8}, nil},
		{"4-byte halves", concat(
			seq(asm.LoadImm(asm.R6, 1<<32|5, asm.DWord), asm.StoreMem(asm.R10, -4, asm.R6, asm.Word), // the low 32 bits: 5
				asm.StoreImm(asm.R10, -8, 7, asm.Word)),
			unknown,
			seq(asm.LoadMem(asm.R1, asm.R10, -4, asm.Word), asm.LoadMem(asm.R2, asm.R10, -8, asm.Word),
				asm.LSh.Imm(asm.R1, 8), asm.Add.Reg(asm.R1, asm.R2), asm.Mov.Reg(asm.R0, asm.R1), asm.Return())),
			5<<8 | 7, []int64{-8, -4}, nil},
		{"a slot read whole and by halves", concat(
			seq(asm.LoadImm(asm.R6, 3<<32|4, asm.DWord), asm.StoreMem(asm.R10, -8, asm.R6, asm.DWord)),
			unknown,
			seq(asm.LoadMem(asm.R1, asm.R10, -4, asm.Word), asm.LoadMem(asm.R0, asm.R10, -8, asm.DWord),
				asm.Add.Reg(asm.R0, asm.R1), asm.Return())),
			3<<32 | 4 + 3, nil, []int64{-8}},
	}
	for _, tt := range tests {
		for _, proofs := range []bool{false, true} {
			m := &jit.Map{Name: "counts", Type: jit.MapTypeGPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 4}
			f := compileProofs(t, &jit.Program{Name: "t", Insns: tt.insns, Maps: []*jit.Map{m}}, proofs)
			got, _, err := emuRun(f, nil, 0, countsSetup(f))
			if err != nil {
				t.Fatalf("%s, proofs=%v: %v", tt.name, proofs, err)
			}
			if got != tt.want {
				t.Errorf("%s, proofs=%v: r0 = %d, want %d", tt.name, proofs, got, tt.want)
			}
			frame := frameOf(f)
			for _, off := range tt.inRegs {
				slot := "[__stack+" + itoa(frame+off) + "]"
				if inMem := strings.Contains(f.Body, slot); inMem == proofs {
					t.Errorf("%s, proofs=%v: slot r10%d in local memory: %v", tt.name, proofs, off, inMem)
				}
			}
			for _, off := range tt.inMemory {
				if proofs && !strings.Contains(f.Body, "[__stack+"+itoa(frame+off)+"]") {
					t.Errorf("%s: slot r10%d not in local memory", tt.name, off)
				}
			}
		}
	}
}

// countsSetup gives the emulator the map "counts" (4 u64 values, key k
// holding 10*k) for f.
func countsSetup(f *Func) func(e *emu) {
	return func(e *emu) {
		r := e.alloc(dataOffset+4*8, false, "counts")
		for k := range 4 {
			binary.LittleEndian.PutUint64(r.data[dataOffset+8*k:], uint64(10*k))
		}
		if _, ok := f.Global(GlobalMap, "counts"); ok {
			setGlobal(e, f, GlobalMap, "counts", r.base)
		}
	}
}

// frameOf is the size of f's __stack (its r10 is __stack + that), 0
// without one.
func frameOf(f *Func) int64 {
	m := regexp.MustCompile(`__stack\[(\d+)\]`).FindStringSubmatch(f.Body)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// keyLookup looks up counts with the key at r10+off; NULL gives 99.
func keyLookup(off int32) asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, off),
		mapPtr(asm.R1, "counts"), call(jit.HelperMapLookupElem),
		asm.Instruction{OpCode: asm.JNE.Op(asm.ImmSource), Dst: asm.R0, Constant: 0, Offset: 2},
		asm.Mov.Imm(asm.R0, 99), asm.Return(),
		asm.LoadMem(asm.R0, asm.R0, 0, asm.DWord),
	}
}

func seq(list ...asm.Instruction) asm.Instructions { return list }

func concat(parts ...asm.Instructions) asm.Instructions {
	var out asm.Instructions
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// TestFactComments: with Options.Comments, each instruction's comment names
// what the verifier's facts changed in its code.
func TestFactComments(t *testing.T) {
	m := &jit.Map{Name: "counts", Type: jit.MapTypePerBlockArray, KeySize: 4, ValueSize: 8, MaxEntries: 4}
	p := &jit.Program{Name: "t", Insns: lookupAdd(1), Maps: []*jit.Map{m}}
	res, err := verifier.Verify(p, verifier.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := Compile(p, Options{Verified: res, Comments: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"[dead store: not written]", "[key 1 folded]", "[always taken]", "[shared counts+8]"} {
		if !strings.Contains(f.Body, want) {
			t.Errorf("no %q in the comments:\n%s", want, f.Body)
		}
	}
	plain, err := Compile(p, Options{Comments: true})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain.Body, "folded") {
		t.Errorf("facts in the comments without the verifier's result:\n%s", plain.Body)
	}
}

// TestFrameSize: with the verifier's result, a function's __stack is the
// stack it uses rounded up to 8 bytes (a helper's buffer included), not
// the whole eBPF stack; the program still runs in the emulator, which
// faults a .local access outside the array.
func TestFrameSize(t *testing.T) {
	m := &jit.Map{Name: "counts", Type: jit.MapTypeGPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 4}
	tests := []struct {
		name   string
		insns  asm.Instructions
		want   uint64 // r0
		frame  int64  // with proofs
		noproo int64  // without
	}{
		{"no stack", seq(asm.Mov.Imm(asm.R0, 7), asm.Return()), 7, 0, 0},
		{"a word at r10-20", seq(asm.StoreImm(asm.R10, -20, 5, asm.Word), asm.LoadMem(asm.R0, asm.R10, -20, asm.Word), asm.Return()), 5, 24, 512},
		{"a key read by the lookup helper", append(append(seq(asm.StoreImm(asm.R10, -40, 2, asm.Word)), keyLookup(-40)...), asm.Return()), 20, 40, 512},
	}
	for _, tt := range tests {
		for _, proofs := range []bool{false, true} {
			f := compileProofs(t, &jit.Program{Name: "t", Insns: tt.insns, Maps: []*jit.Map{m}}, proofs)
			want := tt.noproo
			if proofs {
				want = tt.frame
			}
			if got := frameOf(f); got != want {
				t.Errorf("%s, proofs=%v: __stack[%d], want %d", tt.name, proofs, got, want)
			}
			got, _, err := emuRun(f, nil, 0, countsSetup(f))
			if err != nil || got != tt.want {
				t.Errorf("%s, proofs=%v: r0 = %d, %v; want %d", tt.name, proofs, got, err, tt.want)
			}
		}
	}
}
