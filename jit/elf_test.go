package jit_test

import (
	"bytes"
	"encoding/binary"
	"os"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
)

const vectorAdd = "_Z9vectorAddPKfS0_Pf"

// wantProg is what LoadELF must find for one program of a test object.
type wantProg struct {
	name   string
	kind   jit.ProbeKind
	target string
	maps   []jit.Map
}

func u64Map(name string, typ jit.MapType, entries uint32) jit.Map {
	return jit.Map{Name: name, Type: typ, KeySize: 4, ValueSize: 8, MaxEntries: entries}
}

func TestLoadELFObjects(t *testing.T) {
	tests := []struct {
		object string
		progs  []wantProg
	}{
		{"kernelretsnoop", []wantProg{{"kernelretsnoop", jit.ProbeExit, vectorAdd, []jit.Map{
			{Name: "exits", Type: jit.MapTypeGPURingbuf, KeySize: 4, ValueSize: 64, MaxEntries: 1 << 16}}}}},
		{"threadhist", []wantProg{{"threadhist", jit.ProbeExit, vectorAdd, []jit.Map{
			u64Map("thread_runs", jit.MapTypePerThreadArray, 1),
			u64Map("block_threads", jit.MapTypeGPUArray, 1024)}}}},
		{"launchlate", []wantProg{
			{"launch_gpu", jit.ProbeEntry, "vectorAdd", []jit.Map{
				{Name: "launch_clock", Type: jit.MapTypeArray, KeySize: 4, ValueSize: 8, MaxEntries: 2, Flags: 1 << 10},
				u64Map("delay_log2_ns", jit.MapTypeGPUArray, 64)}},
			{"launch_host", jit.ProbeUprobe, "libcudart.so:cudaLaunchKernel", []jit.Map{
				{Name: "launch_clock", Type: jit.MapTypeArray, KeySize: 4, ValueSize: 8, MaxEntries: 2, Flags: 1 << 10}}},
		}},
		{"memcount", []wantProg{{"memcount", jit.ProbeMemCapture, "", []jit.Map{
			u64Map("mem_counters", jit.MapTypeGPUArray, 4)}}}},
		{"allhelpers", []wantProg{{"allhelpers", jit.ProbeEntry, vectorAdd, []jit.Map{
			u64Map("array_map", jit.MapTypeGPUArray, 1024),
			u64Map("hash_map", jit.MapTypeHash, 1024),
			{Name: "events", Type: jit.MapTypeGPURingbuf, KeySize: 4, ValueSize: 240, MaxEntries: 1 << 16}}}}},
		{"warpagg", []wantProg{{"warpagg", jit.ProbeExit, vectorAdd, []jit.Map{
			u64Map("warp_exits", jit.MapTypePerWarpArray, 1),
			{Name: "warps", Type: jit.MapTypeGPURingbuf, KeySize: 4, ValueSize: 56, MaxEntries: 1 << 16}}}}},
		{"blockagg", []wantProg{
			{"blockagg_enter", jit.ProbeEntry, vectorAdd, []jit.Map{u64Map("block_exits", jit.MapTypePerBlockArray, 1)}},
			{"blockagg_exit", jit.ProbeExit, vectorAdd, []jit.Map{
				u64Map("block_exits", jit.MapTypePerBlockArray, 1),
				{Name: "launch_cell", Type: jit.MapTypeGPUArray, KeySize: 4, ValueSize: 32, MaxEntries: 1},
				{Name: "launches", Type: jit.MapTypeGPURingbuf, KeySize: 4, ValueSize: 32, MaxEntries: 1 << 16}}},
		}},
		{"callfunc", []wantProg{{"callfunc", jit.ProbeEntry, vectorAdd, []jit.Map{
			u64Map("mixed", jit.MapTypeGPUArray, 1024)}}}},
		{"loop", []wantProg{{"collatz", jit.ProbeEntry, vectorAdd, []jit.Map{
			u64Map("steps", jit.MapTypeGPUArray, 1024)}}}},
		{"legacymaps", []wantProg{{"legacy", jit.ProbeEntry, vectorAdd, []jit.Map{
			u64Map("legacy_counts", jit.MapTypeGPUArray, 64),
			u64Map("legacy_per_thread", jit.MapTypePerThreadArray, 1)}}}},
	}
	for _, tt := range tests {
		t.Run(tt.object, func(t *testing.T) {
			progs, err := jit.LoadELF(bpfObject(t, tt.object))
			if err != nil {
				t.Fatal(err)
			}
			if len(progs) != len(tt.progs) {
				t.Fatalf("got %d programs (%v), want %d", len(progs), progNames(progs), len(tt.progs))
			}
			for i, want := range tt.progs {
				p := progs[i]
				if p.Name != want.name || p.Kind != want.kind || p.Target != want.target {
					t.Errorf("program %d: got %s %v %q, want %s %v %q", i, p.Name, p.Kind, p.Target, want.name, want.kind, want.target)
				}
				if len(p.Maps) != len(want.maps) {
					t.Fatalf("%s: got %d maps, want %d", p.Name, len(p.Maps), len(want.maps))
				}
				for j, m := range p.Maps {
					if *m != want.maps[j] {
						t.Errorf("%s map %d: got %+v, want %+v", p.Name, j, *m, want.maps[j])
					}
				}
				checkInsns(t, p)
			}
		})
	}
}

