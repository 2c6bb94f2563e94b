package ptx

import (
	"context"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
)

// kernelMap is a BPF_F_MMAPABLE array: host and GPU programs share it.
func kernelMap(maxEntries uint32) *jit.Map {
	return &jit.Map{Name: "counts", Type: jit.MapTypeArray, KeySize: 4, ValueSize: 8, MaxEntries: maxEntries,
		Flags: jit.MapFlagMmapable}
}

// TestKernelMapLookup runs lookups on a kernel map through the PTX
// emulator: values lie at key × 8 from the region's start (no shm header),
// out-of-range keys and a detached map give NULL, and the lookup is inline
// (no mailbox request).
func TestKernelMapLookup(t *testing.T) {
	tests := []struct {
		name   string
		key    int32
		attach bool
		slot   int // value slot read and incremented, -1: none
		want   uint64
	}{
		{"key 0", 0, true, 0, 15},
		{"key 3", 3, true, 3, 15},
		{"key out of range", 4, true, -1, 99},
		{"not attached", 1, false, -1, 99},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := compileProg(t, lookupAdd(tt.key), []*jit.Map{kernelMap(4)}, Options{})
			if _, ok := f.Global(GlobalMailbox, ""); ok {
				t.Fatalf("a kernel-map lookup declares the mailbox: it must be inline")
			}
			var r *emuRegion
			got, _, err := emuRun(f, nil, 0, func(e *emu) {
				r = e.alloc(4096, false, "counts")
				for i := range 4 {
					binary.LittleEndian.PutUint64(r.data[8*i:], 10)
				}
				if tt.attach {
					setGlobal(e, f, GlobalMap, "counts", r.base)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("r0 = %d, want %d", got, tt.want)
			}
			for i := range 4 {
				v := binary.LittleEndian.Uint64(r.data[8*i:])
				if want := map[bool]uint64{true: 15, false: 10}[i == tt.slot]; v != want {
					t.Errorf("value %d = %d after the run, want %d", i, v, want)
				}
			}
		})
	}
}

// TestKernelMapUpdate: updates copy the value into the slot at key × 8,
// with Linux's array rules (flags, -E2BIG); delete is -EINVAL.
func TestKernelMapUpdate(t *testing.T) {
	prog := func(key, flags int32) asm.Instructions {
		return asm.Instructions{
			asm.StoreImm(asm.R10, -4, int64(key), asm.Word),
			stImm64(-16, 0x0a0b0c0d),
			mapPtr(asm.R1, "counts"),
			asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, -4),
			asm.Mov.Reg(asm.R3, asm.R10), asm.Add.Imm(asm.R3, -16),
			asm.Mov.Imm(asm.R4, flags),
			call(jit.HelperMapUpdateElem),
			asm.Return(),
		}
	}
	tests := []struct {
		name  string
		insns asm.Instructions
		want  int64
		slot  int
	}{
		{"update key 1", prog(1, 0), 0, 1},
		{"BPF_NOEXIST", prog(1, 1), -errEXIST, -1},
		{"key out of range", prog(2, 0), -errE2BIG, -1},
		{"delete", asm.Instructions{mapPtr(asm.R1, "counts"), asm.Mov.Reg(asm.R2, asm.R10), call(jit.HelperMapDeleteElem), asm.Return()}, -errINVAL, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := compileProg(t, tt.insns, []*jit.Map{kernelMap(2)}, Options{})
			var r *emuRegion
			got, _, err := emuRun(f, nil, 0, func(e *emu) {
				r = e.alloc(4096, false, "counts")
				if _, ok := f.Global(GlobalMap, "counts"); ok {
					setGlobal(e, f, GlobalMap, "counts", r.base)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if int64(got) != tt.want {
				t.Fatalf("r0 = %d, want %d", int64(got), tt.want)
			}
			for i := range 2 {
				want := uint64(0)
				if i == tt.slot {
					want = 0x0a0b0c0d
				}
				if v := binary.LittleEndian.Uint64(r.data[8*i:]); v != want {
					t.Errorf("value %d = %#x, want %#x", i, v, want)
				}
			}
		})
	}
}

// TestKernelMapPTX checks the generated text: a kernel-map lookup adds no
// header offset and posts no host call, while a plain array without
// BPF_F_MMAPABLE keeps the mailbox path; both assemble with ptxas.
func TestKernelMapPTX(t *testing.T) {
	hostArr := kernelMap(4)
	hostArr.Flags = 0
	tests := []struct {
		name        string
		m           *jit.Map
		want, avoid []string
	}{
		{"mmapable", kernelMap(4), []string{"add.s64 %r0, %h5, %h2"}, []string{"_hostcall", "_mailbox", "%h5, 512"}},
		{"plain array", hostArr, []string{"_hostcall", "_mailbox"}, nil},
	}
	var funcs []*Func
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := compileProg(t, lookupAdd(1), []*jit.Map{tt.m}, Options{Prefix: "km_" + Sanitize(tt.name), Arch: "sm_80"})
			text := f.Text()
			for _, w := range tt.want {
				if !strings.Contains(text, w) {
					t.Errorf("PTX lacks %q", w)
				}
			}
			for _, a := range tt.avoid {
				if strings.Contains(text, a) {
					t.Errorf("PTX has %q", a)
				}
			}
			funcs = append(funcs, f)
		})
	}
	if !needPtxas(t) {
		return
	}
	if out, err := Assemble(context.Background(), TestModule(funcs...), "sm_80"); err != nil {
		t.Fatalf("ptxas: %v\n%s", err, out)
	}
}

