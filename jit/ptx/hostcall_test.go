package ptx

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/shm"
)

// emuMailbox allocates a mailbox of n slots and its lock block (shm
// "Mailbox") and, when attach, binds both to f's globals.
func emuMailbox(e *emu, f *Func, n int, attach bool) (mb, locks *emuRegion) {
	le := binary.LittleEndian
	mb = e.alloc(dataOffset+n*mailboxSlotSize, false, "mailbox")
	le.PutUint32(mb.data[hdrMaxEntries:], uint32(n))
	locks = e.alloc(mlocksHeader+n*mlockSize, false, "mailbox locks")
	le.PutUint32(locks.data[mlocksSlots:], uint32(n))
	if attach {
		setGlobal(e, f, GlobalMailbox, "", mb.base)
		setGlobal(e, f, GlobalMailboxLocks, "", locks.base)
	}
	return mb, locks
}

// emuHost is a host serving an emulated mailbox: each pending request is
// answered with ret(slot), unless ret is nil (the host is away).
type emuHost struct {
	mb     *emuRegion
	n      int
	ret    func(slot []byte) int64
	served int
	late   int
}

func (h *emuHost) poll(*emu) {
	le := binary.LittleEndian
	if h.ret == nil {
		return
	}
	for i := 0; i < h.n; i++ {
		s := h.mb.data[dataOffset+i*mailboxSlotSize:]
		req := le.Uint64(s[mslotReq:])
		if req == le.Uint64(s[mslotAck:]) {
			continue
		}
		if le.Uint32(s[mslotWaiting:]) == 0 {
			h.late++
		}
		le.PutUint64(s[mslotRet:], uint64(h.ret(s)))
		le.PutUint64(s[mslotAck:], req)
		h.served++
	}
}

// emuCall runs f's entry once more on e.
func emuCall(t *testing.T, e *emu, f *Func) int64 {
	t.Helper()
	mem := e.alloc(16, false, "mem")
	res := e.alloc(8, false, "result")
	if _, err := e.call(TestEntry(f), []uint64{mem.base, 0, res.base}); err != nil {
		t.Fatal(err)
	}
	return int64(binary.LittleEndian.Uint64(res.data))
}

func lockWord(l *emuRegion, slot, off int) uint64 {
	b := l.data[mlocksHeader+slot*mlockSize+off:]
	if off == mlockReq {
		return binary.LittleEndian.Uint64(b)
	}
	return uint64(binary.LittleEndian.Uint32(b))
}

// TestHostCallPaths: the requester's exits, and what it leaves in the
// lock block and the slot.
func TestHostCallPaths(t *testing.T) {
	le := binary.LittleEndian
	tests := []struct {
		name        string
		mailbox     bool
		locks       bool
		ret         func([]byte) int64
		want        int64
		busy, req   uint64 // lock block after the call
		waiting     uint32 // the slot's waiting word after the call
		timerReads0 bool   // returned without reading %globaltimer
	}{
		{"answered", true, true, func([]byte) int64 { return 42 }, 42, 0, 1, 1, false},
		{"answer equals the pending value", true, true, func([]byte) int64 { return shm.MailboxRetPending }, shm.MailboxRetPending, 0, 1, 1, false},
		{"negative answer", true, true, func([]byte) int64 { return -7 }, -7, 0, 1, 1, false},
		{"no answer times out", true, true, nil, -ETIMEDOUT, 1, 1, 0, false},
		{"no lock block fails fast", true, false, nil, -ETIMEDOUT, 0, 0, 0, true},
		{"no mailbox fails fast", false, false, nil, -ETIMEDOUT, 0, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := compileProg(t, printk, nil, Options{})
			var mb, locks *emuRegion
			got, e, err := emuRun(f, nil, 0, func(e *emu) {
				mb, locks = emuMailbox(e, f, 1, false)
				if tt.mailbox {
					setGlobal(e, f, GlobalMailbox, "", mb.base)
				}
				if tt.locks {
					setGlobal(e, f, GlobalMailboxLocks, "", locks.base)
				}
				e.hook = (&emuHost{mb: mb, n: 1, ret: tt.ret}).poll
			})
			if err != nil {
				t.Fatal(err)
			}
			if int64(got) != tt.want {
				t.Fatalf("r0 = %#x, want %#x", got, tt.want)
			}
			if l, b, r := lockWord(locks, 0, mlockLock), lockWord(locks, 0, mlockBusy), lockWord(locks, 0, mlockReq); l != 0 || b != tt.busy || r != tt.req {
				t.Errorf("lock block: lock %d busy %d req %d, want 0 %d %d", l, b, r, tt.busy, tt.req)
			}
			s := mb.data[dataOffset:]
			if w := le.Uint32(s[mslotWaiting:]); w != tt.waiting {
				t.Errorf("waiting = %d, want %d", w, tt.waiting)
			}
			if r := le.Uint64(s[mslotReq:]); r != tt.req {
				t.Errorf("host req = %d, want %d", r, tt.req)
			}
			if tt.timerReads0 != (e.timer == 0) {
				t.Errorf("%%globaltimer read %d times", e.timer/1000)
			}
			if tt.want == -ETIMEDOUT && tt.locks && e.timer < uint64(DefaultHostCallTimeout.Nanoseconds()) {
				t.Errorf("gave up after %d ns, before the %v timeout", e.timer, DefaultHostCallTimeout)
			}
		})
	}
}