// checkInsns checks invariants every loaded program must satisfy: every
// call and jump lands on an instruction inside the program, every map load
// names a map of p.Maps, and the stream marshals to what it was read from.
func checkInsns(t *testing.T, p *jit.Program) {
	t.Helper()
	starts := map[int64]bool{}
	var off int64
	for i := range p.Insns {
		starts[off] = true
		off += int64(p.Insns[i].Width())
	}
	maps := map[string]bool{}
	for _, m := range p.Maps {
		maps[m.Name] = true
	}
	off = 0
	for i := range p.Insns {
		ins := &p.Insns[i]
		var target int64 = -1
		switch {
		case ins.IsFunctionCall():
			target = off + 1 + ins.Constant
		case ins.OpCode.Class().IsJump() && ins.OpCode.JumpOp() != asm.Call && ins.OpCode.JumpOp() != asm.Exit:
			target = off + 1 + int64(ins.Offset)
		case ins.IsLoadFromMap():
			if !maps[ins.Reference()] {
				t.Errorf("%s insn %d: map %q not in Maps", p.Name, i, ins.Reference())
			}
		}
		if target >= 0 || ins.IsFunctionCall() {
			if !starts[target] {
				t.Errorf("%s insn %d (%v): target slot %d is not an instruction", p.Name, i, ins, target)
			}
		}
		off += int64(ins.Width())
	}
	var buf bytes.Buffer
	if err := p.Insns.Marshal(&buf, binary.LittleEndian); err != nil {
		t.Errorf("%s: marshal: %v", p.Name, err)
	}
}

func progNames(progs []*jit.Program) []string {
	var names []string
	for _, p := range progs {
		names = append(names, p.Name)
	}
	return names
}

func TestLoadELFCallOffsets(t *testing.T) {
	progs, err := jit.LoadELF(bpfObject(t, "callfunc"))
	if err != nil {
		t.Fatal(err)
	}
	p := progs[0]
	// The callee is linked after the program; find it by symbol.
	slot := map[string]int64{}
	var off int64
	var calls []int64 // slot each call lands on
	for i := range p.Insns {
		if s := p.Insns[i].Symbol(); s != "" {
			slot[s] = off
		}
		if p.Insns[i].IsFunctionCall() {
			if p.Insns[i].Src != asm.PseudoCall {
				t.Errorf("insn %d: call src %v, want PseudoCall", i, p.Insns[i].Src)
			}
			calls = append(calls, off+1+p.Insns[i].Constant)
		}
		off += int64(p.Insns[i].Width())
	}
	mix, ok := slot["mix"]
	if !ok {
		t.Fatalf("callee mix not linked into %s", p.Name)
	}
	if len(calls) != 2 {
		t.Fatalf("got %d bpf-to-bpf calls, want 2", len(calls))
	}
	for i, c := range calls {
		if c != mix {
			t.Errorf("call %d lands on slot %d, want mix at %d", i, c, mix)
		}
	}
	// The ELF must round-trip through the raw encoding with the same offsets.
	var buf bytes.Buffer
	if err := p.Insns.Marshal(&buf, binary.LittleEndian); err != nil {
		t.Fatal(err)
	}
	back, err := asm.AppendInstructions(nil, &buf, binary.LittleEndian, "linux")
	if err != nil {
		t.Fatal(err)
	}
	for i := range back {
		if back[i].IsFunctionCall() && back[i].Constant != p.Insns[i].Constant {
			t.Errorf("insn %d: constant %d after round trip, want %d", i, back[i].Constant, p.Insns[i].Constant)
		}
	}
}

