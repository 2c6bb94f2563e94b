package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/probes"
	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
)

// startDump runs agent-dump in the background; stop() ends it and returns
// its output.
func startDump(t *testing.T, args ...string) (socket string, stop func() string) {
	t.Helper()
	socket = filepath.Join(t.TempDir(), "agent.sock")
	dumpStop = make(chan struct{})
	var out, errb bytes.Buffer
	done := make(chan int)
	go func() { done <- runAgentDump(append([]string{"--socket", socket}, args...), &out, &errb) }()
	waitListening(t, socket, done, &errb)
	var code int
	stopped := false
	return socket, func() string {
		if !stopped {
			stopped = true
			select {
			case code = <-done:
			case <-time.After(100 * time.Millisecond):
				close(dumpStop)
				code = <-done
			}
		}
		if code != 0 {
			t.Errorf("agent-dump exit %d: %s", code, errb.String())
		}
		return out.String()
	}
}

// waitListening waits until agent-dump, run in the background until it
// sends its exit code on done, has created socket; it fails if agent-dump
// exits first or takes 5 s.
func waitListening(t *testing.T, socket string, done <-chan int, errb fmt.Stringer) {
	t.Helper()
	exited := -1
	ok := pollUntil(5*time.Second, func() bool {
		select {
		case exited = <-done:
			return true
		default:
		}
		_, err := os.Stat(socket)
		return err == nil
	})
	switch {
	case exited >= 0:
		t.Fatalf("agent-dump exited %d: %s", exited, errb.String())
	case !ok:
		t.Fatalf("agent-dump did not listen: %s", errb.String())
	}
}

// pollUntil polls cond every 10 ms until it holds (true) or limit has
// passed (false): the one polling loop of the package's tests.
func pollUntil(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

func TestAgentDump(t *testing.T) {
	socket, stop := startDump(t, "--exit-after", "1", "--slot-size", "256", "-v")
	s, err := agent.Dial(socket, agentwire.Hello{PID: uint32(os.Getpid()), Name: "dump-test"})
	if err != nil {
		t.Fatal(err)
	}
	ring, err := shm.NewRing(s.Region(agentwire.RoleLaunchRing, ""))
	if err != nil {
		t.Fatal(err)
	}
	put := func(r interface{ Append([]byte) []byte }) {
		b := r.Append(nil)
		p, _ := record.ParsePrefix(b)
		if res := ring.Produce(uint32(p.Type), b); res != shm.Published {
			t.Fatalf("produce: %v", res)
		}
	}
	put(&record.KernelName{Function: 7, PID: 1, Name: "_Z6vecAddPfS_S_i"})
	for i := range 3 {
		put(&record.Launch{LaunchID: uint64(i + 1), PID: 1, Function: 7, Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{256, 1, 1}})
	}
	put(&record.Launch{LaunchID: 9, PID: 1, Function: 8, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}})
	put(&record.Sync{PID: 1, Kind: record.SyncStream})
	put(&record.Memcpy{PID: 1, Bytes: 4096, Kind: record.MemcpyHostToDevice})
	s.Close()
	out := stop()
	for _, want := range []string{
		"agent-dump: total clients=1 launches=4 names=1 syncs=1 memcpys=1 dropped=0 errors=0",
		"       3  _Z6vecAddPfS_S_i",
		"       1  unnamed 0x8",
		"launch pid=1 tid=0 id=2 _Z6vecAddPfS_S_i grid=4x1x1 block=256x1x1",
		"(dump-test): launches=4 names=1 syncs=1 memcpys=1 (4096 bytes) unnamed=1",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestAgentDumpNamesRing: agent-dump offers a names ring, as the receiver
// does, so a name longer than a launch slot is printed whole.
func TestAgentDumpNamesRing(t *testing.T) {
	socket, stop := startDump(t, "--exit-after", "1", "--slot-size", "128")
	s, err := agent.Dial(socket, agentwire.Hello{PID: uint32(os.Getpid()), Name: "dump-names"})
	if err != nil {
		t.Fatal(err)
	}
	launches, err := shm.NewRing(s.Region(agentwire.RoleLaunchRing, ""))
	if err != nil {
		t.Fatal(err)
	}
	names, err := shm.NewRing(s.Region(agentwire.RoleNameRing, "names"))
	if err != nil {
		t.Fatalf("no names ring: %v", err)
	}
	long := "_ZN2at6native" + "300" + strings.Repeat("x", 300) + "Ev"
	k := (&record.KernelName{Function: 7, PID: 1, Name: long}).AppendFit(nil, names.MaxPayload())
	if r := names.Produce(uint32(record.TypeKernelName), k); r != shm.Published {
		t.Fatal(r)
	}
	l := &record.Launch{LaunchID: 1, PID: 1, Function: 7, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}}
	if r := launches.Produce(uint32(record.TypeLaunch), l.Append(nil)); r != shm.Published {
		t.Fatal(r)
	}
	s.Close()
	if out := stop(); !strings.Contains(out, "       1  "+long+"\n") {
		t.Errorf("output lacks the whole name:\n%s", out)
	}
}

// TestAgentDumpPatchRegions: in --patch mode every map's binding names the
// WELCOME region that carries it (the names ring sits between the launch
// ring and the maps: a binding off by one sends kernel_phases' records
// into the names ring).
func TestAgentDumpPatchRegions(t *testing.T) {
	progs, err := loadDumpProgs([]string{probes.KernelPhases}, nil, "", 1024, 64)
	if err != nil {
		t.Fatal(err)
	}
	p, err := progs.newPatcher()
	if err != nil {
		t.Fatal(err)
	}
	d := &dumper{out: io.Discard, slotSize: 512, slots: 64, progs: progs, patcher: p}
	offers, err := d.connect(&agent.Peer{Session: 1, PID: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	s := d.sessions[0]
	if len(s.patch.binds) == 0 {
		t.Fatal("no map bindings")
	}
	for name, b := range s.patch.binds {
		if int(b.Region) >= len(offers) || offers[b.Region].Name != name {
			t.Errorf("map %s bound to WELCOME region %d, which is %+v", name, b.Region, offers[min(int(b.Region), len(offers)-1)])
		}
	}
}