// TestHostCallBusyAfterTimeout: a slot whose request timed out is not
// reused until a claimant sees the host's (late) answer; the late answer
// reaches nobody, and the next request gets its own.
func TestHostCallBusyAfterTimeout(t *testing.T) {
	le := binary.LittleEndian
	f := compileProg(t, printk, nil, Options{})
	host := &emuHost{n: 1}
	got, e, err := emuRun(f, nil, 0, func(e *emu) {
		host.mb, _ = emuMailbox(e, f, 1, true)
		e.hook = host.poll
	})
	if err != nil || int64(got) != -ETIMEDOUT {
		t.Fatalf("first call: %d, %v", int64(got), err)
	}
	s := host.mb.data[dataOffset:]
	// The host still owes the answer: the only slot cannot be claimed.
	if r := emuCall(t, e, f); r != -ETIMEDOUT || le.Uint64(s[mslotReq:]) != 1 {
		t.Fatalf("second call: %d, req %d; want -ETIMEDOUT and no new request", r, le.Uint64(s[mslotReq:]))
	}
	// The host comes back: the late answer (7) goes nowhere, the slot is
	// claimed after one read of ack, and the new request is answered.
	host.ret = func(s []byte) int64 {
		if le.Uint64(s[mslotReq:]) == 1 {
			return 7
		}
		return 42
	}
	if r := emuCall(t, e, f); r != 42 {
		t.Fatalf("third call: %d, want 42", r)
	}
	if host.served != 2 || host.late != 1 || le.Uint64(s[mslotReq:]) != 2 {
		t.Fatalf("host served %d (late %d), req %d; want 2 (1), 2", host.served, host.late, le.Uint64(s[mslotReq:]))
	}
}

// TestHostCallLateAnswerBeforeClaim: an answer that arrives after its
// requester gave up and before the next claim frees the slot.
func TestHostCallLateAnswerBeforeClaim(t *testing.T) {
	f := compileProg(t, printk, nil, Options{})
	host := &emuHost{n: 1}
	var locks *emuRegion
	_, e, err := emuRun(f, nil, 0, func(e *emu) {
		host.mb, locks = emuMailbox(e, f, 1, true)
		e.hook = host.poll
	})
	if err != nil {
		t.Fatal(err)
	}
	host.ret = func([]byte) int64 { return 5 }
	host.poll(e) // the late answer
	if host.late != 1 || lockWord(locks, 0, mlockBusy) != 1 {
		t.Fatalf("late %d, busy %d", host.late, lockWord(locks, 0, mlockBusy))
	}
	if r := emuCall(t, e, f); r != 5 || lockWord(locks, 0, mlockBusy) != 0 || lockWord(locks, 0, mlockReq) != 2 {
		t.Fatalf("call after the late answer: %d, busy %d, req %d", r, lockWord(locks, 0, mlockBusy), lockWord(locks, 0, mlockReq))
	}
}