func TestLoadELFSourceLines(t *testing.T) {
	progs, err := jit.LoadELF(bpfObject(t, "memcount"))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ins := range progs[0].Insns {
		if src := ins.Source(); src != nil && strings.Contains(src.String(), "ctx->flags") {
			found = true
		}
	}
	if !found {
		t.Error("no instruction carries the BTF source line of `ctx->flags`")
	}
}

func TestLoadELFSharedMaps(t *testing.T) {
	progs, err := jit.LoadELF(bpfObject(t, "launchlate"))
	if err != nil {
		t.Fatal(err)
	}
	if progs[0].Maps[0] != progs[1].Maps[0] {
		t.Error("host and GPU half do not share one *Map for launch_clock")
	}
	if !progs[0].IsGPU() || progs[1].IsGPU() {
		t.Errorf("IsGPU: got %v/%v for %s/%s, want true/false", progs[0].IsGPU(), progs[1].IsGPU(), progs[0].Name, progs[1].Name)
	}
}

// TestLoadELFBpftimeIdioms loads an object written as bpftime's GPU
// examples are: a cuda__-named GPU program (the section, not the name,
// makes it one) and a host program in a bare SEC("uprobe"), which loads
// with no target for its loader to skip.
func TestLoadELFBpftimeIdioms(t *testing.T) {
	progs, err := jit.LoadELF(bpfObject(t, "idioms"))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name   string
		kind   jit.ProbeKind
		target string
		gpu    bool
	}{
		{"cuda__exit", jit.ProbeExit, "_Z9vectorAddPKfS0_Pf", true},
		{"host_manual", jit.ProbeUprobe, "", false},
	}
	if len(progs) != len(want) {
		t.Fatalf("got %d programs (%v), want %d", len(progs), progNames(progs), len(want))
	}
	for i, w := range want {
		p := progs[i]
		if p.Name != w.name || p.Kind != w.kind || p.Target != w.target || p.IsGPU() != w.gpu {
			t.Errorf("program %d: got %s %v %q gpu=%v, want %s %v %q gpu=%v", i, p.Name, p.Kind, p.Target, p.IsGPU(), w.name, w.kind, w.target, w.gpu)
		}
	}
}

func TestLoadELFErrors(t *testing.T) {
	tests := []struct {
		object string
		want   []string // substrings of the error
	}{
		{"badsection", []string{"badsection.o", `section "xdp"`, "not_a_probe", "unsupported section"}},
		{"notarget", []string{`section "kprobe/"`, "no_target", "names no target"}},
		{"globaldata", []string{"uses_rodata", "insn ", "global data", `".rodata"`, "threshold"}},
		{"badkey", []string{"bad_key", `map "wide_key" (type 1503)`, "key size 8, want 4"}},
		{"emptyring", []string{`map "ring" (type 1527)`, "max_entries 0"}},
		{"extern", []string{"calls_extern", `"elsewhere"`, "not in the program"}},
		{"directrun", []string{`section "kprobe/__directly_run"`, "cuda__run", "kernel of its own"}},
		{"badmaptype", []string{`program "uses_odd_map"`, `map "odd" has type 1599`, "not a map type GPU programs can use"}},
	}
	for _, tt := range tests {
		t.Run(tt.object, func(t *testing.T) {
			_, err := jit.LoadELF(badObject(t, tt.object))
			if err == nil {
				t.Fatal("loaded without error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestLoadELFNotELF(t *testing.T) {
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "parse eBPF object"},
		{"text", []byte("not an object"), "parse eBPF object"},
		{"truncated", truncatedObject(t), "parse eBPF object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := jit.LoadELFBytes(tt.data)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error with %q", err, tt.want)
			}
		})
	}
	if _, err := jit.LoadELF("/nonexistent/x.o"); err == nil || !strings.Contains(err.Error(), "/nonexistent/x.o") {
		t.Errorf("missing file: got %v, want an error naming the path", err)
	}
}

