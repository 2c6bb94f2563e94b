package ptx

import (
	"encoding/binary"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/verifier"
)

func call(id jit.HelperID) asm.Instruction {
	return asm.Instruction{OpCode: asm.OpCode(asm.JumpClass).SetJumpOp(asm.Call), Constant: int64(id)}
}

func mapPtr(dst asm.Register, name string) asm.Instruction {
	return asm.LoadMapPtr(dst, 0).WithReference(name)
}

// stImm64 is `*(u64 *)(r10 + off) = v` (cilium's DSL has no 8-byte ST).
func stImm64(off int16, v int32) asm.Instruction {
	return asm.Instruction{OpCode: asm.StoreImmOp(asm.DWord), Dst: asm.R10, Offset: off, Constant: int64(v)}
}

// ja is an unconditional jump by a raw offset.
func ja(off int16) asm.Instruction {
	return asm.Instruction{OpCode: asm.Ja.Op(asm.ImmSource), Offset: off}
}

// compileProofs compiles p, with the verifier's result when proofs.
func compileProofs(t *testing.T, p *jit.Program, proofs bool) *Func {
	t.Helper()
	var o Options
	if proofs {
		res, err := verifier.Verify(p, verifier.Options{})
		if err != nil {
			t.Fatal(err)
		}
		o.Verified = res
	}
	return compileProg(t, p.Insns, p.Maps, o)
}

func compileProg(t *testing.T, insns asm.Instructions, maps []*jit.Map, o Options) *Func {
	t.Helper()
	p := &jit.Program{Name: "t", Insns: insns, Maps: maps}
	f, err := Compile(p, o)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return f
}

// region allocates an shm-style region (header, control block, data) and
// points the map's global at it.
func region(e *emu, f *Func, kind GlobalKind, mapName string, dataSize int) *emuRegion {
	r := e.alloc(dataOffset+dataSize, false, mapName)
	g, ok := f.Global(kind, mapName)
	if !ok {
		panic("no global for " + mapName)
	}
	binary.LittleEndian.PutUint64(e.mustRegion(e.globals[g.Name]).data, r.base)
	return r
}

func (e *emu) mustRegion(addr uint64) *emuRegion {
	r, _, err := e.region(addr, 1)
	if err != nil {
		panic(err)
	}
	return r
}

func setGlobal(e *emu, f *Func, kind GlobalKind, mapName string, v uint64) {
	g, ok := f.Global(kind, mapName)
	if !ok {
		panic("no global")
	}
	binary.LittleEndian.PutUint64(e.mustRegion(e.globals[g.Name]).data, v)
}

func TestSimpleHelpers(t *testing.T) {
	tests := []struct {
		name  string
		insns asm.Instructions
		opts  Options
		want  uint64
	}{
		{"pid_tgid", asm.Instructions{call(jit.HelperGetCurrentPidTgid), asm.Return()}, Options{PidTgid: 0x1234_0000_5678}, 0x1234_0000_5678},
		{"globaltimer advances", asm.Instructions{
			call(jit.HelperGetGlobalTimer), asm.Mov.Reg(asm.R6, asm.R0),
			call(jit.HelperGetGlobalTimer), asm.Sub.Reg(asm.R0, asm.R6), asm.Return()}, Options{}, 1000},
		{"block dim through pointers", asm.Instructions{
			asm.Mov.Reg(asm.R1, asm.R10), asm.Add.Imm(asm.R1, -8),
			asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, -16),
			asm.Mov.Reg(asm.R3, asm.R10), asm.Add.Imm(asm.R3, -24),
			call(jit.HelperGetBlockDim),
			asm.LoadMem(asm.R0, asm.R10, -8, asm.DWord),
			asm.LoadMem(asm.R1, asm.R10, -16, asm.DWord), asm.Add.Reg(asm.R0, asm.R1),
			asm.LoadMem(asm.R1, asm.R10, -24, asm.DWord), asm.Add.Reg(asm.R0, asm.R1),
			asm.Return()}, Options{}, 3},
		{"warp leader", asm.Instructions{call(jit.HelperWarpIsLeader), asm.Return()}, Options{}, 1},
		{"warp sum sm_90", asm.Instructions{asm.LoadImm(asm.R1, 0x1234_5678_9abc_def0, asm.DWord), call(jit.HelperWarpSumU64), asm.Return()}, Options{}, 0x1234_5678_9abc_def0},
		{"warp sum sm_75 loop", asm.Instructions{asm.LoadImm(asm.R1, 0x1234_5678_9abc_def0, asm.DWord), call(jit.HelperWarpSumU64), asm.Return()}, Options{Arch: "sm_75"}, 0x1234_5678_9abc_def0},
		{"warp min", asm.Instructions{asm.LoadImm(asm.R1, -5, asm.DWord), call(jit.HelperWarpMinU64), asm.Return()}, Options{}, 0xffff_ffff_ffff_fffb},
		{"warp max sm_75", asm.Instructions{asm.Mov.Imm(asm.R1, 77), call(jit.HelperWarpMaxU64), asm.Return()}, Options{Arch: "sm_75"}, 77},
		{"active count", asm.Instructions{call(jit.HelperWarpActiveCount), asm.Return()}, Options{}, 1},
		{"active mask", asm.Instructions{call(jit.HelperWarpActiveMask), asm.Return()}, Options{}, 1},
		{"membar", asm.Instructions{asm.Mov.Imm(asm.R0, 9), call(jit.HelperGPUMembar), asm.Return()}, Options{}, 0},
		{"lane id", asm.Instructions{asm.Mov.Imm(asm.R0, 9), call(jit.HelperGetLaneID), asm.Return()}, Options{}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := compileProg(t, tt.insns, nil, tt.opts)
			got, _, err := emuRun(f, nil, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("r0 = %#x, want %#x", got, tt.want)
			}
		})
	}
}

