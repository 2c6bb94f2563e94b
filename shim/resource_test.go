package shim

import (
	"encoding/binary"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/shm"
)

// noOTel unsets the application's OTel variables the test runner may have.
var noOTel = []string{"OTEL_SERVICE_NAME=", "OTEL_RESOURCE_ATTRIBUTES="}

// TestHelloResource: the shim sends the application's OTEL_SERVICE_NAME
// and OTEL_RESOURCE_ATTRIBUTES in HELLO's resource extension as they are;
// one longer than the protocol allows is left out and flagged; without
// them its HELLO is an older shim's (no flags bit 1, nothing after the
// name), and records flow in every case.
func TestHelloResource(t *testing.T) {
	b := binaries(t)
	long := "a=" + strings.Repeat("x", agentwire.MaxResAttrs)
	tests := []struct {
		name string
		env  []string
		want agentwire.Hello // Flags, ServiceName, ResAttrs, Omitted
	}{
		{"none", nil, agentwire.Hello{}},
		{"empty", []string{"OTEL_SERVICE_NAME=", "OTEL_RESOURCE_ATTRIBUTES="}, agentwire.Hello{}},
		{"both", []string{"OTEL_SERVICE_NAME=trainer", "OTEL_RESOURCE_ATTRIBUTES=k8s.pod.name=train-0,team=a%2Cb"},
			agentwire.Hello{Flags: agentwire.HelloResource, ServiceName: "trainer", ResAttrs: "k8s.pod.name=train-0,team=a%2Cb"}},
		{"attributes only", []string{"OTEL_RESOURCE_ATTRIBUTES=service.name=x"},
			agentwire.Hello{Flags: agentwire.HelloResource, ResAttrs: "service.name=x"}},
		{"too long", []string{"OTEL_SERVICE_NAME=svc", "OTEL_RESOURCE_ATTRIBUTES=" + long},
			agentwire.Hello{Flags: agentwire.HelloResource, ServiceName: "svc", Omitted: agentwire.OmittedResAttrs}},
		{"longest", []string{"OTEL_SERVICE_NAME=" + strings.Repeat("s", agentwire.MaxServiceName)},
			agentwire.Hello{Flags: agentwire.HelloResource, ServiceName: strings.Repeat("s", agentwire.MaxServiceName)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := startAgent(t, 256, 1024, agent.Options{})
			env := append(append(preload(b, a.path), noOTel...), tc.env...)
			if _, errOut, err := run(t, b, env, b.app, "cudart", "basic", "5"); err != nil {
				t.Fatalf("app: %v\n%s", err, errOut)
			}
			ss := a.waitGone(t, 1)
			h := ss[0].peer.Hello
			got := agentwire.Hello{Flags: h.Flags, ServiceName: h.ServiceName, ResAttrs: h.ResAttrs, Omitted: h.Omitted}
			if got != tc.want {
				t.Errorf("HELLO %+v, want %+v", got, tc.want)
			}
			checkLaunches(t, ss[0].read(t), ss[0].peer.PID, basicLaunches())
		})
	}
}

// oldCollector serves the agent socket as a collector without the
// resource extension: a HELLO with flags bit 1 is answered ERROR code 1
// (its length does not add up for it), any other gets a WELCOME with a
// launch ring.
type oldCollector struct {
	ring *shm.Ring
	mu   sync.Mutex
	seen []uint32 // flags of each HELLO
}

func (o *oldCollector) serve(c *net.UnixConn) {
	defer c.Close()
	typ, p, err := readFrame(c)
	if err != nil || typ != uint16(agentwire.FrameHello) || len(p) < 12 {
		return
	}
	flags := binary.LittleEndian.Uint32(p[4:])
	o.mu.Lock()
	o.seen = append(o.seen, flags)
	o.mu.Unlock()
	if flags&agentwire.HelloResource != 0 {
		c.Write(agentwire.MarshalError(agentwire.CodeProtocol, "HELLO name_len 3 at payload offset 8, but 40 bytes follow"))
		return
	}
	h := o.ring.Region().Header()
	w, _ := agentwire.MarshalWelcome(agentwire.Welcome{Session: 1, Regions: []agentwire.RegionInfo{
		{Role: agentwire.RoleLaunchRing, Kind: h.Kind, RegionSize: h.RegionSize, ID: h.ID, Name: "launches"}}})
	if _, _, err := c.WriteMsgUnix(w, unix.UnixRights(int(o.ring.Region().File().Fd())), nil); err != nil {
		return
	}
	io.Copy(io.Discard, c) // until the client goes
}

