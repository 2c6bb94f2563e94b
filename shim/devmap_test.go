package shim

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/shm"
)

// devmapPTX declares the two globals the PATCHED answer binds as device
// maps (the MOCK driver finds a module's globals in its PTX text).
const devmapPTX = `//
.version 8.0
.target sm_90
.address_size 64
.visible .global .align 8 .u64 gp_dm_arr;
.visible .global .align 8 .u64 gp_dm_ring;
.visible .entry _Z9vectorAddPKfS0_Pf(.param .u64 a, .param .u64 b, .param .u64 c)
{
	ret;
}
`

const (
	devmapKeys    = 16 // array map: 8-byte values (one 4096-byte region)
	devmapSlot    = 64 // ring map: 64-byte slots, 48 bytes of payload
	devmapSlots   = 64
	devmapRecLen  = 48
	devmapRecType = 7
)

// devmapAgent serves WELCOME regions 0 launch ring, 1 an array, 2 a ring,
// and answers PATCH with the image unchanged plus globals gp_dm_arr and
// gp_dm_ring bound as device maps (kind 5) of regions 1 and 2, mirrored
// every periodUS. The array is seeded with 0xabc0+k, as a collector's
// initial values.
type devmapAgent struct {
	*testAgent
	arr  *shm.Array
	ring *shm.Ring
}

func startDevmapAgent(t *testing.T, periodUS uint64) *devmapAgent {
	t.Helper()
	arr, err := shm.CreateArray(shm.KindArray, 8, devmapKeys, 1)
	if err != nil {
		t.Fatal(err)
	}
	ring, err := shm.CreateRing(devmapSlot, devmapSlots)
	if err != nil {
		t.Fatal(err)
	}
	for k := uint64(0); k < devmapKeys; k++ {
		if err := arr.StoreUint64(k, 0, 0xabc0+k); err != nil {
			t.Fatal(err)
		}
	}
	a := &devmapAgent{testAgent: &testAgent{path: filepath.Join(t.TempDir(), "agent.sock")}, arr: arr, ring: ring}
	srv, err := agent.Listen(agent.Options{Path: a.path}, agent.Callbacks{
		Connect: func(p *agent.Peer) ([]agentwire.Offer, error) {
			launches, err := newRing()
			if err != nil {
				return nil, err
			}
			a.mu.Lock()
			a.sessions = append(a.sessions, &session{peer: p, ring: launches})
			a.mu.Unlock()
			return []agentwire.Offer{{Role: agentwire.RoleLaunchRing, Name: "launches", Region: launches.Region()},
				{Role: agentwire.RoleMap, Name: "arr", Region: arr.Region()},
				{Role: agentwire.RoleMap, Name: "ring", Region: ring.Region()}}, nil
		},
		Disconnect: func(*agent.Peer) {
			a.mu.Lock()
			a.gone++
			a.mu.Unlock()
		},
		Patch: func(p *agent.Peer, req *agentwire.PatchRequest) (*agentwire.Patched, error) {
			img := append(append([]byte(nil), bytes.TrimRight(req.Image, "\x00")...), 0)
			return &agentwire.Patched{Image: img,
				Kernels: []agentwire.PatchedKernel{{Name: "_Z9vectorAddPKfS0_Pf", ParamIndex: 3, ParamOffset: 24}},
				Globals: []agentwire.PatchedGlobal{
					{Name: "gp_dm_arr", Kind: agentwire.GlobalDeviceMap, Region: 1, Size: periodUS},
					{Name: "gp_dm_ring", Kind: agentwire.GlobalDeviceMap, Region: 2, Size: periodUS},
				}}, nil
		},
	})
	if err != nil {
		t.Fatalf("agent.Listen: %v", err)
	}
	a.srv = srv
	t.Cleanup(func() {
		srv.Close()
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, s := range a.sessions {
			s.ring.Close()
		}
		arr.Close()
		ring.Close()
	})
	return a
}

// devmapApp starts the test app's devmap scenario under the shim (dlsym
// mode); onLine sees each stdout line as it comes. It returns stdout and
// stderr.
func devmapApp(t *testing.T, a *devmapAgent, env []string, onLine func(string), args ...string) (string, string) {
	t.Helper()
	return devmapAppMode(t, a, "dlsym", env, onLine, args...)
}

