package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// `gpuprobe counters` runs the per-node PM sampler (gpuprobe-counters) as
// its child and publishes what it samples into an agent session of the
// collector, like any other producer: a record.CounterSet in the names
// ring (read before the launch ring), then one record.CounterSample per
// sample line in the launch ring (or the names ring, when a sample is
// larger than a launch-ring slot). The collector applies them only from a
// trusted client (counters::trusted_uids, docs/counters.md).
func init() {
	Register(&Command{
		Name:    "counters",
		Summary: "sample a GPU's hardware counters (gpuprobe-counters) and publish them to the collector",
		Run:     runCounters,
	})
}

// countersUsage is the synopsis of gpuprobe counters.
const countersUsage = "usage: gpuprobe counters [--socket PATH] [--sampler PATH] [--dial-retry D] [-- SAMPLER-ARGS...]"

// countersOpts are the parsed flags of gpuprobe counters.
type countersOpts struct {
	socket    string
	sampler   string
	dialRetry time.Duration
	args      []string // passed to the sampler (-d DEV, -i NS, -m LIST, ...)
}

func parseCounters(args []string, stderr io.Writer) (*countersOpts, error) {
	fs := newUsageFlags("counters", countersUsage, stderr)
	o := &countersOpts{}
	fs.StringVar(&o.socket, "socket", "/run/gpuprobe/agent.sock", "agent socket of the collector")
	fs.StringVar(&o.sampler, "sampler", "", "the gpuprobe-counters binary (default: beside this one, else in PATH)")
	fs.DurationVar(&o.dialRetry, "dial-retry", 0, "keep dialing this long while the handshake fails (0: one try)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o.args = fs.Args()
	if o.sampler == "" {
		o.sampler = defaultSampler()
	}
	return o, nil
}

// defaultSampler is gpuprobe-counters beside this executable, else the
// name for PATH.
func defaultSampler() string {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "gpuprobe-counters")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "gpuprobe-counters"
}

func runCounters(args []string, stdout, stderr io.Writer) int {
	o, err := parseCounters(args, stderr)
	if err != nil {
		return usageStatus(err)
	}
	log := zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()),
		zapcore.AddSync(stderr), zap.InfoLevel))
	pub, closeSess, err := dialCounters(o)
	if err != nil {
		log.Error("gpuprobe counters: no session with the collector", zap.String("socket", o.socket), zap.Error(err))
		return 1
	}
	defer closeSess()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	st, code := superviseSampler(ctx, o, pub, log, stderr)
	fmt.Fprintf(stdout, "gpuprobe counters: %d samples published, %d dropped (ring full), %d bad lines, clock drift %d ns\n",
		st.published, st.dropped, st.bad, st.drift)
	return code
}

// dialCounters opens the agent session and returns the publisher of its
// rings.
func dialCounters(o *countersOpts) (*ringPublisher, func(), error) {
	hello := agentwire.Hello{PID: uint32(os.Getpid()), Name: "gpuprobe-counters"}
	sess, err := agent.Dial(o.socket, hello)
	for deadline := time.Now().Add(o.dialRetry); err != nil && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		sess, err = agent.Dial(o.socket, hello)
	}
	if err != nil {
		return nil, nil, err
	}
	pub, err := newRingPublisher(sess)
	if err != nil {
		sess.Close()
		return nil, nil, err
	}
	return pub, func() { sess.Close() }, nil
}

// superviseSampler runs the sampler, forwards its output, and returns the
// counts and the exit status: the sampler's own when it failed (its
// statuses say why: counters/src/gpc.h), 1 when the forwarding did.
func superviseSampler(ctx context.Context, o *countersOpts, pub publisher, log *zap.Logger, stderr io.Writer) (forwardStats, int) {
	cmd := exec.CommandContext(ctx, o.sampler, o.args...)
	cmd.Stderr = stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) } // it writes its end line
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		log.Error("gpuprobe counters: sampler output", zap.Error(err))
		return forwardStats{}, 1
	}
	if err := cmd.Start(); err != nil {
		log.Error("gpuprobe counters: cannot start the sampler", zap.String("sampler", o.sampler), zap.Error(err))
		return forwardStats{}, 1
	}
	st, ferr := forward(out, pub, log)
	if ferr != nil {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_, _ = io.Copy(io.Discard, out)
	}
	werr := cmd.Wait()
	var ee *exec.ExitError
	switch {
	case errors.As(werr, &ee) && ee.ExitCode() > 0:
		log.Error("gpuprobe counters: the sampler failed", zap.Int("status", ee.ExitCode()))
		return st, ee.ExitCode()
	case ferr != nil:
		log.Error("gpuprobe counters: forwarding stopped", zap.Error(ferr))
		return st, 1
	case werr != nil && ctx.Err() == nil:
		log.Error("gpuprobe counters: the sampler", zap.Error(werr))
		return st, 1
	}
	return st, 0
}

