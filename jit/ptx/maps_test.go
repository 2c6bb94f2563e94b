package ptx

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/verifier"
)

// lookupAdd looks up key, adds 5 to the u64 value atomically and returns
// it, or 99 when the lookup gives NULL.
func lookupAdd(key int32) asm.Instructions {
	return asm.Instructions{
		asm.StoreImm(asm.R10, -4, int64(key), asm.Word),
		asm.Mov.Reg(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, -4),
		mapPtr(asm.R1, "counts"),
		call(jit.HelperMapLookupElem),
		asm.Instruction{OpCode: asm.JNE.Op(asm.ImmSource), Dst: asm.R0, Constant: 0, Offset: 2},
		asm.Mov.Imm(asm.R0, 99),
		asm.Return(),
		asm.Mov.Imm(asm.R1, 5),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		asm.LoadMem(asm.R0, asm.R0, 0, asm.DWord),
		asm.Return(),
	}
}

// arrayCase is one lookup-and-add run against a 4-key map.
type arrayCase struct {
	name    string
	typ     jit.MapType
	key     int32
	lanes   uint64 // for per-thread/per-warp maps
	attach  bool
	slot    int // index of the value slot the thread should get
	want    uint64
	wantVal uint64
}

func TestGPUArrayMaps(t *testing.T) {
	tests := []arrayCase{
		{"array key 2", jit.MapTypeGPUArray, 2, 0, true, 2, 15, 15},
		{"array key out of range", jit.MapTypeGPUArray, 4, 0, true, -1, 99, 0},
		{"array not attached", jit.MapTypeGPUArray, 1, 0, false, -1, 99, 0},
		{"per-thread key 1", jit.MapTypePerThreadArray, 1, 3, true, 3, 15, 15},
		{"per-thread no lanes", jit.MapTypePerThreadArray, 1, 0, true, -1, 99, 0},
		{"per-warp key 3", jit.MapTypePerWarpArray, 3, 2, true, 6, 15, 15},
	}
	for _, tt := range tests {
		for _, proofs := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/proofs=%v", tt.name, proofs), func(t *testing.T) { runLookupAdd(t, tt, proofs) })
		}
	}
}