// devmapAppMode is devmapApp in the app's mode (dlsym, cudart).
func devmapAppMode(t *testing.T, a *devmapAgent, mode string, env []string, onLine func(string), args ...string) (string, string) {
	t.Helper()
	b := binaries(t)
	ptx := filepath.Join(t.TempDir(), "devmap.ptx")
	if err := os.WriteFile(ptx, []byte(devmapPTX), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(b.app, append([]string{mode, "devmap", ptx}, args...)...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+b.dir, "GPUPROBE_TRACE=1", "GPUPROBE_DISABLE=")
	cmd.Env = append(append(cmd.Env, preload(b, a.path)...), env...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var stdout strings.Builder
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		stdout.WriteString(sc.Text() + "\n")
		if onLine != nil {
			onLine(sc.Text())
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("app: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), errb.String())
	}
	a.waitGone(t, 1)
	return stdout.String(), errb.String()
}

// TestDeviceMapArray: an array bound as a device map starts with the
// values the collector seeded in the host region, and what the GPU (the
// app, writing the device copy) stores shows in the host region within
// two mirror periods, copied by the shim's named mirror thread on a
// non-blocking stream of its own.
func TestDeviceMapArray(t *testing.T) {
	const period = 100 * time.Millisecond
	a := startDevmapAgent(t, uint64(period/time.Microsecond))
	var seen time.Duration = -1
	stdout, stderr := devmapApp(t, a, nil, func(line string) {
		if line != "app: devmap written" {
			return
		}
		start := time.Now()
		for time.Since(start) < 10*period {
			ok := true
			for k := uint64(0); k < devmapKeys && ok; k++ {
				v, _ := a.arr.Uint64(k, 0)
				ok = v == 0x5eed0000+k
			}
			if ok {
				seen = time.Since(start)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}, "array", fmt.Sprint(devmapKeys), "1000")
	var seeds []string
	for k := 0; k < devmapKeys; k++ {
		seeds = append(seeds, fmt.Sprintf("%#x", 0xabc0+k))
	}
	for _, want := range []string{"app: devmap patched=1\n", "app: devmap arr=1 ring=1\n",
		"app: devmap seeds " + strings.Join(seeds, " ") + "\n", "app: devmap mirror-thread=1 done\n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s\nstderr:\n%s", want, stdout, stderr)
		}
	}
	if seen < 0 || seen > 2*period {
		t.Errorf("the device copy's values reached the host region after %v, want within %v (2 periods; -1: never)", seen, 2*period)
	}
	if !strings.Contains(stderr, "mock: stream created flags=1\n") || strings.Count(stderr, "mock: stream created") != 1 {
		t.Errorf("want one stream, created non-blocking (flags=1); stderr:\n%s", stderr)
	}
	if !strings.Contains(stderr, "device_maps=2 unbound_device_maps=0 stopped_device_maps=0 ") {
		t.Errorf("exit summary: want 2 device maps, none unbound or stopped; stderr:\n%s", stderr)
	}
}

// TestDeviceMapFork: a fork child has no mirror thread, so a device map
// bound there is refused (global 0, traced) while the parent's keep
// working; the child's exit does not touch the parent's maps.
func TestDeviceMapFork(t *testing.T) {
	a := startDevmapAgent(t, 2000)
	stdout, stderr := devmapApp(t, a, nil, nil, "fork")
	for _, want := range []string{"app: devmap arr=1 ring=1\n", "app: devmap child patched=1 arr=0 ring=0\n",
		"app: devmap child exit=0\n", "app: devmap mirror-thread=1 done\n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s\nstderr:\n%s", want, stdout, stderr)
		}
	}
	if n := strings.Count(stderr, "cannot be a device map (fork child"); n != 2 {
		t.Errorf("%d device maps refused in the child, want 2; stderr:\n%s", n, stderr)
	}
}

// devmapRec is one delivered record's identity.
type devmapRec struct{ producer, seq uint32 }

// TestDeviceMapRing: GPU producers (the app's threads, running the ring
// protocol on the device copy) write more records than either ring holds;
// the shim's drainer moves them into the host ring, which the test reads
// slowly. Every record offered is exactly one of delivered (intact, once),
// dropped on the device, dropped on the host, or stalled (a ticket taken
// and never published, skipped after GPUPROBE_DEVICE_MAP_STALL_MS).
// "exit": records produced just before exit arrive through the final pass.
func TestDeviceMapRing(t *testing.T) {
	tests := []struct {
		name              string
		periodUS          uint64
		env               []string
		threads, n, pause int
		stall             bool
		sleepMS, startMS  int
		consumeEvery      time.Duration
		drops             bool // both rings must have dropped
	}{
		{"drops", 5000, nil, 8, 3000, 10, false, 200, 0, 20 * time.Millisecond, true},
		{"stall", 5000, []string{"GPUPROBE_DEVICE_MAP_STALL_MS=200"}, 4, 500, 10, true, 800, 0, 5 * time.Millisecond, false},
		// A 1 s period: the thread's first pass (at the bind) is over
		// before the records come, its next is after the app exited.
		{"exit", 1000000, nil, 1, 50, 0, false, 0, 100, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := startDevmapAgent(t, tc.periodUS)
			c := a.ring.NewConsumer(shm.ConsumerOptions{})
			var mu sync.Mutex
			seen := map[devmapRec]bool{}
			var bad []string
			read := func() {
				mu.Lock()
				defer mu.Unlock()
				c.Read(0, func(r shm.Record) {
					if err := checkDevmapRec(r, seen); err != nil && len(bad) < 10 {
						bad = append(bad, err.Error())
					}
				})
			}
			done := make(chan struct{})
			var wg sync.WaitGroup
			// The reader stops before the agent's cleanup closes the
			// ring, also when the test fails before the app is done.
			var stopOnce sync.Once
			stop := func() { stopOnce.Do(func() { close(done) }); wg.Wait() }
			t.Cleanup(stop)
			if tc.consumeEvery > 0 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-done:
							return
						case <-time.After(tc.consumeEvery):
							read()
						}
					}
				}()
			}
			stall := 0
			if tc.stall {
				stall = 1
			}
			stdout, stderr := devmapApp(t, a, tc.env, nil, "ring", fmt.Sprint(tc.threads), fmt.Sprint(tc.n),
				fmt.Sprint(devmapRecLen), fmt.Sprint(tc.pause), fmt.Sprint(stall), fmt.Sprint(tc.sleepMS), fmt.Sprint(tc.startMS))
			stop()
			read()
			var produced, published, dropped, oversize uint64
			var stalled int
			i := strings.Index(stdout, "app: devmap produced=")
			if i < 0 {
				t.Fatalf("no counts from the app:\n%s\nstderr:\n%s", stdout, stderr)
			}
			if _, err := fmt.Sscanf(stdout[i:], "app: devmap produced=%d published=%d dropped=%d oversize=%d stalled=%d",
				&produced, &published, &dropped, &oversize, &stalled); err != nil {
				t.Fatal(err)
			}
			st := a.ring.Stats()
			delivered := c.Stats().Delivered
			hostDropped := st.Dropped - st.DeviceDropped
			t.Logf("produced %d: delivered %d, device dropped %d (app saw %d, stalled %d), host dropped %d",
				produced, delivered, st.DeviceDropped, dropped, stalled, hostDropped)
			if len(bad) > 0 {
				t.Errorf("bad records: %v", bad)
			}
			if uint64(len(seen)) != delivered {
				t.Errorf("%d distinct records of %d delivered", len(seen), delivered)
			}
			if delivered+st.Dropped != produced || oversize != 0 || st.Oversize != 0 {
				t.Errorf("produced %d != delivered %d + dropped %d (device %d, host %d); oversize %d/%d",
					produced, delivered, st.Dropped, st.DeviceDropped, hostDropped, oversize, st.Oversize)
			}
			if st.DeviceDropped != dropped+uint64(stalled) {
				t.Errorf("dev_dropped %d, want the device's drops %d + stalls %d", st.DeviceDropped, dropped, stalled)
			}
			if c.Stats().Skipped+c.Stats().Stalled+c.Stats().Corrupt != 0 || st.Stalled != 0 {
				t.Errorf("host consumer %+v, ring stalled %d: the host ring's producer is the drainer alone", c.Stats(), st.Stalled)
			}
			if tc.drops && (dropped == 0 || hostDropped == 0 || delivered == 0) {
				t.Errorf("want drops on both rings and deliveries: device %d, host %d, delivered %d", dropped, hostDropped, delivered)
			}
			if tc.stall && !strings.Contains(stderr, "unresolved for 200 ms: skipped") {
				t.Errorf("the stall was not traced; stderr:\n%s", stderr)
			}
			if tc.name == "exit" && delivered != produced {
				t.Errorf("delivered %d of %d records produced just before exit", delivered, produced)
			}
		})
	}
}

