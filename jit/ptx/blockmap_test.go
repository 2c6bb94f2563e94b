package ptx

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
)

// Per-block arrays (map type 1601) and the helpers 607..609, through the
// PTX emulator (emu_test.go) and ptxas.

func blockMap(name string, valueSize, entries uint32) *jit.Map {
	return &jit.Map{Name: name, Type: jit.MapTypePerBlockArray, KeySize: 4, ValueSize: valueSize, MaxEntries: entries}
}

// jneOver skips the next two instructions (mov r0, 99; exit) when r0 != 0.
var jneOver = asm.Instruction{OpCode: asm.JNE.Op(asm.ImmSource), Dst: asm.R0, Constant: 0, Offset: 2}

// lookupKey is key = k at r10-4; r0 = map_lookup_elem(&name, &key); r0 = 99
// and exit when it is NULL.
func lookupKey(name string, k int32) asm.Instructions {
	return asm.Instructions{
		asm.StoreImm(asm.R10, -4, int64(k), asm.Word),
		asm.Mov.Reg(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, -4),
		mapPtr(asm.R1, name),
		call(jit.HelperMapLookupElem),
		jneOver,
		asm.Mov.Imm(asm.R0, 99),
		asm.Return(),
	}
}

// runEntries runs the test entries of the module's programs one after the
// other as the same thread of the same block (so they share its .shared
// variables) and returns each r0.
func runEntries(t *testing.T, fs ...*Func) ([]uint64, *emu) {
	t.Helper()
	e, err := newEmu(TestModule(fs...))
	if err != nil {
		t.Fatal(err)
	}
	res := e.alloc(8, false, "result")
	var out []uint64
	for _, f := range fs {
		if _, err := e.call(TestEntry(f), []uint64{0, 0, res.base}); err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		out = append(out, binary.LittleEndian.Uint64(res.data))
	}
	return out, e
}

// sharedBytes returns the emulator's memory of per-block map name.
func sharedBytes(t *testing.T, e *emu, name string) []byte {
	t.Helper()
	a, ok := e.globals[SharedName(name)]
	if !ok {
		t.Fatalf("no .shared variable %s in the module", SharedName(name))
	}
	return e.mustRegion(a).data
}

func TestPerBlockArrayLookup(t *testing.T) {
	tests := []struct {
		name  string
		key   int32
		runs  int    // entries run in the same block
		want  uint64 // r0 of the last run: the value after the add, or 99 for NULL
		slot  int    // slot holding 5*runs afterwards, -1: none
		slots int
	}{
		{"key 0 once", 0, 1, 5, 0, 4},
		{"key 3 accumulates in the block", 3, 3, 15, 3, 4},
		{"key out of range", 4, 1, 99, -1, 4},
		{"huge key", -1, 1, 99, -1, 4},
	}
	for _, tt := range tests {
		for _, proofs := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/proofs=%v", tt.name, proofs), func(t *testing.T) { runBlockLookup(t, tt.key, tt.runs, tt.want, tt.slot, tt.slots, proofs) })
		}
	}
}

// runBlockLookup runs lookupAdd on a per-block array with slots entries,
// runs times in one block, and checks r0 (want) and which slot holds the
// sum (-1: none). With proofs (the verifier's result), the key is folded
// in and the value's accesses use the .shared space, which the emulator
// checks lands in the .shared variable.
func runBlockLookup(t *testing.T, key int32, runs int, want uint64, slot, slots int, proofs bool) {
	m := blockMap("counts", 8, uint32(slots))
	f := compileProofs(t, &jit.Program{Name: "t", Insns: lookupAdd(key), Maps: []*jit.Map{m}}, proofs)
	if shared := strings.Contains(f.Body, "red.shared.add.u64") && strings.Contains(f.Body, "ld.shared.u64"); shared != proofs {
		t.Fatalf("shared-space accesses %v with proofs=%v:\n%s", shared, proofs, f.Body)
	}
	// With the proofs and a key in range the value's byte is known, so
	// the accesses name the variable: no generic-to-shared conversion.
	if proofs && key >= 0 && int(key) < slots {
		if strings.Contains(f.Body, "cvta.to.shared") || !strings.Contains(f.Body, "["+SharedName("counts")+"+") {
			t.Fatalf("key %d in range: accesses do not name the variable:\n%s", key, f.Body)
		}
	}
	if len(f.Globals) != 0 {
		t.Errorf("globals %+v: a per-block array binds none", f.Globals)
	}
	if len(f.Shared) != 1 || f.Shared[0] != (Shared{Name: SharedName("counts"), Map: "counts", Size: uint64(8 * slots)}) {
		t.Errorf("Shared = %+v", f.Shared)
	}
	e, err := newEmu(TestModule(f))
	if err != nil {
		t.Fatal(err)
	}
	res := e.alloc(8, false, "result")
	var got uint64
	for range runs {
		if _, err := e.call(TestEntry(f), []uint64{0, 0, res.base}); err != nil {
			t.Fatal(err)
		}
		got = binary.LittleEndian.Uint64(res.data)
	}
	if got != want {
		t.Fatalf("r0 = %d, want %d", got, want)
	}
	mem := sharedBytes(t, e, "counts")
	for i := range slots {
		v := binary.LittleEndian.Uint64(mem[8*i:])
		if want := uint64(5 * runs); i == slot && v != want || i != slot && v != 0 {
			t.Errorf("slot %d = %d after %d runs", i, v, runs)
		}
	}
}

