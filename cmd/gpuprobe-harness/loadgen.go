package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
	"golang.org/x/sys/unix"
)

func init() {
	Register(&Command{
		Name:    "loadgen",
		Summary: "synthetic load generator: write launch records into a gpuprobe receiver's ring (tests, benchmarks)",
		Run:     runLoadgen,
	})
}

// synthGPUOffset is the synthetic %globaltimer minus CLOCK_MONOTONIC.
const synthGPUOffset = 1_000_000_000_000

// loadgenOpts are the parsed flags of loadgen.
type loadgenOpts struct {
	socket      string
	launches    int
	rate        float64
	kernels     []string
	grid, block [3]uint32
	maxWarps    int
	memcpyEvery int
	noComplete  bool          // no completion records: launches stay pending (shutdown flush tests)
	dialRetry   time.Duration // keep dialing this long while the handshake fails
}

func parseDim3(flagName, s string) ([3]uint32, error) {
	var d [3]uint32
	parts := strings.Split(s, ",")
	if len(parts) != 3 {
		return d, fmt.Errorf("--%s: want X,Y,Z, got %q", flagName, s)
	}
	for i, p := range parts {
		v, err := strconv.ParseUint(strings.TrimSpace(p), 10, 32)
		if err != nil || v == 0 {
			return d, fmt.Errorf("--%s: component %d must be a positive integer, got %q", flagName, i, p)
		}
		d[i] = uint32(v)
	}
	return d, nil
}

func parseLoadgen(args []string, stderr io.Writer) (*loadgenOpts, error) {
	fs := newFlags("loadgen", stderr)
	o := &loadgenOpts{}
	fs.StringVar(&o.socket, "socket", "/run/gpuprobe/agent.sock", "agent socket of the receiver")
	fs.IntVar(&o.launches, "launches", 1000, "number of launches to write")
	fs.Float64Var(&o.rate, "rate", 0, "launches per second (0: as fast as possible)")
	kernels := fs.String("kernels", "_Z6vecAddPfS_S_i", "comma-separated (mangled) kernel names, used round-robin")
	grid := fs.String("grid", "1,1,1", "grid dimensions X,Y,Z")
	block := fs.String("block", "128,1,1", "block dimensions X,Y,Z")
	fs.IntVar(&o.maxWarps, "max-warps", 64, "most warp records written per launch (all warps if the launch has fewer)")
	fs.BoolVar(&o.noComplete, "no-completion", false, "write no completion records (as the shim): launches wait for their warps or limits::launch_timeout")
	fs.IntVar(&o.memcpyEvery, "memcpy-every", 10, "write a memcpy record every N launches (0: never)")
	fs.DurationVar(&o.dialRetry, "dial-retry", 0, "keep dialing this long while the handshake fails (0: one try)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	var err error
	if o.grid, err = parseDim3("grid", *grid); err != nil {
		return nil, err
	}
	if o.block, err = parseDim3("block", *block); err != nil {
		return nil, err
	}
	for _, k := range strings.Split(*kernels, ",") {
		if k = strings.TrimSpace(k); k != "" {
			o.kernels = append(o.kernels, k)
		}
	}
	switch {
	case len(o.kernels) == 0:
		return nil, fmt.Errorf("--kernels: need at least one name")
	case o.launches < 0:
		return nil, fmt.Errorf("--launches: must be ≥ 0, got %d", o.launches)
	case o.rate < 0:
		return nil, fmt.Errorf("--rate: must be ≥ 0, got %g", o.rate)
	case o.maxWarps < 0 || o.memcpyEvery < 0:
		return nil, fmt.Errorf("--max-warps and --memcpy-every must be ≥ 0")
	}
	return o, nil
}

func monoNS() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

func realNS() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_REALTIME, &ts)
	return uint64(ts.Nano())
}

// loadgenStats counts what the generator offered.
type loadgenStats struct{ published, dropped, oversize int }

func (s *loadgenStats) add(r shm.ProduceResult) {
	switch r {
	case shm.Published:
		s.published++
	case shm.Dropped:
		s.dropped++
	default:
		s.oversize++
	}
}