func truncatedObject(t *testing.T) []byte {
	data, err := os.ReadFile(bpfObject(t, "threadhist"))
	if err != nil {
		t.Fatal(err)
	}
	return data[:len(data)/3]
}

func TestParseSection(t *testing.T) {
	tests := []struct {
		section string
		kind    jit.ProbeKind
		target  string
		err     bool
	}{
		{"kprobe/_Z6kernelv", jit.ProbeEntry, "_Z6kernelv", false},
		{"?kprobe/k", jit.ProbeEntry, "k", false},
		{"kretprobe/_ZN5faiss3gpu1kEv", jit.ProbeExit, "_ZN5faiss3gpu1kEv", false},
		{"kprobe/__memcapture", jit.ProbeMemCapture, "", false},
		{"kprobe/__memcapture/_Z6kernelv", jit.ProbeMemCapture, "_Z6kernelv", false},
		{"uprobe/./app:launch", jit.ProbeUprobe, "./app:launch", false},
		{"uretprobe/libcuda.so.1:cuLaunchKernel", jit.ProbeUretprobe, "libcuda.so.1:cuLaunchKernel", false},
		{"uprobe", jit.ProbeUprobe, "", false},
		{"uretprobe", jit.ProbeUretprobe, "", false},
		{"kprobe/__directly_run", 0, "", true},
		{"kprobe/__directly_run/k", 0, "", true},
		{"kprobe/", 0, "", true},
		{"kretprobe/", 0, "", true},
		{"uprobe/", 0, "", true},
		{"kprobe", 0, "", true},
		{"tracepoint/sched/sched_switch", 0, "", true},
		{"", 0, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.section, func(t *testing.T) {
			kind, target, err := jit.ParseSection(tt.section)
			if tt.err {
				if err == nil || !strings.Contains(err.Error(), tt.section) {
					t.Fatalf("got %v, want an error naming %q", err, tt.section)
				}
				return
			}
			if err != nil || kind != tt.kind || target != tt.target {
				t.Fatalf("got %v %q %v, want %v %q", kind, target, err, tt.kind, tt.target)
			}
		})
	}
}