// checkDevmapRec checks one delivered record: its type, length, pattern
// (as app.c's produce_main writes it), and that it came once.
func checkDevmapRec(r shm.Record, seen map[devmapRec]bool) error {
	if r.Type != devmapRecType || len(r.Payload) != devmapRecLen {
		return fmt.Errorf("ticket %d: type %d, %d bytes", r.Ticket, r.Type, len(r.Payload))
	}
	id := devmapRec{binary.LittleEndian.Uint32(r.Payload), binary.LittleEndian.Uint32(r.Payload[4:])}
	for k := 8; k < devmapRecLen; k++ {
		if want := byte(id.producer*31 + id.seq*7 + uint32(k)); r.Payload[k] != want {
			return fmt.Errorf("record %v: byte %d is %#x, want %#x", id, k, r.Payload[k], want)
		}
	}
	if seen[id] {
		return fmt.Errorf("record %v delivered twice", id)
	}
	seen[id] = true
	return nil
}

// TestDeviceMapFailOpen: a device map that cannot be made (no device
// memory, over GPUPROBE_DEVICE_MAP_LIMIT) leaves its global 0, is traced
// once and counted, and the module still loads patched; one whose copies
// start failing (a device fault) stops being mirrored, and the app runs to
// its end.
func TestDeviceMapFailOpen(t *testing.T) {
	tests := []struct {
		name          string
		env           []string
		maps          string // the app's "arr=… ring=…"
		unbound       int
		stopped, thrd bool
	}{
		{"no memory", []string{"MOCK_FAIL_ALLOC=1"}, "arr=0 ring=0", 2, false, false},
		// The array's region is 4096 bytes, the ring's 8192.
		{"limit", []string{"GPUPROBE_DEVICE_MAP_LIMIT=4096"}, "arr=1 ring=0", 1, false, true},
		{"copy fails", []string{"MOCK_FAIL_ASYNC_AFTER=2"}, "arr=1 ring=1", 0, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := startDevmapAgent(t, 2000)
			stdout, stderr := devmapApp(t, a, tc.env, nil, "array", fmt.Sprint(devmapKeys), "100")
			for _, want := range []string{"app: devmap patched=1\n", "app: devmap " + tc.maps + "\n",
				fmt.Sprintf("app: devmap mirror-thread=%d done\n", map[bool]int{false: 0, true: 1}[tc.thrd])} {
				if !strings.Contains(stdout, want) {
					t.Errorf("stdout lacks %q:\n%s\nstderr:\n%s", want, stdout, stderr)
				}
			}
			if n := strings.Count(stderr, "cannot be a device map"); n != tc.unbound {
				t.Errorf("%d refused device maps traced, want %d; stderr:\n%s", n, tc.unbound, stderr)
			}
			if want := fmt.Sprintf("unbound_device_maps=%d ", tc.unbound); !strings.Contains(stderr, want) {
				t.Errorf("exit summary lacks %q; stderr:\n%s", want, stderr)
			}
			if got := strings.Contains(stderr, "while mirroring: no longer mirrored"); got != tc.stopped {
				t.Errorf("a map stopped: %v, want %v; stderr:\n%s", got, tc.stopped, stderr)
			}
		})
	}
}

