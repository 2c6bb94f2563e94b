package ptx

import (
	"context"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/probes"
	"github.com/gpuprobe/gpuprobe/jit"
)

// TestRingDevice runs perf_event_output with device-side reservation
// (Options.RingDevice) through the PTX emulator, from every starting state
// of the device block and host control block that leads to a distinct path.
func TestRingDevice(t *testing.T) {
	const slots, stride = 4, 64
	le := binary.LittleEndian
	tests := []struct {
		name string
		size int32
		// device block: head, cached tail, refresh time; host: tail
		dHead, dTail, dRefresh, hTail uint64
		noDev                         bool // GlobalRingDevice left 0: host protocol
		want                          int64
		ticket                        int64  // published ticket, -1: none
		dHeadAfter                    uint64 // device head after the call
		dDropped, hDropped, devMirror uint64
		slotDrop                      int // slot whose drop counter is 1, -1: none
		hHead                         uint64
	}{
		{name: "published", size: 16, want: 0, ticket: 0, dHeadAfter: 1, slotDrop: -1},
		{name: "published after wrap", size: 16, dHead: 6, dTail: 5, hTail: 5, want: 0, ticket: 6, dHeadAfter: 7, slotDrop: -1},
		{name: "stale cached tail refreshed on the full path", size: 16, dHead: 4, dTail: 0, hTail: 2, want: 0, ticket: 4, dHeadAfter: 5, slotDrop: -1},
		{name: "full, refreshed, still full: dropped without a ticket", size: 16, dHead: 4, hTail: 0, want: -errNOSPC, ticket: -1, dHeadAfter: 4, dDropped: 1, slotDrop: -1},
		{name: "full, refreshed recently: no host read, dropped", size: 16, dHead: 4, dRefresh: 1<<30 + 500, hTail: 4, want: -errNOSPC, ticket: -1, dHeadAfter: 4, dDropped: 1, slotDrop: -1},
		{name: "drop count mirrored on the 32nd drop", size: 16, dHead: 4, dRefresh: 1<<30 + 500, want: -errNOSPC, ticket: -1, dHeadAfter: 4, dDropped: 32, devMirror: 32, slotDrop: -1},
		{name: "larger than a slot", size: 49, want: -errE2BIG, ticket: -1, slotDrop: -1},
		{name: "no device block: host protocol", size: 16, noDev: true, want: 0, ticket: 0, slotDrop: -1, hHead: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &jit.Map{Name: "events", Type: jit.MapTypeGPURingbuf, MaxEntries: slots * stride}
			f := compileProg(t, perfOut(tt.size), []*jit.Map{m}, Options{RingDevice: true})
			if _, ok := f.Global(GlobalRingDevice, "events"); !ok {
				t.Fatalf("no ring_device global in %+v", f.Globals)
			}
			var r, d *emuRegion
			got, _, err := emuRun(f, nil, 0, func(e *emu) {
				e.timer = 1 << 30
				r = e.alloc(dataOffset+slots*(stride+8), false, "events")
				le.PutUint32(r.data[hdrMaxEntries:], slots)
				le.PutUint32(r.data[hdrStride:], stride)
				le.PutUint64(r.data[ringTail:], tt.hTail)
				setGlobal(e, f, GlobalMap, "events", r.base)
				if tt.noDev {
					return
				}
				d = e.alloc(64, false, "events_dev")
				le.PutUint64(d.data[devHead:], tt.dHead)
				le.PutUint64(d.data[devTail:], tt.dTail)
				le.PutUint64(d.data[devRefresh:], tt.dRefresh)
				if tt.dDropped == 32 {
					le.PutUint64(d.data[devDropped:], 31)
				}
				le.PutUint32(d.data[devSlots:], slots)
				le.PutUint32(d.data[devSlotSize:], stride)
				setGlobal(e, f, GlobalRingDevice, "events", d.base)
			})
			if err != nil {
				t.Fatal(err)
			}
			if int64(got) != tt.want {
				t.Fatalf("r0 = %d, want %d", int64(got), tt.want)
			}
			if d != nil {
				if h := le.Uint64(d.data[devHead:]); h != tt.dHeadAfter {
					t.Errorf("device head = %d, want %d", h, tt.dHeadAfter)
				}
				if n := le.Uint64(d.data[devDropped:]); n != tt.dDropped {
					t.Errorf("device dropped = %d, want %d", n, tt.dDropped)
				}
			}
			if n := le.Uint64(r.data[ringDropped:]); n != tt.hDropped {
				t.Errorf("host dropped = %d, want %d", n, tt.hDropped)
			}
			if n := le.Uint64(r.data[ringDevDrops:]); n != tt.devMirror {
				t.Errorf("host dev_dropped = %d, want %d", n, tt.devMirror)
			}
			if n := le.Uint64(r.data[ringHead:]); n != tt.hHead {
				t.Errorf("host head = %d, want %d (device mode leaves it to late drops)", n, tt.hHead)
			}
			for s := 0; s < slots; s++ {
				seq := le.Uint64(r.data[dataOffset+s*stride:])
				want := uint64(0)
				if tt.ticket >= 0 && s == int(tt.ticket%slots) {
					want = uint64(tt.ticket) + 1
					slot := r.data[dataOffset+s*stride:]
					if n := le.Uint32(slot[8:]); n != uint32(tt.size) {
						t.Errorf("len = %d, want %d", n, tt.size)
					}
					if a, b := le.Uint64(slot[16:]), le.Uint64(slot[24:]); a != 0x1111 || b != 0x2222 {
						t.Errorf("payload = %#x %#x", a, b)
					}
				}
				if seq != want {
					t.Errorf("slot %d seq = %d, want %d", s, seq, want)
				}
			}
		})
	}
}

// TestRingDevicePTXAS checks the device-reservation PTX with ptxas.
func TestRingDevicePTXAS(t *testing.T) {
	m := &jit.Map{Name: "events", Type: jit.MapTypeGPURingbuf, MaxEntries: 4 * 64}
	f := compileProg(t, perfOut(16), []*jit.Map{m}, Options{RingDevice: true})
	for _, want := range []string{"atom.relaxed.gpu.add.u64", "st.release.sys.u64", "red.relaxed.sys.max.u64"} {
		if !strings.Contains(f.Body, want) {
			t.Errorf("PTX lacks %q", want)
		}
	}
	if strings.Contains(f.Body[strings.Index(f.Body, "_ringoutdev("):], "atom.acq_rel.sys") {
		t.Error("device reservation takes a sys-scope atomic with a return")
	}
	if !needPtxas(t) {
		return
	}
	if out, err := Assemble(context.Background(), TestModule(f), "sm_90"); err != nil {
		t.Fatalf("ptxas: %v\n%s", err, out)
	}
}

// TestRingDeviceKernelPhases compiles the built-in kernel_phases probes
// with device-side reservation and assembles them with ptxas; the entry
// probe must do no sys-scope operation (kp_start is a device array).
func TestRingDeviceKernelPhases(t *testing.T) {
	progs, err := probes.Load(probes.KernelPhases)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range progs {
		f, err := Compile(p, Options{RingDevice: probes.KernelPhasesRingDevice})
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		if p.Name == probes.KernelPhasesEntry && strings.Contains(f.Body, ".sys") {
			t.Errorf("%s: entry probe does a sys-scope operation", p.Name)
		}
		if !needPtxas(t) {
			return
		}
		if out, err := Assemble(context.Background(), TestModule(f), "sm_90"); err != nil {
			t.Fatalf("%s: ptxas: %v\n%s", p.Name, err, out)
		}
	}
}
