package shim

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
)

// TestRecordDevice: the device in launch, sync and memcpy records. A
// process that sees one device records device 0 without asking the driver
// per record; with several devices, or when the count cannot be had, each
// record asks cuCtxGetDevice. The MOCK driver's count and current device
// come from MOCK_DEVICE_COUNT (negative: the call fails) and
// MOCK_CURRENT_DEVICE.
func TestRecordDevice(t *testing.T) {
	b := binaries(t)
	cases := []struct {
		name, count, current string
		want                 uint32
		trace                string // a trace line that must appear ("" none about devices)
	}{
		{"one device", "1", "0", 0, "devices: one"},
		// One device: the driver is not asked, so a current device the
		// MOCK would report is not what the record says.
		{"one device, not asked", "1", "3", 0, "devices: one"},
		{"several devices", "2", "1", 1, "devices: several"},
		{"count fails", "-1", "2", 2, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := startAgent(t, 256, 1024, agent.Options{})
			trace := filepath.Join(t.TempDir(), "trace.log")
			env := append(preload(b, a.path), "MOCK_DEVICE_COUNT="+c.count, "MOCK_CURRENT_DEVICE="+c.current,
				"GPUPROBE_TRACE="+trace)
			if _, errOut, err := run(t, b, env, b.app, "cudart", "basic", "5"); err != nil {
				t.Fatalf("%v\n%s", err, errOut)
			}
			ss := a.waitGone(t, 1)
			st := ss[0].read(t)
			if len(st.launches) != 8 || len(st.syncs) != 1 || len(st.memcpys) != 1 {
				t.Fatalf("%d launches, %d syncs, %d memcpys, want 8, 1, 1", len(st.launches), len(st.syncs), len(st.memcpys))
			}
			for i, l := range st.launches {
				if l.Device != c.want {
					t.Errorf("launch %d: device %d, want %d", i, l.Device, c.want)
				}
			}
			if d := st.syncs[0].Device; d != c.want {
				t.Errorf("sync: device %d, want %d", d, c.want)
			}
			if d := st.memcpys[0].Device; d != c.want {
				t.Errorf("memcpy: device %d, want %d", d, c.want)
			}
			log, err := os.ReadFile(trace)
			if err != nil {
				t.Fatal(err)
			}
			n := strings.Count(string(log), "devices: ")
			switch {
			case c.trace == "" && n != 0:
				t.Errorf("trace has %d device lines, want none:\n%s", n, log)
			case c.trace != "" && (n != 1 || !strings.Contains(string(log), c.trace)):
				t.Errorf("trace has %d device lines, want one with %q:\n%s", n, c.trace, log)
			}
		})
	}
}

// TestRingPrefault: each session's launch ring is faulted in at the
// handshake (every page of the collector's memfd is allocated after a run
// that writes only a few records), in a fork child's session too.
func TestRingPrefault(t *testing.T) {
	b := binaries(t)
	cases := []struct {
		scenario string
		sessions int
	}{
		{"basic", 1},
		{"fork", 2},
	}
	for _, c := range cases {
		t.Run(c.scenario, func(t *testing.T) {
			// 4 MiB of slots: far more pages than the few records touch.
			a := startAgent(t, 256, 16384, agent.Options{})
			trace := filepath.Join(t.TempDir(), "trace.log")
			if _, errOut, err := run(t, b, append(preload(b, a.path), "GPUPROBE_TRACE="+trace), b.app, "cudart", c.scenario); err != nil {
				t.Fatalf("%v\n%s", err, errOut)
			}
			ss := a.waitGone(t, c.sessions)
			if len(ss) != c.sessions {
				t.Fatalf("%d sessions, want %d", len(ss), c.sessions)
			}
			log, err := os.ReadFile(trace)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range ss {
				reg := s.ring.Region()
				var st unix.Stat_t
				if err := unix.Fstat(int(reg.File().Fd()), &st); err != nil {
					t.Fatalf("session %d: fstat of the ring's memfd: %v", i, err)
				}
				size := reg.Header().RegionSize
				if got := uint64(st.Blocks) * 512; got < size {
					t.Errorf("session %d (pid %d): %d of the ring's %d bytes allocated, want all", i, s.peer.PID, got, size)
				}
				line := fmt.Sprintf("gpuprobe[%d]: launch ring: %d bytes faulted in\n", s.peer.PID, size)
				if !strings.Contains(string(log), line) {
					t.Errorf("session %d: no %q in the trace:\n%s", i, line, log)
				}
			}
		})
	}
}
