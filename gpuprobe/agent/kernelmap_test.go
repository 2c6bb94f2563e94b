package agent

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/shm"
)

// kernelArray creates a real BPF_MAP_TYPE_ARRAY with BPF_F_MMAPABLE in the
// kernel (needs root, as CI runs).
func kernelArray(t *testing.T, entries uint32) *ebpf.Map {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: creating a BPF map needs root (CI runs as root)")
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Fatalf("RemoveMemlock: %v", err)
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "launch_clock", Type: ebpf.Array, KeySize: 4, ValueSize: 8,
		MaxEntries: entries, Flags: unix.BPF_F_MMAPABLE})
	if err != nil {
		t.Fatalf("creating a BPF_F_MMAPABLE array: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// serveOffers runs a server whose every client gets offers.
func serveOffers(t *testing.T, offers []agentwire.Offer) *Server {
	t.Helper()
	s, err := Listen(Options{Path: filepath.Join(t.TempDir(), "agent.sock")}, Callbacks{
		Connect: func(*Peer) ([]agentwire.Offer, error) { return offers, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestKernelMapOffer hands a client a real BPF array's fd (RoleKernelMap,
// no header) beside a clock region (RoleClock, an shm array): the client
// maps the BPF map, sees a value written through the map's Update, and a
// value it writes is what the map's Lookup returns.
func TestKernelMapOffer(t *testing.T) {
	m := kernelArray(t, 2)
	clock, err := shm.CreateArray(shm.KindArray, 8, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { clock.Close() }) // after the server's cleanup: it reads the region's fd
	s := serveOffers(t, []agentwire.Offer{
		{Role: agentwire.RoleKernelMap, Name: "launch_clock", FD: m.FD(), Size: 4096, Kind: shm.KindArray},
		{Role: agentwire.RoleClock, Name: "clock", Region: clock.Region()},
	})
	sess, err := Dial(s.Path(), agentwire.Hello{Name: "kernel-map"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	want := []agentwire.RegionInfo{
		{Role: agentwire.RoleKernelMap, Kind: shm.KindArray, Flags: agentwire.FlagNoHeader, RegionSize: 4096, Name: "launch_clock"},
		{Role: agentwire.RoleClock, Kind: shm.KindArray, RegionSize: clock.Region().Header().RegionSize, Name: "clock"},
	}
	if len(sess.Regions) != len(want) {
		t.Fatalf("%d regions, want %d", len(sess.Regions), len(want))
	}
	for i, w := range want {
		if got := sess.Regions[i].RegionInfo; got != w {
			t.Errorf("region %d: %+v, want %+v", i, got, w)
		}
	}
	if sess.Region(agentwire.RoleClock, "clock") == nil || sess.Regions[0].Region != nil {
		t.Fatalf("the clock region is not an shm region, or the kernel map is one")
	}
	raw := sess.Raw(agentwire.RoleKernelMap, "launch_clock")
	if len(raw) != 4096 {
		t.Fatalf("kernel map mapping is %d bytes, want 4096", len(raw))
	}
	le := binary.LittleEndian
	tests := []struct {
		name  string
		key   uint32
		value uint64
		viaFD bool // written with the map's Update (else through the mapping)
	}{
		{"kernel write, client reads", 0, 0x1122334455667788, true},
		{"client write, kernel reads", 1, 42, false},
		{"kernel overwrite", 0, 7, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.viaFD {
				if err := m.Update(tt.key, tt.value, ebpf.UpdateAny); err != nil {
					t.Fatal(err)
				}
			} else {
				le.PutUint64(raw[8*tt.key:], tt.value)
			}
			var v uint64
			if err := m.Lookup(tt.key, &v); err != nil {
				t.Fatal(err)
			}
			if got := le.Uint64(raw[8*tt.key:]); got != tt.value || v != tt.value {
				t.Fatalf("key %d: mapping holds %#x, Lookup %#x; want %#x", tt.key, got, v, tt.value)
			}
		})
	}
}

// TestKernelMapOfferRejects: a bad fd-only offer refuses the client with
// code 3 naming the offer; a size beyond the BPF map's mmapable area fails
// the client's mmap with an error naming the region.
func TestKernelMapOfferRejects(t *testing.T) {
	m := kernelArray(t, 2)
	tests := []struct {
		name     string
		offer    agentwire.Offer
		wantCode agentwire.ErrorCode
		want     string
	}{
		{"no fd", agentwire.Offer{Role: agentwire.RoleKernelMap, Name: "k", FD: -1, Size: 4096}, agentwire.CodeServer, `offer 0 ("k"): has no region and fd -1`},
		{"size 0", agentwire.Offer{Role: agentwire.RoleKernelMap, Name: "k", FD: m.FD()}, agentwire.CodeServer, "size 0 is not a positive multiple of 4096"},
		{"size not in pages", agentwire.Offer{Role: agentwire.RoleKernelMap, Name: "k", FD: m.FD(), Size: 100}, agentwire.CodeServer, "size 100"},
		{"larger than the map", agentwire.Offer{Role: agentwire.RoleKernelMap, Name: "k", FD: m.FD(), Size: 8192}, 0, `region 0 ("k"): mmap of 8192 bytes`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := serveOffers(t, []agentwire.Offer{tt.offer})
			sess, err := Dial(s.Path(), agentwire.Hello{Name: "x"})
			if err == nil {
				sess.Close()
				t.Fatal("Dial succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
			var pe *agentwire.ProtocolError
			if tt.wantCode != 0 && (!errors.As(err, &pe) || pe.Code != tt.wantCode) {
				t.Fatalf("error %v, want code %v", err, tt.wantCode)
			}
		})
	}
}

// TestKernelMapSize: the offered size is the BPF array's mmapable area,
// which a mapping may not exceed (TestKernelMapOfferRejects).
func TestKernelMapSize(t *testing.T) {
	tests := []struct {
		value, entries uint32
		want           uint64
	}{
		{8, 2, 4096},
		{12, 2, 4096}, // values are 8-byte aligned: 16 bytes each
		{8, 512, 4096},
		{8, 513, 8192},
		{4, 1024, 8192},
		{1 << 20, 4096, 1 << 32},
	}
	for _, tt := range tests {
		if got := agentwire.KernelMapSize(tt.value, tt.entries); got != tt.want {
			t.Errorf("KernelMapSize(%d, %d) = %d, want %d", tt.value, tt.entries, got, tt.want)
		}
	}
	m := kernelArray(t, 513)
	s := serveOffers(t, []agentwire.Offer{{Role: agentwire.RoleKernelMap, Name: "big", FD: m.FD(), Size: agentwire.KernelMapSize(8, 513), Kind: shm.KindArray}})
	sess, err := Dial(s.Path(), agentwire.Hello{Name: "x"})
	if err != nil {
		t.Fatalf("a 513-entry map offered with KernelMapSize: %v", err)
	}
	defer sess.Close()
	if err := m.Update(uint32(512), uint64(99), ebpf.UpdateAny); err != nil {
		t.Fatal(err)
	}
	if got := binary.LittleEndian.Uint64(sess.Raw(agentwire.RoleKernelMap, "big")[512*8:]); got != 99 {
		t.Fatalf("key 512 through the mapping = %d, want 99", got)
	}
}