// publisher takes the records of one sampler run.
type publisher interface {
	set(rec []byte) shm.ProduceResult
	sample(rec []byte) shm.ProduceResult
}

// ringPublisher publishes into a session's rings: the set into the names
// ring, samples into the launch ring where they fit a slot.
type ringPublisher struct{ launches, names *shm.Ring }

func newRingPublisher(sess *agent.Session) (*ringPublisher, error) {
	lr, nr := sess.Region(agentwire.RoleLaunchRing, ""), sess.Region(agentwire.RoleNameRing, "")
	if lr == nil || nr == nil {
		return nil, errors.New("the collector handed over no launch ring or no names ring")
	}
	p := &ringPublisher{}
	var err error
	if p.launches, err = shm.NewRing(lr); err != nil {
		return nil, fmt.Errorf("launch ring: %w", err)
	}
	if p.names, err = shm.NewRing(nr); err != nil {
		return nil, fmt.Errorf("names ring: %w", err)
	}
	return p, nil
}

func (p *ringPublisher) set(rec []byte) shm.ProduceResult {
	return p.names.Produce(uint32(record.TypeCounterSet), rec)
}

func (p *ringPublisher) sample(rec []byte) shm.ProduceResult {
	if len(rec) <= p.launches.MaxPayload() {
		return p.launches.Produce(uint32(record.TypeCounterSample), rec)
	}
	return p.names.Produce(uint32(record.TypeCounterSample), rec)
}

// forwardStats count what forward did.
type forwardStats struct {
	published, dropped, oversize, bad uint64
	drift                             int64 // CUPTI clock drift over the run (end line − header), ns
}

// maxLoggedBadLines bounds the bad lines logged one by one; the rest are
// counted.
const maxLoggedBadLines = 10

// forward reads the sampler's lines from r and publishes their records.
// A bad line is counted and logged (the first maxLoggedBadLines), and
// skipped; a bad or missing header is an error, as nothing after it can
// be labelled.
func forward(r io.Reader, pub publisher, log *zap.Logger) (forwardStats, error) {
	var st forwardStats
	var p lineParser
	br := bufio.NewReaderSize(r, maxCounterLine+1)
	buf := make([]byte, 0, 512)
	for n := 1; ; n++ {
		b, err := readLine(br)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil && !errors.Is(err, errLineTooLong) {
			return st, fmt.Errorf("reading the sampler's output: %w", err)
		}
		var res parsed
		if err == nil {
			res, err = p.line(b)
		}
		if err != nil {
			if p.set == nil {
				return st, fmt.Errorf("line %d: %w", n, err)
			}
			if st.bad++; st.bad <= maxLoggedBadLines {
				log.Warn("gpuprobe counters: bad line from the sampler, skipped", zap.Int("line", n), zap.Error(err))
			}
			continue
		}
		switch {
		case res.set != nil:
			buf = res.set.Append(buf[:0])
			st.count(pub.set(buf))
		case res.sample != nil:
			buf = res.sample.Append(buf[:0])
			st.count(pub.sample(buf))
		}
	}
	if p.set == nil {
		return st, errors.New("the sampler wrote no header line")
	}
	st.drift = p.drift
	return st, nil
}

func (st *forwardStats) count(r shm.ProduceResult) {
	switch r {
	case shm.Published:
		st.published++
	case shm.Dropped:
		st.dropped++
	default:
		st.oversize++
	}
}

// errLineTooLong: a line longer than maxCounterLine, skipped to its end.
var errLineTooLong = errors.New("line too long")

// readLine returns the next line without its newline (the last one may
// lack it); a line over maxCounterLine is read to its end and reported
// as errLineTooLong.
func readLine(br *bufio.Reader) ([]byte, error) {
	b, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		for errors.Is(err, bufio.ErrBufferFull) {
			_, err = br.ReadSlice('\n')
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: over %d bytes", errLineTooLong, maxCounterLine)
	}
	if errors.Is(err, io.EOF) && len(b) > 0 {
		return b, nil
	}
	if err != nil {
		return nil, err
	}
	return b[:len(b)-1], nil
}
