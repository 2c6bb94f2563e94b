package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/patcher"
	"github.com/gpuprobe/gpuprobe/gpuprobe/probes"
	"github.com/gpuprobe/gpuprobe/internal/cli"
	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
)

func init() {
	Register(&Command{
		Name:    "agent-dump",
		Summary: "(testing) serve the agent socket without a collector and print what the shim records",
		Run:     runAgentDump,
	})
}

// dumpSession is one connected client and what it wrote.
type dumpSession struct {
	peer     *agent.Peer
	ring     *shm.Ring
	cons     *shm.Consumer
	names    *shm.Ring // the names ring (agent role 4), read before ring
	ncons    *shm.Consumer
	gone     bool // disconnected; drained once more, then finished
	finished bool

	kernels                            map[uint64]string // function handle → kernel name
	launches, nameRecs, syncs, memcpys int
	errors, unnamed                    int
	byKernel                           map[string]int
	apis                               map[record.LaunchAPI]int
	memcpyBytes                        uint64
	firstErr                           error
	acct                               *accounting // launches and device records, for the checks
	patch                              *dumpPatch  // --patch mode
}

// dumper is the state of agent-dump.
type dumper struct {
	out      io.Writer
	verbose  bool
	slotSize uint32
	slots    uint32
	patcher  *patcher.Patcher // --patch: answer PATCH with the program set
	progs    *dumpProgs       // --patch: the program set and its maps
	checks   checkOptions

	mu       sync.Mutex
	sessions []*dumpSession
}

func (d *dumper) connect(p *agent.Peer) ([]agentwire.Offer, error) {
	ring, err := shm.CreateRing(d.slotSize, d.slots)
	if err != nil {
		return nil, fmt.Errorf("creating a %d×%d-byte ring: %w", d.slots, d.slotSize, err)
	}
	// The names ring, as the receiver's (receiver.NameRingSlotSize and
	// NameRingSlots): kernel names arrive whole whatever --slot-size is.
	names, err := shm.CreateRing(shm.SlotHeaderSize+record.MaxKernelNameSize, 256)
	if err != nil {
		ring.Close()
		return nil, fmt.Errorf("creating the names ring: %w", err)
	}
	s := &dumpSession{peer: p, ring: ring, cons: ring.NewConsumer(shm.ConsumerOptions{}),
		names: names, ncons: names.NewConsumer(shm.ConsumerOptions{}),
		kernels: map[uint64]string{}, byKernel: map[string]int{}, apis: map[record.LaunchAPI]int{}, acct: newAccounting()}
	offers := []agentwire.Offer{{Role: agentwire.RoleLaunchRing, Name: "launches", Region: ring.Region()},
		{Role: agentwire.RoleNameRing, Name: "names", Region: names.Region()}}
	if d.patcher != nil {
		o, err := d.patchOffers(s, uint32(len(offers)))
		if err != nil {
			ring.Close()
			names.Close()
			if s.patch != nil {
				s.patch.close()
			}
			return nil, err
		}
		offers = append(offers, o...)
	}
	d.mu.Lock()
	d.sessions = append(d.sessions, s)
	d.mu.Unlock()
	fmt.Fprintf(d.out, "agent-dump: session %d: pid %d (%s) connected\n", p.Session, p.PID, p.Hello.Name)
	return offers, nil
}

func (d *dumper) disconnect(p *agent.Peer) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.sessions {
		if s.peer == p {
			s.gone = true
		}
	}
}

