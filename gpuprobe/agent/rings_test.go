package agent

import (
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/shm"
)

const mib = 1 << 20

// halving is a request whose rings are full MiB at shift 0, halved at
// each shift up to maxShift.
func halving(full int64, maxShift uint) RingRequest {
	return RingRequest{MaxShift: maxShift, Size: func(k uint) int64 { return full >> k }}
}

// TestRingBudgetGrants: a session gets full-size rings while they leave
// room for the smallest rings of the sessions the limits still allow and
// take at most half of the rest, smaller ones after, the smallest while
// they fit, and ERROR code 5 then; another uid still gets full rings.
// Here: shares of 32 MiB, 4 sessions of a uid and 8 in all, rings of
// 8 MiB halved to 1 MiB at most.
func TestRingBudgetGrants(t *testing.T) {
	b := newRingBudget(RingLimits{Memory: 64 * mib, MemoryPerUID: 32 * mib, Wait: time.Millisecond}, 8, 4)
	tests := []struct {
		name      string
		uid       uint32
		req       RingRequest
		wantShift uint
		wantErr   string
	}{
		{"first full", 1000, halving(8*mib, 3), 0, ""},   // 8 ≤ (32-3)/2
		{"second full", 1000, halving(8*mib, 3), 0, ""},  // 8 ≤ (24-2)/2
		{"third halved", 1000, halving(8*mib, 3), 1, ""}, // 8 > (16-1)/2
		{"fourth halved", 1000, halving(8*mib, 3), 1, ""},
		{"past the session limit", 1000, halving(8*mib, 3), 1, ""}, // the server refuses it first; the budget still bounds it
		{"quarter", 1000, halving(8*mib, 3), 2, ""},
		{"smallest", 1000, halving(8*mib, 3), 3, ""},
		{"smallest takes the rest", 1000, halving(8*mib, 3), 3, ""},
		{"share spent", 1000, halving(8*mib, 3), 0, "max_ring_memory_per_uid"},
		{"honest uid full", 0, halving(8*mib, 3), 0, ""},
		{"root past the share, within the node's", 0, halving(16*mib, 0), 0, ""},
		{"root over the node's budget", 0, halving(64*mib, 0), 0, "(agent::max_ring_memory)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			shift, l, err := b.reserve(tt.uid, tt.req)
			if tt.wantErr != "" {
				var pe *agentwire.ProtocolError
				if !errors.As(err, &pe) || pe.Code != agentwire.CodeTooMany || !strings.Contains(pe.Message, tt.wantErr) {
					t.Fatalf("reserve = %d, %v; want ERROR code 5 naming %s", shift, err, tt.wantErr)
				}
				return
			}
			if err != nil || shift != tt.wantShift || l.Bytes() != tt.req.Size(shift) {
				t.Fatalf("reserve = shift %d (%d bytes), %v; want shift %d", shift, l.Bytes(), err, tt.wantShift)
			}
		})
	}
	st := b.stats()
	if st.Shrunk != 6 || st.Refused != 2 || st.Held != 32*mib+24*mib {
		t.Errorf("stats %+v: want 6 shrunk, 2 refused, %d held", st, 56*mib)
	}
}

// TestRingBudgetKeepsTheSmallest: sessions of a uid that take full
// rings leave the smallest rings for every session its limit still
// allows, so a uid's last allowed session is never refused for memory.
func TestRingBudgetKeepsTheSmallest(t *testing.T) {
	const sessions = 64
	b := newRingBudget(RingLimits{Memory: 256 * mib, MemoryPerUID: 128 * mib, Wait: time.Millisecond}, 256, sessions)
	req := RingRequest{MaxShift: 6, Size: func(k uint) int64 { return max(int64(15*mib)>>k, 300<<10) }}
	full := 0
	for i := range sessions {
		k, _, err := b.reserve(7, req)
		if err != nil {
			t.Fatalf("session %d of %d: %v", i+1, sessions, err)
		}
		if k == 0 {
			full++
		}
	}
	if full < 4 {
		t.Errorf("%d sessions got full rings, want the first few", full)
	}
	if _, _, err := b.reserve(0, req); err != nil {
		t.Errorf("root beside a uid at its limit: %v", err)
	}
}

