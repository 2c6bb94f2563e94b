package ptx

import (
	"bytes"
	"context"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/verifier"
	"github.com/gpuprobe/gpuprobe/shm"
)

// TestRingWarp runs perf_event_output into a ring in device memory
// (Options.DeviceMaps) through the PTX emulator (one lane: a warp of one),
// from each starting state that leads to a distinct path.
func TestRingWarp(t *testing.T) {
	const slots, stride = 4, 64
	le := binary.LittleEndian
	tests := []struct {
		name             string
		size             int32
		head, tail       uint64
		want             int64
		ticket           int64 // published ticket, -1: none
		headAfter        uint64
		dropped, oversiz uint64
		unbound          bool
	}{
		{name: "published", size: 16, want: 0, ticket: 0, headAfter: 1},
		{name: "published after wrap", size: 16, head: 6, tail: 5, want: 0, ticket: 6, headAfter: 7},
		{name: "full: dropped without a ticket", size: 16, head: 4, want: -errNOSPC, ticket: -1, headAfter: 4, dropped: 1},
		{name: "larger than a slot", size: 49, want: -errE2BIG, ticket: -1, oversiz: 1},
		{name: "ring not attached", size: 16, unbound: true, want: -errNOENT, ticket: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &jit.Map{Name: "events", Type: jit.MapTypeGPURingbuf, MaxEntries: slots * stride}
			f := compileProg(t, perfOut(tt.size), []*jit.Map{m}, Options{DeviceMaps: []string{"events"}})
			var r *emuRegion
			got, _, err := emuRun(f, nil, 0, func(e *emu) {
				r = e.alloc(dataOffset+slots*(stride+8), false, "events")
				le.PutUint32(r.data[hdrMaxEntries:], slots)
				le.PutUint32(r.data[hdrStride:], stride)
				le.PutUint64(r.data[ringHead:], tt.head)
				le.PutUint64(r.data[ringTail:], tt.tail)
				if !tt.unbound {
					setGlobal(e, f, GlobalMap, "events", r.base)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if int64(got) != tt.want {
				t.Fatalf("r0 = %d, want %d", int64(got), tt.want)
			}
			if tt.unbound {
				return
			}
			// The emulator's %smid is 0: drops go to shard 0.
			for off, want := range map[int]uint64{ringHead: tt.headAfter, shm.RingDropShard(0): tt.dropped, ringDropped: 0, ringOversize: tt.oversiz} {
				if n := le.Uint64(r.data[off:]); n != want {
					t.Errorf("control word at %d = %d, want %d", off, n, want)
				}
			}
			for s := 0; s < slots; s++ {
				want := uint64(0)
				if tt.ticket >= 0 && s == int(tt.ticket%slots) {
					want = uint64(tt.ticket) + 1
					slot := r.data[dataOffset+s*stride:]
					if a, b := le.Uint64(slot[16:]), le.Uint64(slot[24:]); a != 0x1111 || b != 0x2222 || le.Uint32(slot[8:]) != uint32(tt.size) {
						t.Errorf("record = len %d, payload %#x %#x", le.Uint32(slot[8:]), a, b)
					}
				}
				if seq := le.Uint64(r.data[dataOffset+s*stride:]); seq != want {
					t.Errorf("slot %d seq = %d, want %d", s, seq, want)
				}
			}
		})
	}
}

// TestRingWarpPTX checks that the device-memory producer takes its tickets
// once per warp at gpu scope, does no sys-scope operation, and assembles.
func TestRingWarpPTX(t *testing.T) {
	m := &jit.Map{Name: "events", Type: jit.MapTypeGPURingbuf, MaxEntries: 4 * 64}
	f := compileProg(t, perfOut(16), []*jit.Map{m}, Options{DeviceMaps: []string{"events"}})
	body := f.Body[strings.Index(f.Body, "_ringoutwarp("):]
	for _, want := range []string{"activemask.b32", "@%z3 atom.relaxed.gpu.add.u64", "st.release.gpu.u64", "shfl.sync.idx.b32"} {
		if !strings.Contains(body, want) {
			t.Errorf("PTX lacks %q", want)
		}
	}
	if strings.Contains(body, ".sys") {
		t.Error("the device-memory producer does a sys-scope operation")
	}
	if !needPtxas(t) {
		return
	}
	if out, err := Assemble(context.Background(), TestModule(f), "sm_90"); err != nil {
		t.Fatalf("ptxas: %v\n%s", err, out)
	}
}

// TestWarpAdd checks that a non-fetching atomic add is aggregated over the
// warp when lanes agree (match.all on the address and the value, one red
// of value × lanes by the lowest lane) and stays per lane otherwise, for
// both widths, that it runs (emulator: one lane adds its value once) and
// that ptxas accepts it.
func TestWarpAdd(t *testing.T) {
	for _, size := range []asm.Size{asm.Word, asm.DWord} {
		m := &jit.Map{Name: "counts", Type: jit.MapTypeGPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1}
		insns := asm.Instructions{
			asm.StoreImm(asm.R10, -4, 0, asm.Word),
			asm.LoadMapPtr(asm.R1, 0),
			asm.Mov.Reg(asm.R2, asm.R10),
			asm.Add.Imm(asm.R2, -4),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "out"),
			asm.Mov.Imm(asm.R1, 5),
			asm.StoreXAdd(asm.R0, asm.R1, size),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
			asm.Return(),
		}
		insns[1].Constant = 0
		f := compileProg(t, insns, []*jit.Map{m}, Options{})
		bits := map[asm.Size]string{asm.Word: "32", asm.DWord: "64"}[size]
		for _, want := range []string{"match.all.sync.b64 %w8|%p7, %t12", "popc.b32 %w9, %w7", ".add.u" + bits + " [%t12], %"} {
			if !strings.Contains(f.Body, want) {
				t.Errorf("%v: PTX lacks %q", size, want)
			}
		}
		var r *emuRegion
		if _, _, err := emuRun(f, nil, 0, func(e *emu) {
			r = e.alloc(dataOffset+8, false, "counts")
			setGlobal(e, f, GlobalMap, "counts", r.base)
		}); err != nil {
			t.Fatal(err)
		}
		if got := binary.LittleEndian.Uint64(r.data[dataOffset:]); got != 5 {
			t.Errorf("%v: counter = %d, want 5", size, got)
		}
		if needPtxas(t) {
			if out, err := Assemble(context.Background(), TestModule(f), "sm_90"); err != nil {
				t.Fatalf("ptxas: %v\n%s", err, out)
			}
		}
	}
}

// TestRecordInRegs compiles kernelretsnoop (a 64-byte record built on the
// stack, fields written by get_block_idx and kin) with its ring in device
// memory and the verifier's facts: the record's slots are registers, the
// compiler stores them into the ring slot itself (ringreservewarp, then a
// gpu-scope release of seq), the program keeps no local frame for them,
// and the record the emulator finds in the ring is byte for byte the one
// the host-memory producer writes from the stack. ptxas accepts it.
func TestRecordInRegs(t *testing.T) {
	var prog *jit.Program
	_, progs := testdataPrograms(t)
	for _, p := range progs {
		if p.Name == "kernelretsnoop" {
			prog = p
		}
	}
	if prog == nil {
		t.Fatal("no kernelretsnoop in testdata/bpf")
	}
	res, err := verifier.Verify(prog, verifier.Options{})
	if err != nil {
		t.Fatal(err)
	}
	record := func(o Options) ([]byte, *Func) {
		o.Verified = res
		f, err := Compile(prog, o)
		if err != nil {
			t.Fatal(err)
		}
		const slots, stride = 4, 80
		var r *emuRegion
		got, _, err := emuRun(f, nil, 0, func(e *emu) {
			r = e.alloc(dataOffset+slots*(stride+8), false, "exits")
			binary.LittleEndian.PutUint32(r.data[hdrMaxEntries:], slots)
			binary.LittleEndian.PutUint32(r.data[hdrStride:], stride)
			setGlobal(e, f, GlobalMap, "exits", r.base)
		})
		if err != nil || got != 0 {
			t.Fatalf("r0 = %d, %v", int64(got), err)
		}
		s := r.data[dataOffset : dataOffset+stride]
		if seq, n := binary.LittleEndian.Uint64(s), binary.LittleEndian.Uint32(s[8:]); seq != 1 || n != 64 {
			t.Fatalf("slot 0: seq %d len %d, want 1 and 64", seq, n)
		}
		return append([]byte(nil), s[slotHeader:slotHeader+64]...), f
	}
	want, _ := record(Options{})
	got, f := record(Options{DeviceMaps: []string{"exits"}})
	if !bytes.Equal(got, want) {
		t.Fatalf("record from registers % x\nwant (from the stack)  % x", got, want)
	}
	for _, s := range []string{"_ringreservewarp", "st.release.gpu.global.u64 [%h3]"} {
		if !strings.Contains(f.Body, s) {
			t.Errorf("PTX lacks %q", s)
		}
	}
	if strings.Contains(f.Body, "_memcpy") || strings.Contains(f.Body, "_ringoutwarp(") {
		t.Error("the record still goes through memory (memcpy or ringoutwarp)")
	}
	if !needPtxas(t) {
		return
	}
	if out, err := Assemble(context.Background(), TestModule(f), "sm_90"); err != nil {
		t.Fatalf("ptxas: %v\n%s", err, out)
	}
}