// TestHelloResourceOldCollector: a collector that predates the resource
// extension refuses it; the shim asks again without it and records.
func TestHelloResourceOldCollector(t *testing.T) {
	b := binaries(t)
	ring, err := newRing()
	if err != nil {
		t.Fatal(err)
	}
	defer ring.Close()
	o := &oldCollector{ring: ring}
	path := filepath.Join(t.TempDir(), "old.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); o.serve(c) }()
		}
	}()
	defer func() { ln.Close(); wg.Wait() }()

	env := append(append(preload(b, path), noOTel...), "OTEL_SERVICE_NAME=trainer", "GPUPROBE_PATCH=0")
	_, tr := traced(t, b, env, "cudart", "basic", "5")
	wantTrace(t, tr, []string{"refused the HELLO resource extension", "connected to"}, nil)
	o.mu.Lock()
	seen := append([]uint32(nil), o.seen...)
	o.mu.Unlock()
	if len(seen) != 2 || seen[0] != agentwire.HelloResource || seen[1] != 0 {
		t.Fatalf("HELLO flags %v, want [2 0]", seen)
	}
	st := readRing(t, ring)
	if len(st.launches) != len(basicLaunches()) {
		t.Fatalf("%d launches recorded, want %d\n%s", len(st.launches), len(basicLaunches()), tr)
	}
}

// TestDeviceRecords: after its handshake the shim writes one Device record
// per device the process sees, before any launch: the UUID of its GPU, or
// of its MIG instance (cuDeviceGetUuid_v2), so the collector tells apart
// the device 0 of two containers.
func TestDeviceRecords(t *testing.T) {
	b := binaries(t)
	uuid := func(b byte) [16]byte {
		var u [16]byte
		for i := range u {
			u[i] = b
		}
		return u
	}
	tests := []struct {
		name  string
		env   []string
		uuids [][16]byte
		names []string
	}{
		{"one GPU", []string{"MOCK_DEVICE_COUNT=1"}, [][16]byte{uuid(0x10)}, []string{"Mock H100 0"}},
		{"two GPUs", []string{"MOCK_DEVICE_COUNT=2", "MOCK_CURRENT_DEVICE=1"}, [][16]byte{uuid(0x10), uuid(0x11)},
			[]string{"Mock H100 0", "Mock H100 1"}},
		{"a MIG instance", []string{"MOCK_DEVICE_COUNT=1", "MOCK_MIG=1"}, [][16]byte{uuid(0xa0)},
			[]string{"Mock H100 0 MIG 1g.10gb"}},
		{"the driver cannot count", []string{"MOCK_DEVICE_COUNT=-1", "MOCK_CURRENT_DEVICE=0"}, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := startAgent(t, 256, 1024, agent.Options{})
			if _, errOut, err := run(t, b, append(preload(b, a.path), tc.env...), b.app, "cudart", "basic", "5"); err != nil {
				t.Fatalf("app: %v\n%s", err, errOut)
			}
			ss := a.waitGone(t, 1)
			st := ss[0].read(t)
			if len(st.devices) != len(tc.uuids) {
				t.Fatalf("%d device records, want %d", len(st.devices), len(tc.uuids))
			}
			for i, d := range st.devices {
				if d.Device != uint32(i) || d.UUID != tc.uuids[i] || d.Name != tc.names[i] || d.PID != uint32(ss[0].peer.PID) ||
					d.SMCount != 132 || d.ComputeCap != 90 {
					t.Errorf("device record %d: %+v, want ordinal %d, uuid %x, name %q", i, d, i, tc.uuids[i], tc.names[i])
				}
			}
			if len(st.launches) != len(basicLaunches()) {
				t.Errorf("%d launches, want %d", len(st.launches), len(basicLaunches()))
			}
		})
	}
}
