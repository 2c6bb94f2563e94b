package receiver

import (
	"context"
	"encoding/binary"
	"os"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
)

// Offsets a hostile client writes to (shm/doc.go, "Ring buffer").
const (
	offHead    = 128
	offSlotLen = 8
)

func newTestRing(t *testing.T, slotSize, slots uint32) *shm.Ring {
	t.Helper()
	g, err := shm.CreateRing(slotSize, slots)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// produceLaunches publishes n launch records into g.
func produceLaunches(t *testing.T, g *shm.Ring, n int) {
	t.Helper()
	now := monoNow(t)
	for i := range n {
		b := (&record.Launch{LaunchID: uint64(i + 1), PID: uint32(os.Getpid()), TID: 1, EnqueueNS: now, ReturnNS: now + 100,
			Function: 1, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}}).Append(nil)
		if res := g.Produce(uint32(record.TypeLaunch), b); res != shm.Published {
			t.Fatalf("produce %d: %v", i, res)
		}
	}
}

// lie writes what a hostile client may write into its ring: head 2^36
// tickets ahead and every slot marked dropped once more than its later
// laps (2^30 for 64 slots), so that a consumer trusting them skips 2^36
// tickets, about 8 minutes at 150 M tickets/s.
func lie(g *shm.Ring) {
	b := g.Region().Bytes()
	binary.LittleEndian.PutUint64(b[offHead:], 1<<36)
	drops := shm.DataOffset + g.Slots()*(g.MaxPayload()+shm.SlotHeaderSize)
	for i := range g.Slots() {
		binary.LittleEndian.PutUint32(b[drops+4*i:], uint32(1<<36/g.Slots()))
	}
}

// shutdownWithin shuts cs down in order and fails unless that ends within d.
func shutdownWithin(t *testing.T, d time.Duration, cs ...component.Component) {
	t.Helper()
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		for _, c := range cs {
			_ = c.Shutdown(context.Background())
		}
	}()
	select {
	case <-done:
		t.Logf("shutdown took %v", time.Since(start).Round(time.Millisecond))
	case <-time.After(d):
		t.Fatalf("shutdown still running after %v", d)
	}
}

// shutdownBound is the shutdown_timeout of testConfig: the bound of the
// handles' Shutdowns together.
const shutdownBound = 4 * time.Second

// TestHostileRingDoesNotStallOthers: a client whose ring header lies is
// let go at its first poll, counted by reason; another client's records
// all arrive within a second, and shutdown ends within its bound. Guards
// against a poll loop that resolves the lying ring's tickets forever,
// reading nothing else, so that shutdown never returns.
func TestHostileRingDoesNotStallOthers(t *testing.T) {
	cfg := testConfig(t)
	tr, mr, _, metrics := startBoth(t, cfg)
	r := tr.(*handle).r
	hostile, honest := newTestRing(t, cfg.Buffers.SlotSize, 64), newTestRing(t, cfg.Buffers.SlotSize, 256)
	lie(hostile)
	r.AddRing(hostile)
	r.AddRing(honest)
	const n = 200
	produceLaunches(t, honest, n)
	if !pollUntil(time.Second, func() bool { return selfValue(metrics, "gpuprobe.receiver.records.read") >= n }) {
		shutdownWithin(t, shutdownBound+time.Second, tr, mr) // a stalled poll loop fails here
		t.Fatalf("honest records read after 1 s: %d of %d", selfValue(metrics, "gpuprobe.receiver.records.read"), n)
	}
	waitFor(t, "the hostile client counted", func() bool {
		return selfValue(metrics, "gpuprobe.receiver.clients.disconnected") == 1
	})
	shutdownWithin(t, shutdownBound+time.Second, tr, mr)
}

// blockingTraces is a traces pipeline that never returns until released.
type blockingTraces struct{ release chan struct{} }

func (b blockingTraces) ConsumeTraces(ctx context.Context, _ ptrace.Traces) error {
	<-b.release
	return nil
}

func (blockingTraces) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