// decode accounts one record of session s.
func (d *dumper) decode(s *dumpSession, r shm.Record) {
	fail := func(err error) {
		s.errors++
		if s.firstErr == nil {
			s.firstErr = fmt.Errorf("ticket %d: %w", r.Ticket, err)
		}
	}
	p, err := record.ParsePrefix(r.Payload)
	if err != nil {
		fail(err)
		return
	}
	switch p.Type {
	case record.TypeLaunch:
		var l record.Launch
		if err := l.Decode(r.Payload); err != nil {
			fail(err)
			return
		}
		s.launches++
		name, ok := s.kernels[l.Function]
		if !ok {
			name = fmt.Sprintf("unnamed %#x", l.Function)
			s.unnamed++
		}
		s.byKernel[name]++
		s.apis[l.API]++
		s.acct.launch(name, &l)
		if d.verbose {
			fmt.Fprintf(d.out, "launch pid=%d tid=%d id=%d %s grid=%dx%dx%d block=%dx%dx%d shm=%d stream=%#x dev=%d api=%v result=%d call=%dns\n",
				l.PID, l.TID, l.LaunchID, name, l.Grid[0], l.Grid[1], l.Grid[2], l.Block[0], l.Block[1], l.Block[2],
				l.SharedMem, l.Stream, l.Device, l.API, l.Result, l.ReturnNS-l.EnqueueNS)
		}
	case record.TypeKernelName:
		var k record.KernelName
		if err := k.Decode(r.Payload); err != nil {
			fail(err)
			return
		}
		s.kernels[k.Function] = k.Name
		s.nameRecs++
		if d.verbose {
			fmt.Fprintf(d.out, "kernel_name pid=%d function=%#x module=%#x truncated=%v %s\n", k.PID, k.Function, k.Module, k.Truncated, k.Name)
		}
	case record.TypeSync:
		var y record.Sync
		if err := y.Decode(r.Payload); err != nil {
			fail(err)
			return
		}
		s.syncs++
		if d.verbose {
			fmt.Fprintf(d.out, "sync pid=%d %v stream=%#x %dns\n", y.PID, y.Kind, y.Stream, y.EndNS-y.StartNS)
		}
	case record.TypeMemcpy:
		var m record.Memcpy
		if err := m.Decode(r.Payload); err != nil {
			fail(err)
			return
		}
		s.memcpys++
		s.memcpyBytes += m.Bytes
		if d.verbose {
			fmt.Fprintf(d.out, "memcpy pid=%d %v %d bytes stream=%#x %dns\n", m.PID, m.Kind, m.Bytes, m.Stream, m.EndNS-m.StartNS)
		}
	default:
		if d.verbose {
			fmt.Fprintf(d.out, "record %v (%d bytes)\n", p.Type, p.Size)
		}
	}
}

// poll drains every ring once and returns how many sessions have finished.
func (d *dumper) poll() int {
	d.mu.Lock()
	ss := append([]*dumpSession(nil), d.sessions...)
	d.mu.Unlock()
	finished := 0
	for _, s := range ss {
		if s.finished {
			finished++
			continue
		}
		d.mu.Lock()
		gone := s.gone
		d.mu.Unlock()
		// The launch ring up to its head before the names ring is read
		// (as the receiver: receiver/source.go, readSource), so that every
		// launch read has its name read first; all of it once the client
		// is gone.
		end := s.ring.Stats().Head
		s.ncons.Read(0, func(r shm.Record) { d.decode(s, r) })
		if n := end - s.cons.Position(); gone || n > 1<<30 {
			s.cons.Read(0, func(r shm.Record) { d.decode(s, r) })
		} else if n > 0 {
			s.cons.Read(int(n), func(r shm.Record) { d.decode(s, r) })
		}
		d.patchPoll(s)
		if gone { // the client is gone and its ring was drained after that
			s.finished = true
			finished++
		}
	}
	return finished
}

// summary prints one line per session, one per kernel, and a total line.
func (d *dumper) summary() (total int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var launches, names, syncs, memcpys, errs int
	var dropped uint64
	for _, s := range d.sessions {
		st, nst := s.ring.Stats(), s.names.Stats()
		st.Dropped, st.Oversize = st.Dropped+nst.Dropped, st.Oversize+nst.Oversize
		fmt.Fprintf(d.out, "agent-dump: session %d pid %d (%s): launches=%d names=%d syncs=%d memcpys=%d (%d bytes) unnamed=%d dropped=%d errors=%d apis=%v\n",
			s.peer.Session, s.peer.PID, s.peer.Hello.Name, s.launches, s.nameRecs, s.syncs, s.memcpys, s.memcpyBytes,
			s.unnamed, st.Dropped+st.Oversize, s.errors, s.apis)
		if s.firstErr != nil {
			fmt.Fprintf(d.out, "agent-dump: session %d: first error: %v\n", s.peer.Session, s.firstErr)
		}
		d.patchSummary(s)
		ks := make([]string, 0, len(s.byKernel))
		for k := range s.byKernel {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		for _, k := range ks {
			fmt.Fprintf(d.out, "agent-dump:   %8d  %s\n", s.byKernel[k], k)
		}
		launches += s.launches
		names += s.nameRecs
		syncs += s.syncs
		memcpys += s.memcpys
		errs += s.errors
		dropped += st.Dropped + st.Oversize
	}
	fmt.Fprintf(d.out, "agent-dump: total clients=%d launches=%d names=%d syncs=%d memcpys=%d dropped=%d errors=%d\n",
		len(d.sessions), launches, names, syncs, memcpys, dropped, errs)
	return launches
}

func (d *dumper) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.sessions {
		s.ring.Close()
		s.names.Close()
		if s.patch != nil {
			s.patch.close()
		}
	}
}

// dumpStop is closed by tests to stop agent-dump (signals do it otherwise).
var dumpStop = make(chan struct{})

