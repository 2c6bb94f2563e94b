package ptx

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/interp"
)

// ghOp is one helper call on the GPU hash map "gh" of a test program.
type ghOp struct {
	id    jit.HelperID
	key   uint32
	val   int32
	flags int32
}

// ghProgram calls ops in turn and returns a digest of their results:
// r6 = r6*31 + result, where a lookup's result is the value found (its
// first 8 bytes) or -1, and an update's or delete's is its r0.
func ghProgram(ops []ghOp) asm.Instructions {
	insns := asm.Instructions{asm.Mov.Imm(asm.R6, 0)}
	for _, op := range ops {
		insns = append(insns,
			asm.StoreImm(asm.R10, -4, int64(op.key), asm.Word),
			stImm64(-16, op.val),
			mapPtr(asm.R1, "gh"),
			asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, -4),
			asm.Mov.Reg(asm.R3, asm.R10), asm.Add.Imm(asm.R3, -16),
			asm.Mov.Imm(asm.R4, op.flags),
			call(op.id))
		if op.id == jit.HelperMapLookupElem {
			insns = append(insns,
				asm.Instruction{OpCode: asm.JNE.Op(asm.ImmSource), Dst: asm.R0, Offset: 2},
				asm.Mov.Imm(asm.R0, -1), ja(1),
				asm.LoadMem(asm.R0, asm.R0, 0, asm.DWord))
		}
		insns = append(insns, asm.Mul.Imm(asm.R6, 31), asm.Add.Reg(asm.R6, asm.R0))
	}
	return append(insns, asm.Mov.Reg(asm.R0, asm.R6), asm.Return())
}

// ghOps is a deterministic mix of operations on few keys, so that keys
// repeat, collide, fill the table and get deleted and revived.
func ghOps(n int, keys uint32, seed uint64) []ghOp {
	r := rand.New(rand.NewPCG(seed, 1))
	ids := []jit.HelperID{jit.HelperMapUpdateElem, jit.HelperMapUpdateElem, jit.HelperMapLookupElem, jit.HelperMapDeleteElem}
	ops := make([]ghOp, n)
	for i := range ops {
		ops[i] = ghOp{id: ids[r.IntN(len(ids))], key: r.Uint32N(keys), val: r.Int32N(1000), flags: r.Int32N(4)}
	}
	return ops
}

// runGHBoth runs ops through the interpreter and through the compiled
// PTX on the emulator; the digests and the tables must agree.
func runGHBoth(t *testing.T, def *jit.Map, ops []ghOp) (uint64, []byte) {
	t.Helper()
	insns := ghProgram(ops)
	p := &jit.Program{Name: "t", Insns: insns, Maps: []*jit.Map{def}}
	maps := interp.NewMaps()
	want, err := interp.Run(p, nil, &interp.Env{Maps: maps})
	if err != nil {
		t.Fatalf("interp: %v", err)
	}
	wantTable, _, err := maps.GPUHashTable(def.Name)
	if err != nil {
		t.Fatal(err)
	}
	f := compileProg(t, insns, p.Maps, Options{})
	var r *emuRegion
	got, _, err := emuRun(f, nil, 0, func(e *emu) { r = region(e, f, GlobalMap, def.Name, len(wantTable)) })
	if err != nil {
		t.Fatalf("emulator: %v", err)
	}
	if got != want {
		t.Errorf("digest: emulated %#x, interpreted %#x", got, want)
	}
	if table := r.data[dataOffset:]; !bytes.Equal(table, wantTable) {
		t.Errorf("tables differ:\nemulated    %x\ninterpreted %x", table, wantTable)
	}
	return got, wantTable
}

func TestGPUHashEmulated(t *testing.T) {
	tests := []struct {
		name    string
		entries uint32
		keys    uint32
		n       int
	}{
		{"roomy", 64, 16, 300},
		{"full", 8, 40, 300},
		{"tiny", 1, 3, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			def := &jit.Map{Name: "gh", Type: jit.MapTypeGPUHash, KeySize: 4, ValueSize: 8, MaxEntries: tt.entries}
			runGHBoth(t, def, ghOps(tt.n, tt.keys, uint64(tt.entries)))
		})
	}
}