// TestShutdownDeadline: the handles' Shutdowns end within shutdown_timeout
// together even when the poll loop cannot finish (here a traces pipeline
// that never returns): the traces handle's waits for its flush until the
// deadline, the last one returns an error at once, the deadline being
// spent.
func TestShutdownDeadline(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the shutdown deadline (1 s)")
	}
	const timeout = time.Second
	cfg := testConfig(t)
	cfg.ShutdownTimeout = timeout
	f := NewFactory()
	set := receivertest.NewNopSettings(f.Type())
	block := blockingTraces{release: make(chan struct{})}
	tr, err := f.CreateTraces(context.Background(), set, cfg, block)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := f.CreateMetrics(context.Background(), set, cfg, consumertest.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []component.Component{tr, mr} {
		if err := c.Start(context.Background(), componenttest.NewNopHost()); err != nil {
			t.Fatal(err)
		}
	}
	g, err := shm.CreateRing(cfg.Buffers.SlotSize, 64)
	if err != nil {
		t.Fatal(err)
	}
	r := tr.(*handle).r
	t.Cleanup(func() { // the loop reads g until the pipeline lets it go
		close(block.release)
		<-r.run.done
		g.Close()
	})
	r.AddRing(g)
	produceLaunches(t, g, 1)
	waitFor(t, "the poll loop stuck in the pipeline", func() bool { return g.Stats().Tail == 1 })
	start := time.Now()
	shutdownWithin(t, timeout+time.Second, tr)
	if d := time.Since(start); d < timeout-100*time.Millisecond {
		t.Fatalf("the traces handle's shutdown returned after %v, before the deadline its flush had", d)
	}
	done := make(chan error, 1)
	go func() { done <- mr.Shutdown(context.Background()) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("shutdown reported success while the poll loop still runs")
		}
		if !strings.Contains(err.Error(), "shutdown_timeout") {
			t.Fatalf("error %q does not name shutdown_timeout", err)
		}
	case <-time.After(time.Second):
		t.Fatal("the last handle's shutdown still running 1 s after the deadline")
	}
	if d := time.Since(start); d > timeout+time.Second {
		t.Fatalf("the two shutdowns took %v, deadline %v", d, timeout)
	}
}

// TestAccountingExact: every record produced is read, dropped or corrupt,
// exactly, also when the client goes with records left in its ring.
func TestAccountingExact(t *testing.T) {
	tests := []struct {
		name                   string
		slots                  uint32
		perPoll                int                             // tickets read a poll (0: maxReadPerPoll)
		setup                  func(t *testing.T, g *shm.Ring) // before the ring is added
		remove                 bool                            // the client goes at once
		read, dropped, corrupt int64
	}{
		{
			// The corrupt record is counted, not consumed silently.
			name: "a record longer than its slot", slots: 64, read: 10, corrupt: 1,
			setup: func(t *testing.T, g *shm.Ring) {
				produceLaunches(t, g, 11)
				slot := shm.DataOffset + 10*(g.MaxPayload()+shm.SlotHeaderSize)
				binary.LittleEndian.PutUint32(g.Region().Bytes()[slot+offSlotLen:], 1<<20)
			},
		},
		{
			// The source is drained before it goes: not dropped after one
			// poll's read, the rest counted nowhere. A poll reads 1,000
			// here: 65,536 launch records take longer than a 10 s wait
			// under -race on a loaded 2-core machine.
			name: "gone with more than a poll's records left", slots: 8192, perPoll: 1000, remove: true, read: 3500,
			setup: func(t *testing.T, g *shm.Ring) { produceLaunches(t, g, 3500) },
		},
		{
			// A producer died after taking ticket 0: the records behind it
			// arrive when the client is gone, the dead ticket is dropped.
			name: "gone with a dead producer's ticket", slots: 64, remove: true, read: 10, dropped: 1,
			setup: func(t *testing.T, g *shm.Ring) {
				binary.LittleEndian.PutUint64(g.Region().Bytes()[offHead:], 1)
				produceLaunches(t, g, 10)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t)
			tr, mr, _, metrics := startBoth(t, cfg)
			defer shutdownWithin(t, shutdownBound+time.Second, tr, mr)
			r := tr.(*handle).r
			g := newTestRing(t, cfg.Buffers.SlotSize, tt.slots)
			tt.setup(t, g)
			perPoll := tt.perPoll
			if perPoll == 0 {
				perPoll = maxReadPerPoll
			}
			id := r.AddRingReading(g, perPoll)
			if tt.remove {
				r.RemoveRing(id)
			}
			want := tt.read + tt.dropped + tt.corrupt
			counts := func() (read, dropped, corrupt int64) {
				return selfValue(metrics, "gpuprobe.receiver.records.read"),
					selfValue(metrics, "gpuprobe.receiver.records.dropped"),
					selfValue(metrics, "gpuprobe.receiver.records.corrupt")
			}
			// The wait follows progress, not a fixed deadline: it fails
			// only when nothing moves.
			waitProgress(t, "every record accounted", func() (int64, bool) {
				read, dropped, corrupt := counts()
				r.mu.Lock()
				left := len(r.srcs.list)
				r.mu.Unlock()
				return read + dropped + corrupt, read+dropped+corrupt >= want && (left == 0 || !tt.remove)
			})
			// Later metric points must not count a record twice.
			waitEmissions(t, metrics, 5)
			if read, dropped, corrupt := counts(); read != tt.read || dropped != tt.dropped || corrupt != tt.corrupt {
				t.Fatalf("read %d, dropped %d, corrupt %d; want %d, %d, %d", read, dropped, corrupt, tt.read, tt.dropped, tt.corrupt)
			}
		})
	}
}