// TestPerBlockArrayShared: an entry and an exit program, compiled under
// their own prefixes into one module, address one .shared variable: what
// the first writes (update, direct value store), the second reads.
func TestPerBlockArrayShared(t *testing.T) {
	m := blockMap("blk", 12, 2)
	writer := asm.Instructions{
		asm.StoreImm(asm.R10, -4, 1, asm.Word),
		stImm64(-16, 0x0102_0304),
		asm.StoreImm(asm.R10, -8, 0x77, asm.Word),
		mapPtr(asm.R1, "blk"),
		asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, -4),
		asm.Mov.Reg(asm.R3, asm.R10), asm.Add.Imm(asm.R3, -16),
		asm.Mov.Imm(asm.R4, 0),
		call(jit.HelperMapUpdateElem),
		asm.Mov.Reg(asm.R6, asm.R0),
		// Direct value access: key 0, byte 8.
		asm.LoadMapValue(asm.R1, 0, 8).WithReference("blk"),
		asm.StoreImm(asm.R1, 0, 0x55, asm.Word),
		asm.Mov.Reg(asm.R0, asm.R6),
		asm.Return(),
	}
	reader := append(lookupKey("blk", 1),
		asm.LoadMem(asm.R6, asm.R0, 0, asm.DWord), // 0x01020304
		asm.LoadMem(asm.R7, asm.R0, 8, asm.Word),  // 0x77
		asm.StoreImm(asm.R10, -4, 0, asm.Word),
		asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, -4),
		mapPtr(asm.R1, "blk"),
		call(jit.HelperMapLookupElem),
		jneOver,
		asm.Mov.Imm(asm.R0, 98),
		asm.Return(),
		asm.LoadMem(asm.R0, asm.R0, 8, asm.Word), // 0x55
		asm.LSh.Imm(asm.R0, 40),
		asm.LSh.Imm(asm.R7, 32),
		asm.Or.Reg(asm.R0, asm.R7),
		asm.Or.Reg(asm.R0, asm.R6),
		asm.Return(),
	)
	compile := func(name string, insns asm.Instructions, maps ...*jit.Map) *Func {
		t.Helper()
		f, err := Compile(&jit.Program{Name: name, Insns: insns, Maps: maps}, Options{Prefix: "gpuprobe_" + name})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return f
	}
	fw := compile("enter", writer, m)
	fr := compile("leave", reader, m)
	mod := TestModule(fw, fr)
	if n := strings.Count(mod, ".shared "); n != 1 {
		t.Fatalf("module declares %d .shared variables, want 1:\n%s", n, mod)
	}
	got, e := runEntries(t, fw, fr)
	if got[0] != 0 {
		t.Errorf("update returned %d, want 0", int64(got[0]))
	}
	if want := uint64(0x55)<<40 | 0x77<<32 | 0x0102_0304; got[1] != want {
		t.Errorf("reader r0 = %#x, want %#x", got[1], want)
	}
	mem := sharedBytes(t, e, "blk")
	if len(mem) != 32 {
		t.Errorf(".shared variable is %d bytes, want 2 × 16", len(mem))
	}
	if !needPtxas(t) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := Assemble(ctx, mod, DefaultArch); err != nil {
		t.Fatalf("ptxas rejects the two programs in one module: %v", err)
	}
}