// TestKtime runs bpf_ktime_get_ns (helper 5) through the emulator: it is
// %globaltimer plus the signed offset at the address in the clock global,
// read with a sys-scope load, or %globaltimer alone while the global is 0;
// with Options.Conformance id 5 stays bpf_conformance's "unwind".
func TestKtime(t *testing.T) {
	const timer = 1000 // the emulator's first %globaltimer reading
	tests := []struct {
		name   string
		offset int64
		attach bool
		want   uint64
	}{
		{"no clock region", 0, false, timer},
		{"positive offset", 5_000_000, true, timer + 5_000_000},
		{"negative offset", -400, true, timer - 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := compileProg(t, asm.Instructions{call(jit.HelperKtimeGetNs), asm.Return()}, nil, Options{})
			if !strings.Contains(f.Body, "ld.relaxed.sys.u64") {
				t.Errorf("the offset is not read with a sys-scope load:\n%s", f.Body)
			}
			got, _, err := emuRun(f, nil, 0, func(e *emu) {
				if tt.attach {
					r := e.alloc(8, false, "clock")
					binary.LittleEndian.PutUint64(r.data, uint64(tt.offset))
					setGlobal(e, f, GlobalClock, "", r.base)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("ktime = %d, want %d", int64(got), int64(tt.want))
			}
		})
	}
	t.Run("conformance unwind", func(t *testing.T) {
		f := compileProg(t, asm.Instructions{asm.Mov.Imm(asm.R1, 42), call(jit.HelperKtimeGetNs), asm.Return()}, nil,
			Options{Conformance: true})
		if _, ok := f.Global(GlobalClock, ""); ok {
			t.Error("unwind declares the clock global")
		}
		got, _, err := emuRun(f, nil, 0, nil)
		if err != nil || got != 42 {
			t.Fatalf("unwind(42) = %d, %v; want 42", got, err)
		}
	})
	t.Run("ptxas", func(t *testing.T) {
		f := compileProg(t, asm.Instructions{call(jit.HelperKtimeGetNs), asm.Return()}, nil, Options{Arch: "sm_70"})
		if !needPtxas(t) {
			return
		}
		if out, err := Assemble(context.Background(), TestModule(f), "sm_70"); err != nil {
			t.Fatalf("ptxas: %v\n%s", err, out)
		}
	})
}
