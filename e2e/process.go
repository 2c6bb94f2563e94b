package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// maxLogBytes is how much of a process's output is kept (the tail).
const maxLogBytes = 512 << 10

// Process is a child process started by the harness. Its stdout and stderr
// are kept (the last maxLogBytes) for printing when a test fails. It runs in
// its own process group and gets SIGKILL if the test binary dies, so no
// backend outlives the test on any exit path.
type Process struct {
	// Name is a short label used in errors and log dumps.
	Name string

	cmd  *exec.Cmd
	logs *tailBuffer
	done chan struct{}
	err  error // exit error, valid once done is closed
}

// Start starts bin with args in dir (the current directory if empty), with
// env added to the test's environment.
func Start(name, bin string, args []string, dir string, env []string) (*Process, error) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	logs := &tailBuffer{max: maxLogBytes}
	cmd.Stdout = logs
	cmd.Stderr = logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// A child of the process may keep the output pipe open after the process
	// itself exited; do not let that hold up Wait (Stop reaps the group).
	cmd.WaitDelay = 500 * time.Millisecond
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	p := &Process{Name: name, cmd: cmd, logs: logs, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Logs returns the tail of the process's combined stdout and stderr.
func (p *Process) Logs() string { return p.logs.String() }

// Stop sends SIGTERM to the process group, waits up to grace, then sends
// SIGKILL and waits again (bounded). It returns an error only if the process
// could not be ended; calling it again is harmless.
func (p *Process) Stop(grace time.Duration) error {
	if exited, _ := p.Exited(); exited {
		return nil
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			return fmt.Errorf("stop %s (pid %d): still running 10s after SIGKILL", p.Name, pgid)
		}
	}
	// Reap whatever else is left in the group (children that ignored TERM).
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return nil
}

// WaitReady polls check every 100 ms until it returns nil, the process
// exits, or timeout passes. The error carries the last check error and, when
// the process exited, its exit status.
func (p *Process) WaitReady(ctx context.Context, timeout time.Duration, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if exited, err := p.Exited(); exited {
			return fmt.Errorf("%s exited before it was ready (%v); last check: %w", p.Name, err, errOrNone(last))
		}
		if last = check(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s: %w", p.Name, timeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Eventually polls cond every interval until it returns nil or timeout
// passes, and returns cond's last error on timeout.
func Eventually(ctx context.Context, timeout, interval time.Duration, cond func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		err := cond(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("still failing after %s: %w", timeout, err)
		case <-time.After(interval):
		}
	}
}

// retryOnPortClash runs start up to 3 times while it fails because a port
// that FreePorts picked was taken by another process in the meantime (the
// error then carries the backend's "address already in use" log line).
func retryOnPortClash[T any](start func() (T, error)) (T, error) {
	var v T
	var err error
	for range 3 {
		if v, err = start(); err == nil || !strings.Contains(err.Error(), "address already in use") {
			return v, err
		}
	}
	return v, err
}

func errOrNone(err error) error {
	if err == nil {
		return errors.New("none")
	}
	return err
}

// tailBuffer is an io.Writer that keeps the last max bytes written to it.
type tailBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	max     int
	dropped int64
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if over := b.buf.Len() - b.max; over > 0 {
		b.dropped += int64(over)
		rest := append([]byte(nil), b.buf.Bytes()[over:]...)
		b.buf.Reset()
		b.buf.Write(rest)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dropped > 0 {
		return fmt.Sprintf("[... %d bytes dropped ...]\n%s", b.dropped, b.buf.String())
	}
	return b.buf.String()
}