func TestSharedDecls(t *testing.T) {
	a := &Func{Name: "a", Shared: []Shared{{Name: SharedName("x"), Map: "x", Size: 16}, {Name: SharedName("y"), Map: "y", Size: 8}}}
	b := &Func{Name: "b", Shared: []Shared{{Name: SharedName("x"), Map: "x", Size: 16}}}
	bad := &Func{Name: "bad", Shared: []Shared{{Name: SharedName("x"), Map: "x", Size: 24}}}
	tests := []struct {
		name    string
		calls   [][]*Func // one SharedDecls call per element, with one seen map
		want    []string  // declarations per call
		wantErr string
	}{
		{"one program", [][]*Func{{a}}, []string{
			".shared .align 8 .b8 gpuprobe_blk_x[16];\n.shared .align 8 .b8 gpuprobe_blk_y[8];\n"}, ""},
		{"same map twice in one call", [][]*Func{{a, b}}, []string{
			".shared .align 8 .b8 gpuprobe_blk_x[16];\n.shared .align 8 .b8 gpuprobe_blk_y[8];\n"}, ""},
		{"declared by an earlier call", [][]*Func{{a}, {b}}, []string{
			".shared .align 8 .b8 gpuprobe_blk_x[16];\n.shared .align 8 .b8 gpuprobe_blk_y[8];\n", ""}, ""},
		{"sizes differ", [][]*Func{{a}, {bad}}, []string{
			".shared .align 8 .b8 gpuprobe_blk_x[16];\n.shared .align 8 .b8 gpuprobe_blk_y[8];\n"}, `per-block map "x" is 24 bytes in program bad and 16 bytes`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seen := map[string]uint64{}
			for i, fs := range tt.calls {
				got, err := SharedDecls(seen, fs...)
				if err != nil {
					if tt.wantErr == "" || !strings.Contains(err.Error(), tt.wantErr) {
						t.Fatalf("call %d: %v, want %q", i, err, tt.wantErr)
					}
					return
				}
				if got != tt.want[i] {
					t.Errorf("call %d: %q, want %q", i, got, tt.want[i])
				}
			}
			if tt.wantErr != "" {
				t.Fatalf("no error, want %q", tt.wantErr)
			}
		})
	}
}