// TestHostCallSkipsBusySlot: with two slots, a request finds the other
// slot when its own is held or still owes an answer.
func TestHostCallSkipsBusySlot(t *testing.T) {
	le := binary.LittleEndian
	f := compileProg(t, printk, nil, Options{})
	for _, busy := range []bool{false, true} {
		host := &emuHost{n: 2, ret: func([]byte) int64 { return 3 }}
		var locks *emuRegion
		got, _, err := emuRun(f, nil, 0, func(e *emu) {
			host.mb, locks = emuMailbox(e, f, 2, true)
			e.hook = host.poll
			l := locks.data[mlocksHeader:] // slot 0: the caller's (thread 0)
			if busy {
				le.PutUint32(l[mlockBusy:], 1)
				le.PutUint64(l[mlockReq:], 1) // the host's ack is 0: unanswered
			} else {
				le.PutUint32(l[mlockLock:], 1)
			}
		})
		if err != nil || got != 3 {
			t.Fatalf("busy %v: r0 %d, %v", busy, got, err)
		}
		if lockWord(locks, 1, mlockReq) != 1 {
			t.Fatalf("busy %v: slot 1 not used: req %d", busy, lockWord(locks, 1, mlockReq))
		}
	}
}

// TestHostCallPayload: the payload (p1 up to n1 or a NUL, then p2) as the
// host reads it, with word and byte copies at every alignment, and cut at
// the ABI table's bound (Signature.MaxLen) for longer text.
func TestHostCallPayload(t *testing.T) {
	le := binary.LittleEndian
	text := strings.Repeat("The quick brown fox jumps over the lazy dog, 0123456789!", 5)
	for _, tc := range []struct {
		name string
		id   jit.HelperID
		off  int // the string's offset below r10
		n    int // bytes passed (printk) or the string's length (puts)
	}{
		{"printk aligned", jit.HelperTracePrintk, 64, 21},
		{"printk misaligned", jit.HelperTracePrintk, 61, 30},
		{"printk long", jit.HelperTracePrintk, 64, 56},
		{"puts aligned", jit.HelperPuts, 64, 17},
		{"puts misaligned", jit.HelperPuts, 59, 23},
		{"printk past the bound", jit.HelperTracePrintk, 256, 250},
		{"puts past the bound", jit.HelperPuts, 253, 245},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var insns asm.Instructions
			src := []byte(text[:tc.n])
			if tc.id == jit.HelperPuts {
				src = append(src[:len(src):len(src)], 0, 'x', 'y') // stops at the NUL
			}
			for k, b := range src {
				insns = append(insns, asm.StoreImm(asm.R10, int16(k-tc.off), int64(b), asm.Byte))
			}
			insns = append(insns, asm.Mov.Reg(asm.R1, asm.R10), asm.Add.Imm(asm.R1, int32(-tc.off)))
			if tc.id == jit.HelperTracePrintk {
				insns = append(insns, asm.Mov.Imm(asm.R2, int32(tc.n)))
			}
			insns = append(insns, call(tc.id), asm.Return())
			f := compileProg(t, insns, nil, Options{})
			var payload string
			got, _, err := emuRun(f, nil, 0, func(e *emu) {
				mb, _ := emuMailbox(e, f, 1, true)
				e.hook = (&emuHost{mb: mb, n: 1, ret: func(s []byte) int64 {
					payload = string(s[mslotPayload : mslotPayload+int(le.Uint32(s[mslotPayloadLen:]))])
					if fl := le.Uint32(s[mslotFlags:]); fl != 0 {
						t.Errorf("flags = %d", fl)
					}
					return 0
				}}).poll
			})
			if err != nil || got != 0 {
				t.Fatalf("r0 %d, %v", got, err)
			}
			sig, _ := jit.HelperSignature(tc.id)
			want := text[:min(uint64(tc.n), sig.MaxLen)]
			if payload != want {
				t.Fatalf("payload %q (%d bytes), want %q (%d)", payload, len(payload), want, len(want))
			}
		})
	}
}