// TestLoadSpecLinking feeds LoadSpec hand-built instruction streams in
// cilium/ebpf's unlinked form (symbolic references with -1 offsets).
func TestLoadSpecLinking(t *testing.T) {
	arr := &ebpf.MapSpec{Name: "arr", Type: ebpf.MapType(jit.MapTypeGPUArray), KeySize: 4, ValueSize: 8, MaxEntries: 4}
	tests := []struct {
		name  string
		insns asm.Instructions
		want  map[int]int64 // insn index -> resolved constant (calls) or offset (jumps)
		err   string
	}{
		{
			name: "call over a map load",
			insns: asm.Instructions{
				asm.LoadMapPtr(asm.R1, 0).WithReference("arr"), // 2 slots
				asm.Call.Label("helper"),
				asm.Return(),
				asm.Mov.Imm(asm.R0, 7).WithSymbol("helper"),
				asm.Return(),
			},
			want: map[int]int64{1: 1},
		},
		{
			name: "backward call",
			insns: asm.Instructions{
				asm.Ja.Label("main"),
				asm.Mov.Imm(asm.R0, 1).WithSymbol("f"),
				asm.Return(),
				asm.Call.Label("f").WithSymbol("main"),
				asm.Return(),
			},
			want: map[int]int64{3: -3},
		},
		{
			name: "symbolic jump",
			insns: asm.Instructions{
				asm.JEq.Imm(asm.R1, 0, "out"),
				asm.Mov.Imm(asm.R0, 1),
				asm.Return().WithSymbol("out"),
			},
			want: map[int]int64{0: 1},
		},
		{
			name: "gotol",
			insns: asm.Instructions{
				asm.Instruction{OpCode: asm.OpCode(asm.Jump32Class).SetJumpOp(asm.Ja).SetSource(asm.ImmSource), Constant: -1}.WithReference("end"),
				asm.Mov.Imm(asm.R0, 1),
				asm.Return().WithSymbol("end"),
			},
			want: map[int]int64{0: 1},
		},
		{
			name: "undefined callee",
			insns: asm.Instructions{
				asm.Call.Label("nowhere"),
				asm.Return(),
			},
			err: `insn 0: Call refers to "nowhere"`,
		},
		{
			name: "undefined map",
			insns: asm.Instructions{
				asm.LoadMapPtr(asm.R1, 0).WithReference("missing"),
				asm.Return(),
			},
			err: `insn 0: reference to undefined map "missing"`,
		},
		{
			name: "map load without relocation",
			insns: asm.Instructions{
				asm.LoadMapPtr(asm.R1, 0),
				asm.Return(),
			},
			err: "insn 0: map load without a map reference",
		},
		{
			name: "concrete call into a map load",
			insns: asm.Instructions{
				asm.Instruction{OpCode: asm.OpCode(asm.JumpClass).SetJumpOp(asm.Call), Src: asm.PseudoCall, Constant: 1},
				asm.LoadMapPtr(asm.R1, 0).WithReference("arr"), // slots 1, 2: the call lands on 2
				asm.Return(),
			},
			err: "insn 0: bpf-to-bpf call to slot 2, which is not an instruction of the program (4 slots)",
		},
		{
			name: "concrete call past the end",
			insns: asm.Instructions{
				asm.Instruction{OpCode: asm.OpCode(asm.JumpClass).SetJumpOp(asm.Call), Src: asm.PseudoCall, Constant: 5},
				asm.Return(),
			},
			err: "insn 0: bpf-to-bpf call to slot 6, which is not an instruction of the program (2 slots)",
		},
		{
			name: "concrete call before the start",
			insns: asm.Instructions{
				asm.Return(),
				asm.Instruction{OpCode: asm.OpCode(asm.JumpClass).SetJumpOp(asm.Call), Src: asm.PseudoCall, Constant: -3},
			},
			err: "insn 1: bpf-to-bpf call to slot -1",
		},
		{
			name: "negative helper id",
			insns: asm.Instructions{
				asm.Instruction{OpCode: asm.OpCode(asm.JumpClass).SetJumpOp(asm.Call), Constant: -5},
				asm.Return(),
			},
			err: "insn 0: call to helper -5, which is not a helper id",
		},
		{
			name: "duplicate symbol",
			insns: asm.Instructions{
				asm.Mov.Imm(asm.R0, 0),
				asm.Mov.Imm(asm.R0, 0).WithSymbol("a"),
				asm.Return().WithSymbol("a"),
			},
			err: `insn 2: duplicate function symbol "a"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			insns := append(asm.Instructions{}, tt.insns...)
			insns[0] = insns[0].WithSymbol("prog")
			if s := tt.insns[0].Symbol(); s != "" && s != "prog" {
				t.Fatal("test case labels insn 0")
			}
			spec := &ebpf.CollectionSpec{
				Maps: map[string]*ebpf.MapSpec{"arr": arr},
				Programs: map[string]*ebpf.ProgramSpec{
					"prog": {Name: "prog", SectionName: "kprobe/k", Instructions: insns},
				},
			}
			progs, err := jit.LoadSpec(spec)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), `section "kprobe/k", program "prog"`) {
					t.Fatalf("got %v, want an error with %q and the section", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := progs[0].Insns
			for i, want := range tt.want {
				v := int64(got[i].Offset)
				if got[i].IsFunctionCall() || got[i].OpCode.Class() == asm.Jump32Class {
					v = got[i].Constant
				}
				if v != want {
					t.Errorf("insn %d (%v): resolved to %d, want %d", i, got[i], v, want)
				}
			}
			for i, ins := range spec.Programs["prog"].Instructions {
				if ins.IsFunctionCall() && ins.Constant != -1 {
					t.Errorf("insn %d: LoadSpec modified the spec's instructions", i)
				}
			}
		})
	}
}

func TestLoadSpecNil(t *testing.T) {
	if _, err := jit.LoadSpec(nil); err == nil {
		t.Fatal("LoadSpec(nil) succeeded")
	}
	spec := &ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{"p": {SectionName: "kprobe/k"}}}
	if _, err := jit.LoadSpec(spec); err == nil || !strings.Contains(err.Error(), "no instructions") {
		t.Fatalf("empty program: got %v", err)
	}
}

func BenchmarkLoadELF(b *testing.B) {
	for _, object := range []string{"threadhist", "allhelpers"} {
		data, err := os.ReadFile(bpfObject(b, object))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(object, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := jit.LoadELFBytes(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
