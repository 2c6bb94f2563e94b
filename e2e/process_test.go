package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// groupGone reports whether no process of group pgid is left.
func groupGone(pgid int) bool {
	return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}

func TestProcessStop(t *testing.T) {
	tests := []struct {
		name   string
		script string // prints "ready" once per shell that installed its traps
		ready  int
		grace  time.Duration
		maxDur time.Duration // Stop must return within this
	}{
		{"exits on SIGTERM", "echo ready; sleep 300", 1, 5 * time.Second, 4 * time.Second},
		{"ignores SIGTERM, killed after grace", `trap "" TERM; echo ready; sleep 300 & wait`, 1, 500 * time.Millisecond, 5 * time.Second},
		{"child ignoring SIGTERM is reaped with the group",
			`(trap "" TERM; echo ready; exec sleep 300) & trap "exit 0" TERM; echo ready; wait`, 2, 5 * time.Second, 4 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Start("sh", "/bin/sh", []string{"-c", tc.script}, t.TempDir(), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Stop(time.Second) })
			if err := Eventually(context.Background(), 15*time.Second, 10*time.Millisecond, func(context.Context) error {
				if n := strings.Count(p.Logs(), "ready"); n < tc.ready {
					return fmt.Errorf("%d of %d shells have installed their traps", n, tc.ready)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if err := p.Stop(tc.grace); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			if d := time.Since(start); d > tc.maxDur {
				t.Errorf("Stop took %s, want ≤ %s", d, tc.maxDur)
			}
			if exited, _ := p.Exited(); !exited {
				t.Error("process still running after Stop")
			}
			if err := Eventually(context.Background(), 15*time.Second, 20*time.Millisecond, func(context.Context) error {
				if !groupGone(p.Pid()) {
					return errors.New("process group still has members")
				}
				return nil
			}); err != nil {
				t.Error(err)
			}
			if err := p.Stop(tc.grace); err != nil {
				t.Errorf("second Stop: %v", err)
			}
		})
	}
}

func TestWaitReady(t *testing.T) {
	tests := []struct {
		name      string
		script    string
		readyAt   int // the check succeeds on this call (0: never)
		timeout   time.Duration
		wantErr   string
		maxDur    time.Duration
		wantInLog string
	}{
		{"ready after a few polls", "sleep 300", 3, 10 * time.Second, "", 5 * time.Second, ""},
		{"exits early: reported at once with its logs", "echo boom >&2; exit 3", 0, 30 * time.Second, "exited before it was ready", 5 * time.Second, "boom"},
		{"never ready: bounded by the timeout", "sleep 300", 0, 500 * time.Millisecond, "not ready after 500ms", 3 * time.Second, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Start("sh", "/bin/sh", []string{"-c", tc.script}, t.TempDir(), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Stop(time.Second) })
			calls := 0
			start := time.Now()
			err = p.WaitReady(context.Background(), tc.timeout, func(context.Context) error {
				calls++
				if tc.readyAt > 0 && calls >= tc.readyAt {
					return nil
				}
				return errors.New("not yet")
			})
			if d := time.Since(start); d > tc.maxDur {
				t.Errorf("WaitReady took %s, want ≤ %s", d, tc.maxDur)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("WaitReady: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("WaitReady error %v, want it to contain %q", err, tc.wantErr)
			}
			if tc.readyAt > 0 && calls != tc.readyAt {
				t.Errorf("check called %d times, want %d", calls, tc.readyAt)
			}
			if tc.wantInLog != "" {
				if err := Eventually(context.Background(), 15*time.Second, 20*time.Millisecond, func(context.Context) error {
					if !strings.Contains(p.Logs(), tc.wantInLog) {
						return errors.New("log line missing")
					}
					return nil
				}); err != nil {
					t.Errorf("logs %q: want %q in them: %v", p.Logs(), tc.wantInLog, err)
				}
			}
		})
	}
}

func TestTailBuffer(t *testing.T) {
	tests := []struct {
		name   string
		max    int
		writes []string
		want   string
	}{
		{"under the cap", 10, []string{"abc", "def"}, "abcdef"},
		{"keeps the tail", 4, []string{"abc", "def"}, "[... 2 bytes dropped ...]\ncdef"},
		{"one big write", 3, []string{"0123456789"}, "[... 7 bytes dropped ...]\n789"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := &tailBuffer{max: tc.max}
			for _, w := range tc.writes {
				if n, err := b.Write([]byte(w)); err != nil || n != len(w) {
					t.Fatalf("Write(%q) = %d, %v", w, n, err)
				}
			}
			if got := b.String(); got != tc.want {
				t.Errorf("String() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestFreePorts(t *testing.T) {
	ports, err := FreePorts(5)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p <= 0 || p > 65535 || seen[p] {
			t.Fatalf("ports %v: want 5 distinct valid ports", ports)
		}
		seen[p] = true
	}
}

func TestRetryOnPortClash(t *testing.T) {
	tests := []struct {
		name      string
		errs      []error // returned by successive calls; nil = success
		wantCalls int
		wantErr   bool
	}{
		{"first try", []error{nil}, 1, false},
		{"clash then success", []error{errors.New("listen tcp 127.0.0.1:1: bind: address already in use"), nil}, 2, false},
		{"other errors are not retried", []error{errors.New("bad config"), nil}, 1, true},
		{"gives up after 3", []error{
			errors.New("address already in use"), errors.New("address already in use"),
			errors.New("address already in use"), nil,
		}, 3, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			v, err := retryOnPortClash(func() (int, error) {
				err := tc.errs[calls]
				calls++
				if err != nil {
					return 0, err
				}
				return 7, nil
			})
			if calls != tc.wantCalls {
				t.Errorf("%d calls, want %d", calls, tc.wantCalls)
			}
			if (err != nil) != tc.wantErr {
				t.Errorf("err = %v, want error: %v", err, tc.wantErr)
			}
			if err == nil && v != 7 {
				t.Errorf("value %d, want 7", v)
			}
		})
	}
}

// TestBuildBudget checks that builds are bounded by the test deadline,
// leaving the tests their margin, and refused when nothing is left.
func TestBuildBudget(t *testing.T) {
	for _, tt := range []struct {
		left, want time.Duration
		err        bool
	}{
		{time.Hour, buildTimeout, false},
		{10 * time.Minute, 10*time.Minute - testMargin, false},
		{testMargin, 0, true},
		{time.Minute, 0, true},
	} {
		got, err := budgetUntil(tt.left)
		if got != tt.want || (err != nil) != tt.err {
			t.Errorf("budgetUntil(%s) = %s, %v; want %s, error %v", tt.left, got, err, tt.want, tt.err)
		}
		if err != nil && !strings.Contains(err.Error(), "make e2e") {
			t.Errorf("budgetUntil(%s) error %q does not say how to give more time", tt.left, err)
		}
	}
}