// runLookupAdd runs lookupAdd on the emulator. With proofs, the program is
// compiled with the verifier's alignment proofs: its key load and value
// accesses (stack and map value) lose their run-time alignment check,
// which the PTX must show, and must still run right.
func runLookupAdd(t *testing.T, tt arrayCase, proofs bool) {
	m := &jit.Map{Name: "counts", Type: tt.typ, KeySize: 4, ValueSize: 8, MaxEntries: 4}
	f := compileProofs(t, &jit.Program{Name: "t", Insns: lookupAdd(tt.key), Maps: []*jit.Map{m}}, proofs)
	if checks := strings.Count(f.Body, "and.b64 %t9, %t8, "); proofs != (checks == 0) {
		t.Fatalf("%d run-time alignment checks with proofs=%v", checks, proofs)
	}
	// The atomic add goes through the map value: with the verifier's
	// facts it needs no .local test (the emulator faults on an atomic on
	// .local, so a wrong drop fails the run below).
	if tests := strings.Count(f.Body, "isspacep.local"); proofs != (tests == 0) {
		t.Fatalf("%d .local tests with proofs=%v", tests, proofs)
	}
	// The key is a known number: with the verifier's facts it is not
	// loaded from the stack, and the add is a .global red (the emulator
	// checks the address is not shared or local). Global memory is never
	// addressed as .shared.
	if loaded := strings.Contains(f.Body, "mov.u64 %h1, "+u64(uint64(uint32(tt.key)))); proofs != loaded {
		t.Fatalf("constant key %d in the code: %v with proofs=%v", tt.key, loaded, proofs)
	}
	// Nothing reads the key's stack slot then: its store is dead.
	if stored := strings.Contains(f.Body, "st.local"); stored == proofs {
		t.Fatalf("key stored to the stack %v with proofs=%v", stored, proofs)
	}
	if global := strings.Contains(f.Body, "red.global.add.u64"); global != proofs {
		t.Fatalf("global-space atomic %v with proofs=%v", global, proofs)
	}
	if strings.Contains(f.Body, ".shared") {
		t.Fatalf("a global map accessed as .shared:\n%s", f.Body)
	}
	var r *emuRegion
	got, _, err := emuRun(f, nil, 0, func(e *emu) {
		lanes := max(tt.lanes, 1)
		r = e.alloc(dataOffset+int(4*lanes*8), false, "counts")
		for i := 0; i < int(4*lanes); i++ {
			binary.LittleEndian.PutUint64(r.data[dataOffset+8*i:], 10)
		}
		if tt.attach {
			setGlobal(e, f, GlobalMap, "counts", r.base)
		}
		if tt.typ != jit.MapTypeGPUArray {
			setGlobal(e, f, GlobalMapLanes, "counts", tt.lanes)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if got != tt.want {
		t.Fatalf("r0 = %d, want %d", got, tt.want)
	}
	for i := 0; i*8+dataOffset < len(r.data); i++ {
		v := binary.LittleEndian.Uint64(r.data[dataOffset+8*i:])
		if i == tt.slot && v != tt.wantVal || i != tt.slot && v != 10 {
			t.Errorf("slot %d = %d after the run", i, v)
		}
	}
}

func TestGPUArrayUpdate(t *testing.T) {
	prog := func(key int32, flags int32) asm.Instructions {
		return asm.Instructions{
			asm.StoreImm(asm.R10, -4, int64(key), asm.Word),
			stImm64(-16, 0x02030405),
			asm.StoreImm(asm.R10, -8, 0x77, asm.Word),
			mapPtr(asm.R1, "vals"),
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
		{"BPF_EXIST", prog(0, 2), 0, 0},
		{"BPF_NOEXIST", prog(1, 1), -errEXIST, -1},
		{"bad flags", prog(1, 8), -errINVAL, -1},
		{"key out of range", prog(2, 0), -errE2BIG, -1},
		{"delete", asm.Instructions{mapPtr(asm.R1, "vals"), asm.Mov.Reg(asm.R2, asm.R10), call(jit.HelperMapDeleteElem), asm.Return()}, -errINVAL, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &jit.Map{Name: "vals", Type: jit.MapTypeGPUArray, KeySize: 4, ValueSize: 12, MaxEntries: 2}
			f := compileProg(t, tt.insns, []*jit.Map{m}, Options{})
			var r *emuRegion
			got, _, err := emuRun(f, nil, 0, func(e *emu) {
				r = e.alloc(dataOffset+2*16, false, "vals")
				if _, ok := f.Global(GlobalMap, "vals"); ok {
					setGlobal(e, f, GlobalMap, "vals", r.base)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if int64(got) != tt.want {
				t.Fatalf("r0 = %d, want %d", int64(got), tt.want)
			}
			for i := 0; i < 2; i++ {
				v := r.data[dataOffset+16*i : dataOffset+16*i+16]
				want := make([]byte, 16)
				if i == tt.slot {
					copy(want, []byte{5, 4, 3, 2, 0, 0, 0, 0, 0x77, 0, 0, 0})
				}
				if string(v) != string(want) {
					t.Errorf("slot %d = % x, want % x", i, v, want)
				}
			}
		})
	}
}

// perfOut writes size bytes from r10-64 (starting 0x1111, 0x2222) to the
// ring "events".
func perfOut(size int32) asm.Instructions {
	return asm.Instructions{
		stImm64(-64, 0x1111),
		stImm64(-56, 0x2222),
		mapPtr(asm.R2, "events"),
		asm.Mov.Imm(asm.R3, 0),
		asm.Mov.Reg(asm.R4, asm.R10), asm.Add.Imm(asm.R4, -64),
		asm.Mov.Imm(asm.R5, size),
		call(jit.HelperPerfEventOutput),
		asm.Return(),
	}
}

func TestRingBuffer(t *testing.T) {
	const slots, stride = 4, 64
	tests := []struct {
		name       string
		size       int32
		head, tail uint64
		want       int64
		published  bool
		dropped    uint64
		oversize   uint64
	}{
		{"published", 16, 0, 0, 0, true, 0, 0},
		{"published after wrap", 16, 6, 5, 0, true, 0, 0},
		{"full ring drops", 16, 4, 0, -errNOSPC, false, 1, 0},
		{"larger than a slot", 49, 0, 0, -errE2BIG, false, 0, 1},
		{"exactly a slot", 48, 0, 0, 0, true, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &jit.Map{Name: "events", Type: jit.MapTypeGPURingbuf, MaxEntries: slots * stride}
			f := compileProg(t, perfOut(tt.size), []*jit.Map{m}, Options{})
			var r *emuRegion
			le := binary.LittleEndian
			got, _, err := emuRun(f, nil, 0, func(e *emu) {
				r = e.alloc(dataOffset+slots*(stride+8), false, "events")
				le.PutUint32(r.data[hdrMaxEntries:], slots)
				le.PutUint32(r.data[hdrStride:], stride)
				le.PutUint64(r.data[ringHead:], tt.head)
				le.PutUint64(r.data[ringTail:], tt.tail)
				setGlobal(e, f, GlobalMap, "events", r.base)
			})
			if err != nil {
				t.Fatal(err)
			}
			if int64(got) != tt.want {
				t.Fatalf("r0 = %d, want %d", int64(got), tt.want)
			}
			if d := le.Uint64(r.data[ringDropped:]); d != tt.dropped {
				t.Errorf("dropped = %d, want %d", d, tt.dropped)
			}
			if o := le.Uint64(r.data[ringOversize:]); o != tt.oversize {
				t.Errorf("oversize = %d, want %d", o, tt.oversize)
			}
			if !tt.published {
				if h := le.Uint64(r.data[ringHead:]); h != tt.head {
					t.Errorf("head moved to %d without a record", h)
				}
				return
			}
			slot := r.data[dataOffset+int(tt.head%slots)*stride:]
			if seq := le.Uint64(slot); seq != tt.head+1 {
				t.Errorf("seq = %d, want %d", seq, tt.head+1)
			}
			if n := le.Uint32(slot[8:]); n != uint32(tt.size) {
				t.Errorf("len = %d, want %d", n, tt.size)
			}
			if a, b := le.Uint64(slot[16:]), le.Uint64(slot[24:]); a != 0x1111 || b != 0x2222 {
				t.Errorf("payload = %#x %#x", a, b)
			}
			if h := le.Uint64(r.data[ringHead:]); h != tt.head+1 {
				t.Errorf("head = %d, want %d", h, tt.head+1)
			}
		})
	}
}

func TestRingBufferNotAttached(t *testing.T) {
	m := &jit.Map{Name: "events", Type: jit.MapTypeGPURingbuf, MaxEntries: 4096}
	f := compileProg(t, perfOut(16), []*jit.Map{m}, Options{})
	got, _, err := emuRun(f, nil, 0, nil)
	if err != nil || int64(got) != -errNOENT {
		t.Fatalf("r0 = %d, %v; want %d", int64(got), err, -errNOENT)
	}
}

// printk calls trace_printk("hi %d", 6, 7).
var printk = asm.Instructions{
	asm.LoadImm(asm.R1, 0x0064_2520_6968, asm.DWord), // "hi %d\0"
	asm.StoreMem(asm.R10, -8, asm.R1, asm.DWord),
	asm.Mov.Reg(asm.R1, asm.R10), asm.Add.Imm(asm.R1, -8),
	asm.Mov.Imm(asm.R2, 6),
	asm.Mov.Imm(asm.R3, 7),
	call(jit.HelperTracePrintk),
	asm.Return(),
}

func TestHostCall(t *testing.T) {
	le := binary.LittleEndian
	tests := []struct {
		name   string
		answer bool // a host answers
		attach bool
		want   int64
	}{
		{"answered", true, true, 42},
		{"no answer times out", false, true, -ETIMEDOUT},
		{"no mailbox", false, false, -ETIMEDOUT},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := compileProg(t, printk, nil, Options{})
			var r, locks *emuRegion
			var served int
			var payload string
			var args [5]uint64
			got, e, err := emuRun(f, nil, 0, func(e *emu) {
				r, locks = emuMailbox(e, f, 2, tt.attach)
				if !tt.answer {
					return
				}
				// The host: answer every posted request with 42.
				e.hook = func(e *emu) {
					for i := 0; i < 2; i++ {
						s := r.data[dataOffset+i*mailboxSlotSize:]
						req, ack := le.Uint64(s[mslotReq:]), le.Uint64(s[mslotAck:])
						if req == ack {
							continue
						}
						n := le.Uint32(s[mslotPayloadLen:])
						payload = string(s[mslotPayload : mslotPayload+int(n)])
						for k := range args {
							args[k] = le.Uint64(s[mslotArgs+8*k:])
						}
						if h := le.Uint32(s[mslotHelper:]); h != uint32(jit.HelperTracePrintk) {
							t.Errorf("helper = %d", h)
						}
						le.PutUint64(s[mslotRet:], 42)
						le.PutUint64(s[mslotAck:], req)
						served++
					}
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if int64(got) != tt.want {
				t.Fatalf("r0 = %d, want %d", int64(got), tt.want)
			}
			if tt.answer {
				if served != 1 || payload != "hi %d\x00" || args[1] != 6 || args[2] != 7 {
					t.Fatalf("served %d, payload %q, args %v", served, payload, args)
				}
			}
			if tt.attach {
				for i := 0; i < 2; i++ {
					if lock := le.Uint32(locks.data[mlocksHeader+i*mlockSize+mlockLock:]); lock != 0 {
						t.Errorf("slot %d still locked", i)
					}
				}
			}
			if !tt.answer && tt.attach && e.timer < uint64(DefaultHostCallTimeout.Nanoseconds()) {
				t.Errorf("gave up after %d ns, before the %v timeout", e.timer, DefaultHostCallTimeout)
			}
		})
	}
}

func TestPutsStopsAtNUL(t *testing.T) {
	le := binary.LittleEndian
	insns := asm.Instructions{
		stImm64(-8, 0x0021_6b6f), // "ok!\0"
		asm.Mov.Reg(asm.R1, asm.R10), asm.Add.Imm(asm.R1, -8),
		call(jit.HelperPuts),
		asm.Return(),
	}
	f := compileProg(t, insns, nil, Options{})
	var payload string
	got, _, err := emuRun(f, nil, 0, func(e *emu) {
		r, _ := emuMailbox(e, f, 1, true)
		e.hook = func(e *emu) {
			s := r.data[dataOffset:]
			if req := le.Uint64(s[mslotReq:]); req != le.Uint64(s[mslotAck:]) {
				payload = string(s[mslotPayload : mslotPayload+int(le.Uint32(s[mslotPayloadLen:]))])
				le.PutUint64(s[mslotRet:], 0)
				le.PutUint64(s[mslotAck:], req)
			}
		}
	})
	if err != nil || got != 0 || payload != "ok!" {
		t.Fatalf("puts: r0 %d, err %v, payload %q", got, err, payload)
	}
}

func TestHostMapLookup(t *testing.T) {
	le := binary.LittleEndian
	m := &jit.Map{Name: "h", Type: jit.MapTypeHash, KeySize: 8, ValueSize: 8, MaxEntries: 16}
	insns := asm.Instructions{
		stImm64(-8, 0xabc),
		mapPtr(asm.R1, "h"),
		asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, -8),
		call(jit.HelperMapLookupElem),
		asm.Return(),
	}
	f := compileProg(t, insns, []*jit.Map{m}, Options{})
	var base uint64
	var key uint64
	got, _, err := emuRun(f, nil, 0, func(e *emu) {
		mb, _ := emuMailbox(e, f, 1, true)
		mr := e.alloc(4096, false, "h")
		base = mr.base
		setGlobal(e, f, GlobalMap, "h", mr.base)
		e.hook = func(e *emu) {
			s := mb.data[dataOffset:]
			if req := le.Uint64(s[mslotReq:]); req != le.Uint64(s[mslotAck:]) {
				key = le.Uint64(s[mslotPayload:])
				le.PutUint64(s[mslotRet:], 1024) // the value's offset in the map's region
				le.PutUint64(s[mslotAck:], req)
			}
		}
	})
	if err != nil || got != base+1024 || key != 0xabc {
		t.Fatalf("host lookup: r0 %#x (want %#x), err %v, key %#x", got, base+1024, err, key)
	}
}

func TestCompileErrors(t *testing.T) {
	arr := &jit.Map{Name: "a", Type: jit.MapTypeGPUArray, KeySize: 8, ValueSize: 8, MaxEntries: 1}
	arr4 := &jit.Map{Name: "b", Type: jit.MapTypeGPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1}
	tests := []struct {
		name  string
		insns asm.Instructions
		maps  []*jit.Map
		opts  Options
		want  string
	}{
		{"empty", nil, nil, Options{}, "no instructions"},
		{"falls through", asm.Instructions{asm.Mov.Imm(asm.R0, 1)}, nil, Options{}, "insn 0: the function that starts at insn 0 falls through"},
		{"jump outside", asm.Instructions{ja(5), asm.Return()}, nil, Options{}, "insn 0: jump offset 5"},
		{"unknown helper", asm.Instructions{call(12345), asm.Return()}, nil, Options{}, "insn 0: unknown helper 12345"},
		{"helper not in the ABI", asm.Instructions{call(4), asm.Return()}, nil, Options{}, "unknown helper 4"},
		{"callx off", asm.Instructions{{OpCode: asm.OpCode(asm.JumpClass).SetJumpOp(asm.Call).SetSource(asm.RegSource), Dst: asm.R1}, asm.Return()}, nil, Options{}, "callx"},
		{"write r10", asm.Instructions{asm.Mov.Imm(asm.R10, 1), asm.Return()}, nil, Options{}, "insn 0: r10 is read-only"},
		{"missing map", asm.Instructions{mapPtr(asm.R1, "nope"), asm.Return()}, nil, Options{}, `insn 0: map "nope" is not among`},
		{"array key size", asm.Instructions{mapPtr(asm.R1, "a"), asm.Mov.Reg(asm.R2, asm.R10), call(jit.HelperMapLookupElem), asm.Return()}, []*jit.Map{arr}, Options{}, `map "a": array keys are 4 bytes, not 8`},
		{"perf to array", asm.Instructions{mapPtr(asm.R2, "b"), call(jit.HelperPerfEventOutput), asm.Return()}, []*jit.Map{arr4}, Options{}, "only GPU ring buffers"},
		{"legacy packet load", asm.Instructions{asm.LoadAbs(0, asm.Word), asm.Return()}, nil, Options{}, "LD_ABS"},
		{"old arch", asm.Instructions{asm.Return()}, nil, Options{Arch: "sm_60"}, "sm_70 or newer"},
		{"bad arch", asm.Instructions{asm.Return()}, nil, Options{Arch: "compute_90"}, "want sm_NN"},
		{"bad prefix", asm.Instructions{asm.Return()}, nil, Options{Prefix: "a-b"}, "not a PTX identifier"},
		{"bad byte swap", asm.Instructions{{OpCode: asm.OpCode(asm.ALUClass).SetALUOp(asm.Swap), Constant: 24}, asm.Return()}, nil, Options{}, "byte swap width 24"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Compile(&jit.Program{Name: "bad", Insns: tt.insns, Maps: tt.maps}, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Compile error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestStackKeyLoad: a key the verifier cannot know, in the program's own
// frame, is read under the proofs from the register that keeps its 4-byte
// cell (no stack store or load at all), and the lookup finds the right
// value.
func TestStackKeyLoad(t *testing.T) {
	insns := append(asm.Instructions{
		call(jit.HelperKtimeGetNs),
		asm.RSh.Imm(asm.R0, 63), // 0 at run time; 0 or 1 to the verifier
		asm.Add.Imm(asm.R0, 2),
		asm.StoreMem(asm.R10, -4, asm.R0, asm.Word),
	}, lookupAdd(0)[1:]...)
	m := &jit.Map{Name: "counts", Type: jit.MapTypeGPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 4}
	p := &jit.Program{Name: "t", Insns: insns, Maps: []*jit.Map{m}}
	for _, proofs := range []bool{false, true} {
		var o Options
		if proofs {
			res, err := verifier.Verify(p, verifier.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := res.ConstKeys[8]; ok {
				t.Fatalf("ConstKeys %v: the key is not known", res.ConstKeys)
			}
			o.Verified = res
		}
		f, err := Compile(p, o)
		if err != nil {
			t.Fatal(err)
		}
		if inReg := strings.Contains(f.Body, "mov.b64 %h1, %fs"); inReg != proofs {
			t.Fatalf("key read from its register %v with proofs=%v", inReg, proofs)
		}
		if inMem := strings.Contains(f.Body, "[__stack+508]"); inMem == proofs {
			t.Fatalf("key slot in local memory %v with proofs=%v", inMem, proofs)
		}
		var r *emuRegion
		got, _, err := emuRun(f, nil, 0, func(e *emu) {
			r = e.alloc(dataOffset+4*8, false, "counts")
			binary.LittleEndian.PutUint64(r.data[dataOffset+2*8:], 10)
			setGlobal(e, f, GlobalMap, "counts", r.base)
		})
		if err != nil {
			t.Fatal(err)
		}
		if got != 15 {
			t.Fatalf("proofs=%v: r0 = %d, want 15 (key 2)", proofs, got)
		}
	}
}