// TestHostMapUpdatePayload: key then value, at every split of the payload
// words, and the args the host reads.
func TestHostMapUpdatePayload(t *testing.T) {
	le := binary.LittleEndian
	for _, ks := range []uint32{4, 8, 12} {
		m := &jit.Map{Name: "h", Type: jit.MapTypeHash, KeySize: ks, ValueSize: 12, MaxEntries: 16}
		var insns asm.Instructions
		for k := 0; k < 32; k++ {
			insns = append(insns, asm.StoreImm(asm.R10, int16(k-32), int64('a'+k), asm.Byte))
		}
		insns = append(insns,
			mapPtr(asm.R1, "h"),
			asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, -32),
			asm.Mov.Reg(asm.R3, asm.R10), asm.Add.Imm(asm.R3, -16),
			asm.Mov.Imm(asm.R4, 0),
			call(jit.HelperMapUpdateElem),
			asm.Return())
		f := compileProg(t, insns, []*jit.Map{m}, Options{})
		var payload string
		var args [5]uint64
		got, _, err := emuRun(f, nil, 0, func(e *emu) {
			mb, _ := emuMailbox(e, f, 1, true)
			e.hook = (&emuHost{mb: mb, n: 1, ret: func(s []byte) int64 {
				payload = string(s[mslotPayload : mslotPayload+int(le.Uint32(s[mslotPayloadLen:]))])
				for k := range args {
					args[k] = le.Uint64(s[mslotArgs+8*k:])
				}
				return 0
			}}).poll
		})
		want := "abcdefghijkl"[:ks] + "qrstuvwxyz{|"
		if err != nil || got != 0 || payload != want {
			t.Fatalf("key size %d: r0 %d, %v, payload %q, want %q", ks, got, err, payload, want)
		}
		if args[0] != 0 || args[3] != 0 || args[4] != jit.HostMapID("h") {
			t.Fatalf("key size %d: args %#x", ks, args)
		}
	}
}

// TestHostCallPTXOps: the request crosses the bus as posted stores, one
// release store and the spin's vector load; no sys-scope atomic is left.
func TestHostCallPTXOps(t *testing.T) {
	f := compileProg(t, printk, nil, Options{})
	body := f.Body
	for _, bad := range []string{"atom.relaxed.sys", "atom.acquire.sys", "st.u8", "release.sys.u32"} {
		if strings.Contains(body, bad) {
			t.Errorf("hostcall has %q", bad)
		}
	}
	for _, want := range []string{"atom.acquire.gpu.cas.b32", "ld.acquire.sys.v2.u64", "st.v2.u64"} {
		if !strings.Contains(body, want) {
			t.Errorf("hostcall lacks %q", want)
		}
	}
	if n := strings.Count(body, "st.release.sys"); n != 1 {
		t.Errorf("%d sys-scope release stores, want 1", n)
	}
}

// TestHostCallPTXAS: ptxas accepts the requester for sm_90 (the vector
// acquire load, the gpu-scope cas) and for the oldest target.
func TestHostCallPTXAS(t *testing.T) {
	if !needPtxas(t) {
		return
	}
	m := &jit.Map{Name: "h", Type: jit.MapTypeHash, KeySize: 4, ValueSize: 12, MaxEntries: 16}
	update := asm.Instructions{
		mapPtr(asm.R1, "h"),
		asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, -32),
		asm.Mov.Reg(asm.R3, asm.R10), asm.Add.Imm(asm.R3, -16),
		asm.Mov.Imm(asm.R4, 0),
		call(jit.HelperMapUpdateElem),
		asm.Return(),
	}
	for _, arch := range []string{"sm_90", "sm_70"} {
		f := compileProg(t, printk, nil, Options{Arch: arch})
		g := compileProg(t, update, []*jit.Map{m}, Options{Arch: arch, Prefix: "q"})
		assembleBatches(t, arch, []string{"printk", "update"}, []*Func{f, g})
	}
}