func runAgentDump(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("agent-dump", stderr)
	socket := fs.String("socket", config.DefaultSocket, "socket path to serve")
	slots := fs.Uint("slots", 65536, "slots of each client's launch ring (a power of two)")
	slotSize := fs.Uint("slot-size", 512, "bytes of one launch ring slot (multiple of 8; kernel names go whole to a names ring)")
	exitAfter := fs.Int("exit-after", 0, "exit once this many clients have come and gone (0: run until SIGINT/SIGTERM)")
	timeout := fs.Duration("timeout", 0, "exit after this long in any case (0: no limit)")
	verbose := fs.Bool("v", false, "print every record")
	patch := fs.Bool("patch", false, "answer PATCH with the program set (--probes, --programs) and check what the probes record (no collector needed)")
	builtins := fs.String("probes", probes.KernelPhases, "--patch: comma-separated built-in probe sets (\"\" for none)")
	objects := fs.String("programs", "", "--patch: comma-separated eBPF objects whose GPU programs are injected too (before the built-in ones)")
	target := fs.String("target", "", "--patch: retarget the objects' GPU programs to this kernel name or pattern (\"*\": every kernel)")
	lanes := fs.Uint("lanes", 1<<20, "--patch: lanes (threads of one launch) of per-thread arrays")
	ringSlots := fs.Uint("ring-slots", 1<<18, "--patch: slots of each program ring (a power of two)")
	expect := fs.String("expect", "", "application output whose `launches NAME COUNT` lines the recorded launches must match")
	racy := fs.Bool("racy-thread-counts", false, "per-thread counters may lose updates of concurrent launches: check each is between 1 and its launches")
	summaryPath := fs.String("summary", "", "write a JSON summary (per-kernel and per-launch counts, checks) to this file")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "gpuprobe-harness agent-dump: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *slots > 1<<24 || *slotSize > shm.MaxSlotSize {
		fmt.Fprintf(stderr, "gpuprobe-harness agent-dump: --slots %d or --slot-size %d too large\n", *slots, *slotSize)
		return 2
	}
	if *ringSlots > 1<<24 || *lanes > 1<<28 || *lanes == 0 {
		fmt.Fprintf(stderr, "gpuprobe-harness agent-dump: --ring-slots %d (at most 1<<24) or --lanes %d (1..1<<28) out of range\n", *ringSlots, *lanes)
		return 2
	}
	stdout = &lockedWriter{w: stdout} // the server's goroutines print too
	d := &dumper{out: stdout, verbose: *verbose, slots: uint32(*slots), slotSize: uint32(*slotSize),
		checks: checkOptions{racy: *racy, summary: *summaryPath}}
	if *expect != "" {
		e, err := readExpect(*expect)
		if err != nil {
			fmt.Fprintf(stderr, "gpuprobe-harness agent-dump: %v\n", err)
			return 2
		}
		d.checks.expect = e
	}
	cb := agent.Callbacks{Connect: d.connect, Disconnect: d.disconnect}
	if *patch {
		progs, err := loadDumpProgs(cli.SplitList(*builtins), cli.SplitList(*objects), *target, uint32(*lanes), uint32(*ringSlots))
		if err != nil {
			fmt.Fprintf(stderr, "gpuprobe-harness agent-dump: %v\n", err)
			return 2
		}
		p, err := progs.newPatcher()
		if err != nil {
			fmt.Fprintf(stderr, "gpuprobe-harness agent-dump: %v\n", err)
			return 1
		}
		d.progs, d.patcher, cb.Patch = progs, p, d.onPatch
	} else if *builtins != probes.KernelPhases || *objects != "" || *target != "" {
		fmt.Fprintf(stderr, "gpuprobe-harness agent-dump: --probes, --programs and --target need --patch\n")
		return 2
	}
	if err := os.MkdirAll(filepath.Dir(*socket), 0o755); err != nil {
		fmt.Fprintf(stderr, "gpuprobe-harness agent-dump: %v\n", err)
		return 1
	}
	srv, err := agent.Listen(agent.Options{Path: *socket}, cb)
	if err != nil {
		fmt.Fprintf(stderr, "gpuprobe-harness agent-dump: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "agent-dump: listening on %s\n", *socket)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	var deadline <-chan time.Time
	if *timeout > 0 {
		deadline = time.After(*timeout)
	}
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
loop:
	for {
		select {
		case <-sig:
			break loop
		case <-dumpStop:
			break loop
		case <-deadline:
			fmt.Fprintf(stdout, "agent-dump: --timeout %v reached\n", *timeout)
			break loop
		case <-tick.C:
			if n := d.poll(); *exitAfter > 0 && n >= *exitAfter {
				break loop
			}
		}
	}
	srv.Close()
	d.poll()
	d.summary()
	failed, err := d.report()
	d.close()
	if err != nil {
		fmt.Fprintf(stderr, "gpuprobe-harness agent-dump: %v\n", err)
		return 1
	}
	if failed > 0 {
		fmt.Fprintf(stdout, "agent-dump: %d checks failed\n", failed)
		return 3
	}
	return 0
}

// lockedWriter serialises the writes of several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