func TestPerBlockArrayLimits(t *testing.T) {
	lookup := append(lookupKey("blk", 0), asm.LoadMem(asm.R0, asm.R0, 0, asm.Byte), asm.Return())
	direct := asm.Instructions{asm.LoadMapValue(asm.R0, 0, 0).WithReference("blk"), asm.LoadMem(asm.R0, asm.R0, 0, asm.Byte), asm.Return()}
	tests := []struct {
		name    string
		insns   asm.Instructions
		m       *jit.Map
		wantErr string // "" = compiles
	}{
		{"1 KiB", lookup, blockMap("blk", 8, 128), ""},
		{"1 KiB of 5-byte values (8 aligned)", lookup, blockMap("blk", 5, 128), ""},
		{"over 1 KiB", lookup, blockMap("blk", 8, 129), `per-block map "blk": 129 entries of 8 bytes take 1032 bytes`},
		{"9-byte values count 16", lookup, blockMap("blk", 9, 64), ""},
		{"9-byte values over 1 KiB", lookup, blockMap("blk", 9, 65), `per-block map "blk": 65 entries of 16 bytes take 1040 bytes`},
		{"direct access over 1 KiB", direct, blockMap("blk", 2048, 1), `per-block map "blk": 1 entries of 2048 bytes`},
		{"no entries", lookup, blockMap("blk", 8, 0), `per-block map "blk": value size 8, max_entries 0`},
		{"key not a u32", lookup, &jit.Map{Name: "blk", Type: jit.MapTypePerBlockArray, KeySize: 8, ValueSize: 8, MaxEntries: 1}, "array keys are 4 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Compile(&jit.Program{Name: "t", Insns: tt.insns, Maps: []*jit.Map{tt.m}}, Options{})
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("rejected: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("err %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// minMaxProg stores init at the pointer (a GPU array value, a per-block
// value or the stack, plus off), calls helper id on it with v and returns
// the value there plus the helper's r0 (which must be 0).
func minMaxProg(where string, off int32, id jit.HelperID, init, v uint64) asm.Instructions {
	var insns asm.Instructions
	switch where {
	case "stack":
		insns = asm.Instructions{asm.Mov.Reg(asm.R6, asm.R10), asm.Add.Imm(asm.R6, -16+off)}
	default:
		insns = append(lookupKey(where, 0), asm.Mov.Reg(asm.R6, asm.R0), asm.Add.Imm(asm.R6, off))
	}
	return append(insns,
		asm.LoadImm(asm.R1, int64(init), asm.DWord),
		asm.StoreMem(asm.R6, 0, asm.R1, asm.DWord),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.LoadImm(asm.R2, int64(v), asm.DWord),
		call(id),
		asm.LoadMem(asm.R1, asm.R6, 0, asm.DWord),
		asm.Add.Reg(asm.R0, asm.R1),
		asm.Return(),
	)
}

func TestAtomicMinMaxHelpers(t *testing.T) {
	const big = 0xffff_ffff_ffff_fff0 // above 2^63: compares unsigned
	tests := []struct {
		name  string
		where string // "arr" (GPU array, global memory), "blk" (per-block, shared) or "stack" (.local)
		off   int32
		id    jit.HelperID
		init  uint64
		v     uint64
		want  uint64
	}{
		{"max raises, global", "arr", 0, jit.HelperAtomicMaxU64, 10, 15, 15},
		{"max keeps, global", "arr", 8, jit.HelperAtomicMaxU64, 20, 15, 20},
		{"max is unsigned, global", "arr", 0, jit.HelperAtomicMaxU64, 7, big, big},
		{"min lowers, global", "arr", 0, jit.HelperAtomicMinU64, 20, 15, 15},
		{"min keeps, global", "arr", 8, jit.HelperAtomicMinU64, 10, 15, 10},
		{"min is unsigned, global", "arr", 0, jit.HelperAtomicMinU64, 7, big, 7},
		{"max, shared", "blk", 0, jit.HelperAtomicMaxU64, 3, 4, 4},
		{"min, shared", "blk", 8, jit.HelperAtomicMinU64, 3, 4, 3},
		{"max, stack (plain path)", "stack", 0, jit.HelperAtomicMaxU64, 1, 2, 2},
		{"min, stack (plain path)", "stack", 8, jit.HelperAtomicMinU64, big, 2, 2},
		{"max, misaligned (plain path)", "arr", 4, jit.HelperAtomicMaxU64, 0x0102_0304_0506_0708, 0x0102_0304_0506_0709, 0x0102_0304_0506_0709},
		{"min, misaligned shared (plain path)", "blk", 3, jit.HelperAtomicMinU64, 9, 8, 8},
	}
	for _, tt := range tests {
		// With the verifier's facts (aligned cases: it rejects a
		// misaligned atomic), a map value's space is known: the red is
		// .global or .shared, and the emulator checks the address is.
		modes := []bool{false}
		if tt.off%8 == 0 {
			modes = append(modes, true)
		}
		for _, proofs := range modes {
			t.Run(fmt.Sprintf("%s/proofs=%v", tt.name, proofs), func(t *testing.T) {
				runMinMax(t, tt.where, tt.off, tt.id, tt.init, tt.v, tt.want, proofs)
			})
		}
	}
}

// runMinMax runs minMaxProg (where, off, id, initial, v) and checks r0
// and the memory (want); proofs compiles with the verifier's result.
func runMinMax(t *testing.T, where string, off int32, id jit.HelperID, initial, v, want uint64, proofs bool) {
	maps := []*jit.Map{
		{Name: "arr", Type: jit.MapTypeGPUArray, KeySize: 4, ValueSize: 16, MaxEntries: 1},
		blockMap("blk", 16, 1),
	}
	f := compileProofs(t, &jit.Program{Name: "t", Insns: minMaxProg(where, off, id, initial, v), Maps: maps}, proofs)
	space := ""
	if proofs {
		space = map[string]string{"arr": ".global", "blk": ".shared"}[where]
	}
	op := "red" + space + map[jit.HelperID]string{jit.HelperAtomicMaxU64: ".max.u64", jit.HelperAtomicMinU64: ".min.u64"}[id]
	if !strings.Contains(f.Body, op) {
		t.Errorf("no %s in the PTX", op)
	}
	var arr *emuRegion
	got, e, err := emuRun(f, nil, 0, func(e *emu) {
		if where == "arr" {
			arr = region(e, f, GlobalMap, "arr", 16)
		}
	})
	if err != nil {
		t.Fatal(err) // the emulator fails an atomic on .local or a misaligned access
	}
	if got != want {
		t.Fatalf("r0 = %#x, want %#x", got, want)
	}
	var mem []byte
	switch where {
	case "arr":
		mem = arr.data[dataOffset:]
	case "blk":
		mem = sharedBytes(t, e, "blk")
	default:
		return
	}
	if got := binary.LittleEndian.Uint64(mem[off:]); got != want {
		t.Errorf("memory holds %#x, want %#x", got, want)
	}
}

func TestFenceGPU(t *testing.T) {
	f := compileProg(t, asm.Instructions{asm.Mov.Imm(asm.R0, 9), call(jit.HelperFenceGPU), asm.Return()}, nil, Options{})
	if !strings.Contains(f.Body, "fence.acq_rel.gpu;") || strings.Contains(f.Body, "membar.sys") {
		t.Errorf("helper 609 is not a fence.acq_rel.gpu:\n%s", f.Body)
	}
	got, _, err := emuRun(f, nil, 0, nil)
	if err != nil || got != 0 {
		t.Fatalf("r0 = %d, %v; want 0", got, err)
	}
}

// TestBlockAggPTXAS assembles one program that uses a per-block array
// (lookup, update, delete, direct access) and helpers 607..609 on shared,
// global and stack memory, for the oldest and the default target.
func TestBlockAggPTXAS(t *testing.T) {
	maps := []*jit.Map{{Name: "arr", Type: jit.MapTypeGPUArray, KeySize: 4, ValueSize: 16, MaxEntries: 1}, blockMap("blk", 16, 4)}
	insns := append(lookupKey("blk", 2),
		asm.Mov.Reg(asm.R6, asm.R0),
		asm.Mov.Reg(asm.R1, asm.R6), asm.Mov.Imm(asm.R2, 7), call(jit.HelperAtomicMaxU64),
		asm.Mov.Reg(asm.R1, asm.R6), asm.Add.Imm(asm.R1, 8), asm.Mov.Imm(asm.R2, 7), call(jit.HelperAtomicMinU64),
		call(jit.HelperFenceGPU),
		stImm64(-16, 3),
		asm.Mov.Reg(asm.R1, asm.R10), asm.Add.Imm(asm.R1, -16), asm.Mov.Imm(asm.R2, 9), call(jit.HelperAtomicMaxU64),
		asm.LoadMapValue(asm.R1, 0, 8).WithReference("blk"), asm.Mov.Imm(asm.R2, 1), call(jit.HelperAtomicMinU64),
		stImm64(-24, 0), stImm64(-32, 0),
		mapPtr(asm.R1, "blk"),
		asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, -4),
		asm.Mov.Reg(asm.R3, asm.R10), asm.Add.Imm(asm.R3, -32),
		asm.Mov.Imm(asm.R4, 0), call(jit.HelperMapUpdateElem),
		mapPtr(asm.R1, "blk"), asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, -4), call(jit.HelperMapDeleteElem),
	)
	insns = append(insns, lookupKey("arr", 0)...)
	insns = append(insns,
		asm.Mov.Reg(asm.R1, asm.R0), asm.Mov.Imm(asm.R2, 5), call(jit.HelperAtomicMaxU64),
		asm.LoadMem(asm.R0, asm.R10, -16, asm.DWord),
		asm.Return())
	if !needPtxas(t) {
		return
	}
	for _, arch := range []string{"sm_70", DefaultArch} {
		f := compileProg(t, insns, maps, Options{Arch: arch})
		if got, _, err := emuRun(f, nil, 0, func(e *emu) { region(e, f, GlobalMap, "arr", 16) }); err != nil || got != 9 {
			t.Errorf("%s: emulated r0 = %d, %v; want 9 (the stack max)", arch, got, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := Assemble(ctx, TestModule(f), arch)
		cancel()
		if err != nil {
			t.Errorf("%s: ptxas: %v\n%s", arch, err, TestModule(f))
		}
	}
}
