package agent

import (
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// fdCount counts this process's open descriptors.
func fdCount(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// waitFds waits until at most want descriptors are open and returns the count.
func waitFds(t *testing.T, want int) int {
	t.Helper()
	n := fdCount(t)
	for deadline := time.Now().Add(5 * time.Second); n > want && time.Now().Before(deadline); n = fdCount(t) {
		time.Sleep(10 * time.Millisecond)
	}
	return n
}

// readError reads frames until an ERROR (returned) or the end.
func readError(c *net.UnixConn) error {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		t, p, err := readFrameFds(c, nil)
		if err != nil {
			return err
		}
		if t == FrameError {
			return UnmarshalError(p)
		}
	}
}

// TestHostileFramesEndTheSession sends frames that would make the server
// hold descriptors or wait without bound: each ends the session, and every
// descriptor the server received is closed again.
func TestHostileFramesEndTheSession(t *testing.T) {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	patch, _ := MarshalPatch(&PatchRequest{ID: 1, Arch: 90, Image: make([]byte, 100)}, true)
	tests := []struct {
		name  string
		send  func(c *net.UnixConn) // what the client sends, then it holds the connection
		want  string                // in the ERROR message
		maxFd int                   // descriptors the server may hold meanwhile
	}{
		{"one byte per sendmsg with 32 descriptors each", func(c *net.UnixConn) {
			for i := 0; i < len(patch)-4; i++ {
				if sendWithFds(c, patch[i:i+1], int(devnull.Fd()), 32) != nil {
					return
				}
			}
		}, "descriptors", 0},
		{"a PATCH with two descriptors", func(c *net.UnixConn) {
			sendWithFds(c, patch, int(devnull.Fd()), 2)
		}, "descriptors", 0},
		{"a descriptor on the first bytes of a frame that takes none", func(c *net.UnixConn) {
			hello, _ := MarshalHello(Hello{Name: "again"})
			sendWithFds(c, hello, int(devnull.Fd()), 1)
		}, "after WELCOME", 0},
		{"a frame that stops half way", func(c *net.UnixConn) {
			sendWithFds(c, patch[:20], int(devnull.Fd()), 1)
		}, "within", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := newOwner(t)
			s := listen(t, o, Options{FrameTimeout: 300 * time.Millisecond})
			sess, err := Dial(s.Path(), Hello{Name: "hostile"})
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			base := fdCount(t)
			start := time.Now()
			tc.send(sess.conn)
			if n := waitFds(t, base+tc.maxFd); n > base+tc.maxFd {
				t.Fatalf("%d descriptors open, %d before the hostile frame", n, base)
			}
			err = readError(sess.conn)
			var pe *ProtocolError
			if !errors.As(err, &pe) || pe.Code != CodeProtocol || !strings.Contains(pe.Message, tc.want) {
				t.Fatalf("got %v, want a protocol ERROR mentioning %q", err, tc.want)
			}
			waitGone(t, o)
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("the session ended after %v", d)
			}
		})
	}
}