// TestGPUHashEmulatedCollisions inserts more keys of one home slot than
// an operation probes: the rest are refused and counted, identically in
// the compiled code and the interpreter.
func TestGPUHashEmulatedCollisions(t *testing.T) {
	def := &jit.Map{Name: "gh", Type: jit.MapTypeGPUHash, KeySize: 4, ValueSize: 8, MaxEntries: 1024}
	l := jit.GPUHashLayout(def)
	home := func(k uint32) uint32 { return jit.HashKey(binary.LittleEndian.AppendUint32(nil, k)) & (l.Slots - 1) }
	var ops []ghOp
	for k := uint32(0); len(ops) < jit.HashProbeLimit+4; k++ {
		if home(k) == home(0) {
			ops = append(ops, ghOp{id: jit.HelperMapUpdateElem, key: k, val: int32(k)})
		}
	}
	last := ops[len(ops)-1].key
	ops = append(ops, ghOp{id: jit.HelperMapDeleteElem, key: ops[3].key}, ghOp{id: jit.HelperMapLookupElem, key: ops[jit.HashProbeLimit-1].key},
		ghOp{id: jit.HelperMapLookupElem, key: last})
	_, table := runGHBoth(t, def, ops)
	if full := binary.LittleEndian.Uint64(table[jit.HashFullAt:]); full != 4 {
		t.Errorf("full counter %d, want 4", full)
	}
	if n := binary.LittleEndian.Uint32(table[jit.HashCountAt:]); n != jit.HashProbeLimit-1 {
		t.Errorf("count %d, want %d", n, jit.HashProbeLimit-1)
	}
}

// TestGPUHashBusySlot: a slot claimed by another thread and never
// published makes an update of a key probing it give up with -EBUSY after
// the spin bound (no hang); lookups and deletes pass it.
func TestGPUHashBusySlot(t *testing.T) {
	def := &jit.Map{Name: "gh", Type: jit.MapTypeGPUHash, KeySize: 4, ValueSize: 8, MaxEntries: 4}
	l := jit.GPUHashLayout(def)
	home := jit.HashKey([]byte{5, 0, 0, 0}) & (l.Slots - 1)
	ops := []ghOp{{id: jit.HelperMapLookupElem, key: 5}, {id: jit.HelperMapDeleteElem, key: 5}, {id: jit.HelperMapUpdateElem, key: 5, val: 1}}
	f := compileProg(t, ghProgram(ops), []*jit.Map{def}, Options{})
	got, _, err := emuRun(f, nil, 0, func(e *emu) {
		r := region(e, f, GlobalMap, "gh", int(l.Bytes()))
		binary.LittleEndian.PutUint32(r.data[dataOffset+l.SlotAt(home):], jit.HashSlotBusy)
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := int64((-1*31-errNOENT)*31 - errBUSY); int64(got) != want {
		t.Fatalf("digest %d, want %d (miss, -ENOENT, -EBUSY)", int64(got), want)
	}
}

// TestGPUHashPtxas: the compiled hash helpers assemble for sm_80 and sm_90.
func TestGPUHashPtxas(t *testing.T) {
	if !needPtxas(t) {
		return
	}
	def := &jit.Map{Name: "gh", Type: jit.MapTypeGPUHash, KeySize: 4, ValueSize: 8, MaxEntries: 100}
	for _, arch := range []string{"sm_80", "sm_90"} {
		f := compileProg(t, ghProgram(ghOps(6, 4, 1)), []*jit.Map{def}, Options{Arch: arch})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := Assemble(ctx, TestModule(f), arch)
		cancel()
		if err != nil {
			t.Errorf("%s: ptxas: %v", arch, err)
		}
	}
}
