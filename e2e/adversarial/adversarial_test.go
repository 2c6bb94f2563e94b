package adversarial

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/e2e"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
)

const (
	// allowedUID is the unprivileged uid agent::allowed_uids admits
	// (nobody); refusedUID is one it does not list.
	allowedUID = 65534
	refusedUID = 65533
	// fdSlack is the descriptors the collector may hold beyond its
	// baseline once a hostile client left (its HTTP servers' keep-alive
	// connections to the watchdog and the test come and go).
	fdSlack = 4
	// childExitRefused is the exit status of a child whose HELLO was
	// answered with ERROR code 2 (permission denied).
	childExitRefused = 3
	childEnv         = "GPUPROBE_ADVERSARIAL_CHILD"
	socketEnv        = "GPUPROBE_ADVERSARIAL_SOCKET"
)

// TestMain runs a hostile class as a child process when childEnv names one
// (the unprivileged uid test re-executes the test binary that way).
func TestMain(m *testing.M) {
	if name := os.Getenv(childEnv); name != "" {
		os.Exit(child(name, os.Getenv(socketEnv)))
	}
	os.Exit(m.Run())
}

func child(name, socket string) int {
	run, ok := ClassByName(name)
	if !ok {
		fmt.Fprintf(os.Stderr, "child: unknown class %q\n", name)
		return 2
	}
	// Connect first so that a refusal is told apart from the class's work.
	s, err := agent.DialTimeout(socket, hello("child"), 5*time.Second)
	if err != nil {
		fmt.Fprintf(os.Stderr, "child uid %d: %v\n", os.Getuid(), err)
		var pe *agentwire.ProtocolError
		if errors.As(err, &pe) && pe.Code == agentwire.CodePermissionDenied {
			return childExitRefused
		}
		return 1
	}
	_ = s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), Duration)
	defer cancel()
	if err := run(ctx, socket); err != nil {
		fmt.Fprintf(os.Stderr, "child %s: %v\n", name, err)
		return 1
	}
	return 0
}

// suite holds the binaries; every class gets a fresh collector, so that
// what one class did (memory it left, a crash) is not blamed on the next.
type suite struct {
	otelcol, harness string
}

// start starts a collector for t and terminates it when t ends, checking
// the watchdog's findings and the SIGTERM time.
func (s *suite) start(t *testing.T) *Collector {
	t.Helper()
	// Root is listed too: with a list, the agent admits only the listed
	// uids, and the suite's own clients run as root.
	col, err := StartCollector(t.Context(), s.otelcol, []int{0, allowedUID})
	if err != nil {
		t.Fatalf("starting the collector: %v", err)
	}
	t.Cleanup(func() { s.finish(t, col) })
	return col
}

// finish terminates col and reports what broke a bound.
func (s *suite) finish(t *testing.T, col *Collector) {
	if col.finished {
		return
	}
	col.finished = true
	alive := col.Alive()
	d, err := col.Terminate()
	for _, v := range col.Violations() {
		t.Errorf("watchdog: %s", v)
	}
	if err != nil {
		t.Error(err)
	}
	if alive && d > MaxShutdown {
		t.Errorf("SIGTERM took %s to end the collector, bound %s", d.Round(time.Millisecond), MaxShutdown)
	}
	t.Logf("peak VmRSS %d MiB (bound %d MiB); SIGTERM ended it in %s", col.PeakRSS()>>20, MaxRSS>>20, d.Round(time.Millisecond))
	if t.Failed() {
		t.Logf("---- collector logs (tail) ----\n%s", tail(col.Proc.Logs(), 3000))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// TestAdversarial runs the hostile classes of the package comment against
// the real collector. Every assertion is a failure, never a skip; the
// suite as a whole skips under -short and for non-root users.
func TestAdversarial(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short: the suite builds the collector with ocb and runs it for about 2 minutes")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipped: the adversarial suite runs as root (the collector's model is a root daemon, and the unprivileged class setuids a child)")
	}
	start := time.Now()
	s := &suite{otelcol: find(t, e2e.ToolOtelcolLean), harness: find(t, e2e.ToolHarness)}
	classes := append(Classes[:len(Classes):len(Classes)], ClassInfo{"all", All, Duration})
	for _, c := range classes {
		t.Run(c.Name, func(t *testing.T) { s.runClass(t, c) })
	}
	t.Run("unprivileged", s.unprivileged)
	t.Run("self-metrics", s.selfMetrics)
	t.Run("sigterm", s.sigterm)
	t.Run("config", s.testConfigRefused)
	t.Run("program", s.testProgramRefused)
	t.Logf("suite took %s", time.Since(start).Round(time.Second))
}

// accountWait is how long the honest client's records may take to show
// in the exporter after it stops. With 5 s, two classes once failed here
// (1 run in 9 on 2 shared cores; the cause was not found); a record that
// never arrives still fails.
const accountWait = 15 * time.Second

// runClass runs one hostile class for its time beside the honest client
// and checks the bounds.
func (s *suite) runClass(t *testing.T, c ClassInfo) {
	name, run := c.Name, c.Run
	col := s.start(t)
	settled(t, col)
	base, err := Fds(col.Proc.Pid())
	if err != nil {
		t.Fatal(err)
	}
	hctx, cancel := context.WithTimeout(t.Context(), c.Time)
	defer cancel()
	hostile := make(chan error, 1)
	go func() { hostile <- run(hctx, col.Socket) }()
	pause(hctx, 500*time.Millisecond)
	honest, herr := RunHonest(t.Context(), s.harness, col.Socket, "honest_"+name, 120, 30)
	<-hctx.Done()
	select {
	case err := <-hostile:
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("%s: the hostile client did not stop 10s after its time", name)
	}
	if name == "devices" {
		if n := DevicesReached.Load(); n < DistinctDevices {
			t.Errorf("devices: the collector read launches of only %d of %d device numbers in %s", n, DistinctDevices, c.Time)
		}
	}
	if herr != nil {
		t.Errorf("honest client beside %s: %v", name, herr)
	} else if err := honest.Accounted(t.Context(), col.Exporter, accountWait); err != nil {
		t.Errorf("honest client beside %s not accounted: %v", name, err)
	}
	s.checkFds(t, col, base)
}