// TestGeometryHelpers runs 610..612 on a 3-D block of a 3-D grid: each
// value must combine the right special registers, in 64 bits.
func TestGeometryHelpers(t *testing.T) {
	big := map[string]uint64{
		"%ctaid.x": 0, "%ctaid.y": 2, "%ctaid.z": 3, // the harness indexes its result by x
		"%nctaid.x": 2147483647, "%nctaid.y": 65535, "%nctaid.z": 4,
		"%ntid.x": 8, "%ntid.y": 4, "%ntid.z": 2,
	}
	tests := []struct {
		name string
		id   jit.HelperID
		want uint64
	}{
		{"block linear id", jit.HelperBlockLinearID, (3*65535 + 2) * 2147483647},
		{"grid blocks", jit.HelperGridBlocks, 2147483647 * 65535 * 4},
		{"block threads", jit.HelperBlockThreads, 8 * 4 * 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := compileProg(t, asm.Instructions{asm.Mov.Imm(asm.R0, 9), call(tt.id), asm.Return()}, nil, Options{})
			got, _, err := emuRun(f, nil, 0, func(e *emu) { e.geom = big })
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("r0 = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestLaunchID(t *testing.T) {
	f := compileProg(t, asm.Instructions{call(jit.HelperGetLaunchID), asm.Return()}, nil, Options{})
	got, _, err := emuRun(f, nil, 0, func(e *emu) { setGlobal(e, f, GlobalLaunchID, "", 4242) })
	if err != nil || got != 4242 {
		t.Fatalf("launch id = %d, %v; want 4242", got, err)
	}
}

func TestExitHelperEndsThread(t *testing.T) {
	f := compileProg(t, asm.Instructions{asm.Mov.Imm(asm.R0, 1), call(jit.HelperExit), asm.Return()}, nil, Options{})
	_, e, err := emuRun(f, nil, 0, nil)
	if err != nil || !e.exited {
		t.Fatalf("exit helper: err %v, exited %v", err, e != nil && e.exited)
	}
}

func TestLoopBudget(t *testing.T) {
	// r0 counts loop iterations: 4 iterations take 3 backward jumps.
	loop := asm.Instructions{
		asm.Mov.Imm(asm.R0, 0),
		asm.Add.Imm(asm.R0, 1),
		asm.Instruction{OpCode: asm.JLT.Op(asm.ImmSource), Dst: asm.R0, Constant: 4, Offset: -2},
		asm.Return(),
	}
	forever := asm.Instructions{asm.Mov.Imm(asm.R0, 7), ja(-1), asm.Return()}
	// main calls a subprogram that spins; the budget is shared, so the
	// whole program ends with r0 = 0.
	sub := asm.Instructions{
		asm.Mov.Imm(asm.R6, 5),
		asm.Instruction{OpCode: asm.OpCode(asm.JumpClass).SetJumpOp(asm.Call), Src: asm.PseudoCall, Constant: 2},
		asm.Mov.Imm(asm.R0, 9),
		asm.Return(),
		asm.Mov.Imm(asm.R0, 3), ja(-1), asm.Return(),
	}
	tests := []struct {
		name   string
		insns  asm.Instructions
		budget int
		want   uint64
	}{
		{"enough budget", loop, 3, 4},
		{"budget spent", loop, 2, 0},
		{"default budget", loop, 0, 4},
		{"endless loop ends", forever, 100, 0},
		{"endless loop in a subprogram ends the program", sub, 100, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := compileProg(t, tt.insns, nil, Options{LoopBudget: tt.budget})
			got, _, err := emuRun(f, nil, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("r0 = %d, want %d", got, tt.want)
			}
		})
	}
}