// TestRingBudgetNodeFull: uids that each stay within their share still
// cannot pass the node's budget.
func TestRingBudgetNodeFull(t *testing.T) {
	b := newRingBudget(RingLimits{Memory: 32 * mib, MemoryPerUID: 16 * mib, Wait: time.Millisecond}, 256, 64)
	for uid := uint32(1); uid <= 2; uid++ {
		if _, _, err := b.reserve(uid, halving(16*mib, 0)); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err := b.reserve(3, halving(16*mib, 0))
	if err == nil || !strings.Contains(err.Error(), "(agent::max_ring_memory)") {
		t.Fatalf("reserve past the node's budget = %v, want it refused naming agent::max_ring_memory", err)
	}
}

// TestRingBudgetRelease: Release gives the bytes back once, whether the
// session was open or closed, and forgets a closed one.
func TestRingBudgetRelease(t *testing.T) {
	b := newRingBudget(RingLimits{Memory: 32 * mib, MemoryPerUID: 32 * mib, Wait: time.Millisecond}, 256, 64)
	_, a, _ := b.reserve(7, halving(4*mib, 0))
	_, c, _ := b.reserve(7, halving(4*mib, 0))
	b.close(c, time.Now())
	if st := b.stats(); st.Held != 8*mib || st.Undrained != 1 {
		t.Fatalf("stats %+v: want 8 MiB held, 1 undrained", st)
	}
	a.Release()
	c.Release()
	c.Release()
	var nilLease *Lease
	nilLease.Release()
	if st := b.stats(); st.Held != 0 || st.Undrained != 0 || len(b.byUID) != 0 || len(b.closed) != 0 {
		t.Fatalf("after Release: stats %+v, %d uids, %d with undrained; want all zero", st, len(b.byUID), len(b.closed))
	}
}

// TestRingBudgetEvictsOldestUndrained: closed sessions of a uid beyond
// its session limit are asked to drain, oldest first; a request of a uid
// whose share is held by undrained sessions asks its oldest one too.
func TestRingBudgetEvictsOldestUndrained(t *testing.T) {
	b := newRingBudget(RingLimits{Memory: 64 * mib, MemoryPerUID: 10 * mib, Wait: time.Millisecond}, 256, 2)
	var order []int
	base := time.Now()
	for i := range 5 {
		_, l, err := b.reserve(9, halving(2*mib, 0))
		if err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
		l.OnEvict(func() { order = append(order, i) })
		b.close(l, base.Add(time.Duration(i)*time.Millisecond))
	}
	// 5 closed, limit 2: sessions 0, 1, 2 asked, in that order.
	if want := []int{0, 1, 2}; !equalInts(order, want) {
		t.Fatalf("evicted %v, want %v", order, want)
	}
	if _, _, err := b.reserve(9, halving(2*mib, 0)); err == nil {
		t.Fatal("a sixth session fit a share held by five undrained ones")
	}
	if want := []int{0, 1, 2, 3}; !equalInts(order, want) {
		t.Fatalf("after a refused request evicted %v, want %v", order, want)
	}
	if st := b.stats(); st.Evicted != 4 || st.Refused != 1 || st.Undrained != 5 {
		t.Errorf("stats %+v: want 4 evicted, 1 refused, 5 undrained", st)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestServerRingBudget: over the server, a session whose rings do not fit
// is refused with ERROR code 5 (the shim then runs the application
// unrecorded), and the share comes back when the owner unmaps the rings
// of a session that left.
func TestServerRingBudget(t *testing.T) {
	var mu sync.Mutex
	var rings []*shm.Ring
	welcomed := make(chan *shm.Ring, 4)
	cb := Callbacks{Connect: func(p *Peer) ([]agentwire.Offer, error) {
		_, lease, err := p.Reserve(halving(int64(shm.RingSize(64, 1<<14)), 0))
		if err != nil {
			return nil, err
		}
		g, err := shm.CreateRing(64, 1<<14)
		if err != nil {
			return nil, err
		}
		g.Region().OnClose(lease.Release)
		mu.Lock()
		rings = append(rings, g)
		mu.Unlock()
		return []agentwire.Offer{{Role: agentwire.RoleLaunchRing, Name: "launches", Region: g.Region()}}, nil
	}, Welcomed: func(p *Peer) {
		mu.Lock()
		g := rings[len(rings)-1]
		mu.Unlock()
		g.Region().DropFile()
		welcomed <- g
	}}
	// A budget of one and a half rings: one session, whether the test's
	// uid is charged to its share or (root) to the node's budget only.
	ring := int64(shm.RingSize(64, 1<<14))
	s, err := Listen(Options{Path: filepath.Join(t.TempDir(), "a.sock"), Rings: RingLimits{Memory: ring + ring/2, MemoryPerUID: ring + ring/2, Wait: time.Millisecond}}, cb)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first, err := Dial(s.Path(), agentwire.Hello{Name: "first"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Dial(s.Path(), agentwire.Hello{Name: "second"})
	var pe *agentwire.ProtocolError
	if !errors.As(err, &pe) || pe.Code != agentwire.CodeTooMany {
		t.Fatalf("second session: %v, want ERROR code 5", err)
	}
	g := <-welcomed
	if f := g.Region().File(); f != nil {
		t.Errorf("the first session's memfd is still open after WELCOME")
	}
	first.Close()
	g.Close() // the owner drained it
	again, err := Dial(s.Path(), agentwire.Hello{Name: "again"})
	if err != nil {
		t.Fatalf("a session after the share came back: %v", err)
	}
	again.Close()
	if st := s.RingStats(); st.Refused != 1 {
		t.Errorf("RingStats %+v: want 1 refused", st)
	}
	<-welcomed
	mu.Lock()
	defer mu.Unlock()
	for _, g := range rings {
		g.Close()
	}
}

// TestRingBudgetWaitsForRelease: a request that finds no room gets it
// when a lease is released within the wait, as when the poll loop drains
// a session that just ended.
func TestRingBudgetWaitsForRelease(t *testing.T) {
	b := newRingBudget(RingLimits{Memory: 16 * mib, MemoryPerUID: 16 * mib, Wait: time.Minute}, 256, 64)
	_, held, err := b.reserve(5, halving(16*mib, 0))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, _, err := b.reserve(5, halving(16*mib, 0))
		got <- err
	}()
	// The request waits on the channel it read under b.mu; Release
	// replaces it, so a release before the wait begins is seen too.
	held.Release()
	if err := <-got; err != nil {
		t.Fatalf("reserve after a release: %v", err)
	}
}