// TestDeviceMapCapture: device maps must not break an application's
// stream capture. The app loads the patched module (binding both maps)
// and launches inside a global-mode capture, then stays through many 1 ms
// mirror periods before ending it; the MOCK driver, like the real one,
// invalidates the capture when another thread not in relaxed mode makes a
// potentially unsafe call (an allocation, a copy, a stream
// synchronisation, a context switch) while it is open.
func TestDeviceMapCapture(t *testing.T) {
	a := startDevmapAgent(t, 1000)
	stdout, stderr := devmapApp(t, a, nil, nil, "capture", "50")
	for _, want := range []string{"app: devmap patched=1\n", "app: devmap arr=1 ring=1\n",
		"app: devmap capture ok\n", "app: devmap mirror-thread=1 done\n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s\nstderr:\n%s", want, stdout, stderr)
		}
	}
	if strings.Contains(stderr, "capture invalidated") {
		t.Errorf("the shim made an unsafe call during the capture; stderr:\n%s", stderr)
	}
	if !strings.Contains(stderr, "device_maps=2 unbound_device_maps=0 stopped_device_maps=0 ") {
		t.Errorf("exit summary: want 2 device maps, none unbound or stopped; stderr:\n%s", stderr)
	}
}

// TestDeviceMapContextRelease: an application that releases its context
// before exit takes the device copies with it, so the shim runs a final
// pass before the release, bounded, and forgets the maps only if the
// context died. "destroyed": records made just before a release that
// destroys the primary context (1 s period: no regular pass in between)
// all arrive, and the exit pass leaves the dead maps alone. "still
// referenced": a release that leaves the context alive keeps the maps
// mirrored (records made after it arrive while the app runs).
func TestDeviceMapContextRelease(t *testing.T) {
	// Both rings hold 64 records: at most 64 in all.
	tests := []struct {
		name, mode string
		periodUS   uint64
		n          int
		how        string // releases, or reset, destroy
		sleepMS    int
	}{
		{"destroyed", "dlsym", 1000000, 60, "2", 0},
		{"destroyed cudart", "cudart", 1000000, 60, "2", 0},
		{"reset", "dlsym", 1000000, 60, "reset", 0},
		{"cuCtxDestroy", "dlsym", 1000000, 60, "destroy", 0},
		{"still referenced", "dlsym", 5000, 30, "1", 1000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := tc.n
			a := startDevmapAgent(t, tc.periodUS)
			c := a.ring.NewConsumer(shm.ConsumerOptions{})
			seen := map[devmapRec]bool{}
			var bad []string
			read := func() {
				c.Read(0, func(r shm.Record) {
					if err := checkDevmapRec(r, seen); err != nil && len(bad) < 10 {
						bad = append(bad, err.Error())
					}
				})
			}
			var during time.Duration = -1
			stdout, stderr := devmapAppMode(t, a, tc.mode, nil, func(line string) {
				if !strings.HasPrefix(line, "app: devmap produced-after=") {
					return
				}
				start := time.Now()
				for time.Since(start) < 500*time.Millisecond {
					if read(); len(seen) == 2*n {
						during = time.Since(start)
						return
					}
					time.Sleep(time.Millisecond)
				}
			}, "release", fmt.Sprint(n), tc.how, fmt.Sprint(tc.sleepMS))
			read()
			alive := tc.how == "1"
			want := n
			if alive {
				want = 2 * n
			}
			destroyed := strings.Contains(stderr, "mock: context destroyed")
			if destroyed == alive {
				t.Fatalf("context destroyed: %v, want %v; stderr:\n%s", destroyed, !alive, stderr)
			}
			if gone := strings.Count(stderr, "was released or destroyed after a final pass"); gone != map[bool]int{false: 2, true: 0}[alive] {
				t.Errorf("%d maps forgotten after a final pass, want %d; stderr:\n%s", gone, map[bool]int{false: 2, true: 0}[alive], stderr)
			}
			if len(bad) > 0 {
				t.Errorf("bad records: %v", bad)
			}
			if len(seen) != want || a.ring.Stats().Dropped != 0 {
				t.Errorf("delivered %d records, want %d (dropped %d)\nstdout:\n%s\nstderr:\n%s", len(seen), want,
					a.ring.Stats().Dropped, stdout, stderr)
			}
			if alive && (during < 0 || during > 200*time.Millisecond) {
				t.Errorf("records made after a release that kept the context arrived after %v, want within 200 ms (-1: not while the app ran)", during)
			}
			if !strings.Contains(stderr, "device_maps=2 unbound_device_maps=0 stopped_device_maps=0 ") {
				t.Errorf("exit summary: want 2 device maps, none unbound or stopped; stderr:\n%s", stderr)
			}
		})
	}
}
