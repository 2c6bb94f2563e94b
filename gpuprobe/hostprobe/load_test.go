package hostprobe

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"go.uber.org/goleak"
)

// childEnv makes the test binary a child that only calls Load (see
// TestLoadUnprivileged).
const childEnv = "GPUPROBE_HOSTPROBE_LOAD_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		_, err := Load(Options{})
		fmt.Printf("unsupported=%v\nerror=%v\n", errors.Is(err, ErrUnsupported), err)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestOptionsErrors(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{RingSize: 1000}, "Options.RingSize 1000 must be a power of two"},
		{Options{RingSize: 1024}, "Options.RingSize 1024 must be a power of two from the page size"},
		{Options{RingSize: 3 << 20}, "Options.RingSize 3145728"},
		{Options{RingSize: 2 << 30}, "to 1 GiB"},
		{Options{MaxPending: -1}, "Options.MaxPending -1 must be 1..16777216"},
		{Options{MaxPending: 1 << 25}, "Options.MaxPending 33554432"},
		{Options{MaxDelay: -time.Second}, "Options.MaxDelay -1s must be 0 (default) to 10s"},
		{Options{MaxDelay: time.Minute}, "Options.MaxDelay 1m0s"},
		{Options{MaxProcesses: -1}, "Options.MaxProcesses -1 must be 0 (default) to 4096"},
		{Options{MaxProcesses: 4097}, "Options.MaxProcesses 4097"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			p, err := Load(tc.opts)
			if err == nil {
				p.Close()
				t.Fatalf("Load(%+v) succeeded, want an error", tc.opts)
			}
			if !strings.Contains(err.Error(), tc.want) || errors.Is(err, ErrUnsupported) {
				t.Errorf("Load(%+v) = %v, want an error containing %q that is not ErrUnsupported", tc.opts, err, tc.want)
			}
		})
	}
}

func TestLoadedMaps(t *testing.T) {
	requireRoot(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, tc := range []struct {
		opts                  Options
		wantRing, wantPending uint32
	}{
		{Options{}, DefaultRingSize, DefaultMaxPending},
		{Options{RingSize: 1 << 16, MaxPending: 7}, 1 << 16, 7},
	} {
		p, err := Load(tc.opts)
		if err != nil {
			t.Fatalf("Load(%+v): %v", tc.opts, err)
		}
		ring, pending := p.coll.Maps[cudahostMapEvents], p.coll.Maps[cudahostMapEntries]
		// A call whose return never comes must not leak forever: the
		// pending calls live in an LRU hash.
		if pending.Type() != ebpf.LRUHash || pending.MaxEntries() != tc.wantPending {
			t.Errorf("pending calls: %s of %d, want LRUHash of %d", pending.Type(), pending.MaxEntries(), tc.wantPending)
		}
		if ring.Type() != ebpf.RingBuf || ring.MaxEntries() != tc.wantRing {
			t.Errorf("events: %s of %d bytes, want RingBuf of %d", ring.Type(), ring.MaxEntries(), tc.wantRing)
		}
		if err := p.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := p.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	}
}

// TestLoadUnprivileged runs Load as user nobody, without capabilities: it
// must fail with ErrUnsupported and say why.
func TestLoadUnprivileged(t *testing.T) {
	requireRoot(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "hostprobe.test")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child as nobody: %v\n%s", err, out)
	}
	for _, want := range []string{"unsupported=true", "not permitted", "CAP_BPF", "uid 65534"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("Load as nobody: output %q lacks %q", out, want)
		}
	}
}

func TestDropsCounted(t *testing.T) {
	requireRoot(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := buildStandins(t)
	p, err := Load(Options{RingSize: os.Getpagesize()}) // holds about 28 of one run's 55 events
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	defer p.Close()
	for _, f := range []string{s.libcuda, s.libcudart} {
		if _, err := p.Attach(f); err != nil {
			t.Fatalf("Attach: %v", err)
		}
	}
	runApp(t, s.app) // nothing reads meanwhile
	calls, names := drain(t, p)
	st := p.Stats()
	total := uint64(len(wantCalls) + len(wantNames))
	if st.Dropped == 0 || st.Read != uint64(len(calls)+len(names)) || st.Read+st.Dropped != total {
		t.Errorf("Stats %+v with %d records read: want drops > 0 and read + dropped = %d", st, len(calls)+len(names), total)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if after := p.Stats(); after.Dropped != st.Dropped {
		t.Errorf("Dropped after Close = %d, want the last count %d", after.Dropped, st.Dropped)
	}
}

func TestReadStops(t *testing.T) {
	requireRoot(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, tc := range []struct {
		name string
		stop func(p *Probes, cancel context.CancelFunc)
		want error
	}{
		{"ctx cancelled", func(_ *Probes, cancel context.CancelFunc) { cancel() }, context.Canceled},
		{"Close", func(p *Probes, _ context.CancelFunc) { p.Close() }, ErrClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Load(Options{})
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			defer p.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error)
			go func() {
				_, err := p.Read(ctx, nil) // nothing is attached: blocks until stopped
				done <- err
			}()
			tc.stop(p, cancel)
			if err := <-done; !errors.Is(err, tc.want) {
				t.Errorf("Read returned %v, want %v", err, tc.want)
			}
		})
	}
}