// settled waits until col's self-metrics show the receiver's records
// counter: its poll loop runs, and the collector holds what it holds at
// rest (the baseline of its descriptors and counters).
func settled(t *testing.T, col *Collector) {
	t.Helper()
	err := e2e.Eventually(t.Context(), 10*time.Second, 50*time.Millisecond, func(ctx context.Context) error {
		fams, err := e2e.Scrape(ctx, col.Self)
		if err != nil {
			return err
		}
		if _, ok := Counter(fams, "otelcol_gpuprobe_receiver_records_read", nil); !ok {
			return fmt.Errorf("no otelcol_gpuprobe_receiver_records_read among %v", e2e.FamilyNames(fams))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the collector's poll loop: %v", err)
	}
}

// checkFds waits FdSettle for the collector's descriptors to return to
// base (+ fdSlack).
func (s *suite) checkFds(t *testing.T, col *Collector, base int) {
	t.Helper()
	if !col.Alive() {
		return // the watchdog reports it
	}
	var last int
	err := e2e.Eventually(t.Context(), FdSettle, 100*time.Millisecond, func(context.Context) error {
		n, err := Fds(col.Proc.Pid())
		if err != nil {
			return err
		}
		if last = n; n > base+fdSlack {
			return fmt.Errorf("%d descriptors, baseline %d", n, base)
		}
		return nil
	})
	if err != nil {
		t.Errorf("descriptors did not return to the baseline within %s after the client left: %v", FdSettle, err)
	}
	t.Logf("descriptors: baseline %d, after %d", base, last)
}

// unprivileged runs the lying-ring class as a uid that agent::allowed_uids
// lists (it must be admitted, and the collector must hold its bounds) and
// as one it does not (it must be refused with ERROR code 2).
func (s *suite) unprivileged(t *testing.T) {
	col := s.start(t)
	bin := childBinary(t)
	base, err := Fds(col.Proc.Pid())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		uid  uint32
		want int
	}{{allowedUID, 0}, {refusedUID, childExitRefused}} {
		cmd := exec.CommandContext(t.Context(), bin, "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=ring", socketEnv+"="+col.Socket)
		// Group root so that the 0660 root-owned socket can be opened:
		// admission is then the collector's uid/gid check alone.
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: tc.uid, Gid: 0, Groups: []uint32{}}}
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		got := cmd.ProcessState.ExitCode()
		if got != tc.want {
			t.Errorf("uid %d: exit %d (%v), want %d; output:\n%s", tc.uid, got, err, tc.want, out.String())
		}
	}
	s.checkFds(t, col, base)
}

// childBinary copies the test binary where an unprivileged uid can run it.
func childBinary(t *testing.T) string {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "gpuprobe-adversarial-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "adversarial.test")
	if err := copyFile(self, dst); err != nil {
		t.Fatal(err)
	}
	return dst
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy: %w", err)
	}
	return out.Close()
}

// selfMetrics runs the honest client alone and checks the collector's
// self-metrics: records read + dropped grew by what it produced.
func (s *suite) selfMetrics(t *testing.T) {
	col := s.start(t)
	counts := func(ctx context.Context) (read, dropped float64, err error) {
		fams, err := e2e.Scrape(ctx, col.Self)
		if err != nil {
			return 0, 0, err
		}
		read, ok := Counter(fams, "otelcol_gpuprobe_receiver_records_read", nil)
		if !ok {
			return 0, 0, fmt.Errorf("no otelcol_gpuprobe_receiver_records_read among %v", e2e.FamilyNames(fams))
		}
		dropped, _ = Counter(fams, "otelcol_gpuprobe_receiver_records_dropped", nil)
		return read, dropped, nil
	}
	settled(t, col)
	r0, d0, err := counts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	h, err := RunHonest(t.Context(), s.harness, col.Socket, "honest_alone", 200, 200)
	if err != nil {
		t.Fatal(err)
	}
	err = e2e.Eventually(t.Context(), 5*time.Second, 250*time.Millisecond, func(ctx context.Context) error {
		r, d, err := counts(ctx)
		if err != nil {
			return err
		}
		if got, want := (r-r0)+(d-d0), float64(h.Published+h.Dropped); got != want {
			return fmt.Errorf("records read %v + dropped %v since the start = %v, want the %d published + %d dropped",
				r-r0, d-d0, got, h.Published, h.Dropped)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	if err := h.Accounted(t.Context(), col.Exporter, accountWait); err != nil {
		t.Error(err)
	}
}

// sigterm ends the collector with SIGTERM while every hostile class is
// connected; it must exit within MaxShutdown (finish checks).
func (s *suite) sigterm(t *testing.T) {
	col := s.start(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = All(ctx, col.Socket)
	}()
	time.Sleep(2 * time.Second)
	s.finish(t, col)
	cancel()
	<-done
}

func find(t *testing.T, tool string) string {
	t.Helper()
	p, err := e2e.Find(t.Context(), tool, 20*time.Minute)
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return p
}