func runLoadgen(args []string, stdout, stderr io.Writer) int {
	o, err := parseLoadgen(args, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "gpuprobe-harness loadgen:", err)
		return 2
	}
	sess, err := agent.Dial(o.socket, agentwire.Hello{PID: uint32(os.Getpid()), Name: "gpuprobe-loadgen"})
	for deadline := time.Now().Add(o.dialRetry); err != nil && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		sess, err = agent.Dial(o.socket, agentwire.Hello{PID: uint32(os.Getpid()), Name: "gpuprobe-loadgen"})
	}
	if err != nil {
		fmt.Fprintln(stderr, "gpuprobe-harness loadgen:", err)
		return 1
	}
	defer sess.Close()
	region := sess.Region(agentwire.RoleLaunchRing, "")
	if region == nil {
		fmt.Fprintln(stderr, "gpuprobe-harness loadgen: the receiver handed over no launch ring")
		return 1
	}
	ring, err := shm.NewRing(region)
	if err != nil {
		fmt.Fprintln(stderr, "gpuprobe-harness loadgen: launch ring:", err)
		return 1
	}
	// Kernel names go to the names ring (role 4) whose slots hold any name;
	// without one they are cut to fit a launch-ring slot and flagged.
	names := ring
	if nr := sess.Region(roleNameRing, ""); nr != nil {
		if names, err = shm.NewRing(nr); err != nil {
			fmt.Fprintln(stderr, "gpuprobe-harness loadgen: names ring:", err)
			return 1
		}
	}
	st := generate(ring, names, o)
	fmt.Fprintf(stdout, "loadgen: %d launches, %d records published, %d dropped (ring full), %d oversize\n",
		o.launches, st.published, st.dropped, st.oversize)
	return 0
}

// generate writes the synthetic stream: a device and a calibration record,
// kernel names, then per launch a launch record, its warp records (as the
// GPU's exit probe writes them), a completion, and now and then a memcpy.
// The launches share one stream, so each one's warps start after the
// previous launch's last warp ended (a backlog when launches come faster
// than 20 µs apart), and its completion after its own last warp.
// roleNameRing is the agent role of the names ring (receiver.RoleNameRing;
// not imported, to keep the collector out of this binary).
const roleNameRing agentwire.Role = 4

func generate(ring, names *shm.Ring, o *loadgenOpts) loadgenStats {
	var st loadgenStats
	buf := make([]byte, 0, 4096)
	put := func(r interface{ Append([]byte) []byte }) {
		buf = r.Append(buf[:0])
		p, _ := record.ParsePrefix(buf)
		st.add(ring.Produce(uint32(p.Type), buf))
	}
	pid := uint32(os.Getpid())
	calibrate := func() {
		m := monoNS()
		put(&record.Calibration{MonoNS: m, RealtimeNS: realNS(), GPUNS: m + synthGPUOffset, Device: 0})
	}
	put(&record.Device{Device: 0, PID: pid, UUID: [16]byte{0x67, 0x70, 0x75, 0x70, 0x72, 0x6f, 0x62, 0x65}, SMCount: 132,
		ComputeCap: 90, Name: "synthetic (gpuprobe-harness loadgen)"})
	calibrate()
	for i, k := range o.kernels {
		buf = (&record.KernelName{Function: uint64(i + 1), PID: pid, Name: k}).AppendFit(buf[:0], names.MaxPayload())
		st.add(names.Produce(uint32(record.TypeKernelName), buf))
	}
	blocks := uint64(o.grid[0]) * uint64(o.grid[1]) * uint64(o.grid[2])
	warpsPerBlock := (uint64(o.block[0])*uint64(o.block[1])*uint64(o.block[2]) + 31) / 32
	warps := min(blocks*warpsPerBlock, uint64(o.maxWarps))
	start := time.Now()
	var prevEnd uint64 // the previous launch's last warp end: launches on one stream run one after another
	for n := range o.launches {
		if o.rate > 0 {
			due := start.Add(time.Duration(float64(n) / o.rate * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				time.Sleep(d)
			}
		}
		if n > 0 && n%1000 == 0 {
			calibrate()
		}
		id := uint64(n + 1)
		enq := monoNS()
		put(&record.Launch{LaunchID: id, PID: pid, TID: uint32(unix.Gettid()), EnqueueNS: enq, ReturnNS: enq + 3000,
			Stream: 0, Function: uint64(n%len(o.kernels) + 1), Device: 0, Grid: o.grid, Block: o.block})
		gpuStart := max(enq+synthGPUOffset+5000, prevEnd+2000)
		for w := range warps {
			s := gpuStart + w*10
			end := s + 20000 + w%7*100
			prevEnd = max(prevEnd, end)
			put(&record.Warp{LaunchID: id, Block: [3]uint32{uint32(w / warpsPerBlock), 0, 0}, Warp: uint32(w % warpsPerBlock),
				SMID: uint32(w % 132), ActiveMask: 0xffffffff, StartNS: s, MinExitNS: s + 15000, EndNS: end})
		}
		if !o.noComplete {
			complete := enq + 40000
			if prevEnd > synthGPUOffset {
				complete = max(complete, prevEnd-synthGPUOffset+1000) // after its last warp
			}
			put(&record.Completion{LaunchID: id, CompleteNS: complete, Device: 0, How: record.SeenByStreamSync})
		}
		if o.memcpyEvery > 0 && n%o.memcpyEvery == 0 {
			put(&record.Memcpy{Bytes: 1 << 20, StartNS: enq + 41000, EndNS: enq + 141000, PID: pid,
				TID: uint32(unix.Gettid()), Kind: record.MemcpyDeviceToHost})
		}
	}
	return st
}
