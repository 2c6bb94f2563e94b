package receiver

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/patcher"
	"github.com/gpuprobe/gpuprobe/receiver/internal/progmaps"
	"github.com/gpuprobe/gpuprobe/receiver/internal/translate"
	"github.com/gpuprobe/gpuprobe/shm"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
)

// Bounds on the work a client's rings cost, whatever the client writes
// into them (shm/doc.go: the producers are not trusted).
const (
	// maxReadPerPoll bounds the tickets resolved in one ring in one poll
	// (records delivered, dropped, stalled or corrupt alike), so the work
	// and the pdata of a poll stay bounded; what is left waits in the
	// ring, and a ring that stays full drops and counts.
	maxReadPerPoll = 1 << 16
	// drainTime is how long a gone client's rings are still read, every
	// poll, before what is left in them is counted as dropped (unread) and
	// their regions are released.
	drainTime = time.Second
)

// ringReader is one ring of a source with its consumer and the counters
// already reported.
type ringReader struct {
	ring    *shm.Ring
	cons    *shm.Consumer
	owned   bool   // the receiver created the ring and closes it
	perPoll int    // tickets resolved in one poll or drain: maxReadPerPoll
	lost    uint64 // dropped + oversize + stalled + abandoned, as last reported
	bad     uint64 // corrupt, as last reported
	// frozen (once a shutdown began): stopAt is the head the ring had
	// then, and records past it are counted as dropped, not read.
	frozen bool
	stopAt uint64
}

func newRingReader(g *shm.Ring, owned bool) *ringReader {
	return &ringReader{ring: g, cons: g.NewConsumer(shm.ConsumerOptions{}), owned: owned, perPoll: maxReadPerPoll}
}

// readUpTo resolves up to max (> 0) tickets, handing records to h (none
// for max 0), and returns the records lost and corrupt since the last read
// or drain.
func (g *ringReader) readUpTo(max int, h func(shm.Record)) (lost, corrupt uint64) {
	if max > 0 {
		g.cons.Read(max, h)
	}
	return g.count()
}

// testHookNamesRead runs between the reads of a source's names ring and
// its launch ring (tests: a producer acting in between).
var testHookNamesRead = func(*source) {}

// drain resolves what is left without waiting for dead producers' tickets
// (shm.Consumer.Drain): up to perPoll records handed to h, then up
// to the ring's slot count more counted as dropped unread. It returns the
// records lost and corrupt since the last read or drain.
func (g *ringReader) drain(h func(shm.Record)) (lost, corrupt uint64) {
	n := g.perPoll
	if g.frozen {
		n = min(n, backlog(g))
	}
	if n > 0 {
		g.cons.Drain(n, h)
	}
	g.cons.Drain(g.ring.Slots(), nil)
	return g.count()
}

// freeze sets stopAt to the ring's head unless frozen already, and
// returns it.
func (g *ringReader) freeze() uint64 {
	if !g.frozen {
		g.frozen, g.stopAt = true, g.ring.Stats().Head
	}
	return g.stopAt
}

// empty reports whether the ring holds nothing left to read, as far as its
// head tells.
func (g *ringReader) empty() bool { return g.ring.Stats().Head <= g.cons.Position() }

// err returns the ring invariant the producer broke, or nil.
func (g *ringReader) err() error { return g.cons.Err() }

// close closes the ring if the receiver owns it.
func (g *ringReader) close() error {
	if !g.owned {
		return nil
	}
	return g.ring.Close()
}

// count returns the records the ring lost and the corrupt records since the
// last call: the one place drops are counted. The ring's own counters are
// written by the client: only their growth counts.
func (g *ringReader) count() (lost, corrupt uint64) {
	st, cs := g.ring.Stats(), g.cons.Stats()
	if l := st.Dropped + st.Oversize + cs.Stalled + cs.Abandoned; l > g.lost {
		lost, g.lost = l-g.lost, l
	}
	corrupt, g.bad = cs.Corrupt-g.bad, cs.Corrupt
	return lost, corrupt
}

// sourceSet is the clients' sources, in creation order, numbered from 1,
// and the agent session each came with.
type sourceSet struct {
	list   []*source
	next   uint32
	bySess map[uint32]*source // agent session → its ring
	turn   uint32             // poll passes so far: where the next starts (fairpoll.go)
	res    resources          // their processes' resources (resource.go; needs no lock)
}

// source is one client process's rings and regions, with the id that
// scopes its launch ids and function handles.
type source struct {
	id      uint32
	shard   int // its translator's index in gpuReceiver.sh (shardOf), for its life
	launch  *ringReader
	names   *ringReader                // the names ring, or nil
	warps   *ringReader                // the kernel_phases ring, or nil
	maps    *progmaps.Instance         // the application's user map regions, or nil
	closing bool                       // the producer went away: read what is left, then close
	evict   bool                       // the ring budget wants it released at the next poll (agent.Lease.OnEvict)
	goneAt  time.Time                  // when a poll first saw closing; zero before
	bind    map[string]patcher.Binding // map name → region in the client's WELCOME
	clock   *shm.Array                 // the client's clock region (role 6), or nil
	calls   *clientHostCalls           // the client's mailbox server, or nil
	peer    *translate.Peer            // the client's credentials, until the translator has them
	// internalLogged: a record of this client hit a bug (translate.InternalError), logged once
	internalLogged bool
}

// rings returns s's rings in the order they are read: names before
// launches, so a launch finds its kernel's name.
func (s *source) rings() []*ringReader {
	gs := make([]*ringReader, 0, 3)
	for _, g := range []*ringReader{s.names, s.launch, s.warps} {
		if g != nil {
			gs = append(gs, g)
		}
	}
	return gs
}

// violation returns the first ring invariant the client broke, or nil.
func (s *source) violation() error {
	for _, g := range s.rings() {
		if err := g.err(); err != nil {
			return err
		}
	}
	if s.maps != nil {
		return s.maps.Err()
	}
	return nil
}

// addSource makes a source of a client's rings and has the poll loop read it.
func (r *gpuReceiver) addSource(ring *shm.Ring, owned bool, maps *progmaps.Instance, names *shm.Ring, peer *translate.Peer) *source {
	return r.publishSource(r.newSource(ring, owned, maps, names, peer))
}

// newSource builds a source with the next id; the poll loop does not see
// it until publishSource.
func (r *gpuReceiver) newSource(ring *shm.Ring, owned bool, maps *progmaps.Instance, names *shm.Ring, peer *translate.Peer) *source {
	r.mu.Lock()
	r.srcs.next++
	id := r.srcs.next
	r.mu.Unlock()
	s := &source{id: id, launch: newRingReader(ring, owned), maps: maps, peer: peer}
	if peer != nil {
		s.shard = shardOf(peer.PID, id, len(r.sh.trs))
	} else {
		s.shard = shardOf(0, id, len(r.sh.trs))
	}
	if maps != nil {
		maps.Src = s.id
	}
	if names != nil {
		s.names = newRingReader(names, true)
	}
	return s
}

// publishSource hands s to the poll loop.
func (r *gpuReceiver) publishSource(s *source) *source {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.srcs.list = append(r.srcs.list, s)
	return s
}

// handleRecord folds one record of s. Invalid records are counted by the
// translator; one that made it panic (a bug) is also logged, with its
// stack, once per client: the collector keeps serving every client.
func handleRecord(tr *translate.Translator, log *zap.Logger, s *source, rec shm.Record, now time.Time) {
	if err := tr.Handle(s.id, rec.Payload, now); err != nil && !s.internalLogged {
		logInternal(log, s, err)
	}
}

// logInternal logs err once for s if it is a bug of the receiver
// (translate.InternalError). It is apart from handleRecord because the
// target of errors.As escapes: declared there, it was an allocation for
// every record.
func logInternal(log *zap.Logger, s *source, err error) {
	var ie *translate.InternalError
	if errors.As(err, &ie) {
		s.internalLogged = true
		log.Error("gpuprobe: a client's record hit a bug in the receiver; the record was dropped and counted (records.invalid), later ones are counted only",
			zap.Uint32("source", s.id), zap.Error(err), zap.ByteString("stack", ie.Stack))
	}
}

// readSource reads one poll's worth of s's rings: at most share tickets
// of the launch ring (planShares), at most perPoll (maxReadPerPoll) of the
// names ring, and ExecRingSlots of the kernel_phases ring (its Exec and
// Warp records fold into pending launches and build no pdata). It returns
// the records lost and corrupt since the last poll.
//
// The launch ring is read only up to the head it had before the names ring
// was read: a producer publishes a kernel's name before it takes the
// ticket of the kernel's launch, so every launch read has its name read
// first. Reading the launch ring to its end instead would take a launch
// whose name was published after the names ring was read, and name it by
// its handle.
func (r *gpuReceiver) readSource(s *source, now time.Time, share int) (lost, corrupt uint64) {
	handle := func(rec shm.Record) { handleRecord(r.sh.of(s), r.log, s, rec, now) }
	launchEnd := s.launch.ring.Stats().Head
	for _, g := range s.rings() {
		max := g.perPoll
		switch g {
		case s.warps:
			max = ExecRingSlots
		case s.launch:
			max = min(max, share) // share: at most the backlog planShares saw
			if s.names != nil {
				testHookNamesRead(s)
				if pos := g.cons.Position(); launchEnd-pos < uint64(max) {
					max = int(launchEnd - pos)
				}
			}
		}
		l, c := g.readUpTo(max, handle)
		lost, corrupt = lost+l, corrupt+c
	}
	if s.maps != nil {
		r.maps.col.ReadRings(s.maps, now, maxReadPerPoll)
	}
	return lost, corrupt
}

// finished reports whether gone source s can be released now, after this
// poll's read: its rings are empty, or drainTime has passed since it went
// (or the receiver stops). What is left is then drained (ringReader.drain).
// That is exact: no ticket a lap or more past the consumer can hold a
// record (the producer's step 4 drops and counts it).
// It returns the records lost and corrupt since the read.
func (r *gpuReceiver) finished(s *source, now time.Time, stopping bool) (done bool, lost, corrupt uint64) {
	if s.goneAt.IsZero() {
		s.goneAt = now
	}
	if !stopping && now.Sub(s.goneAt) < drainTime && !s.empty() {
		return false, 0, 0
	}
	handle := func(rec shm.Record) { handleRecord(r.sh.of(s), r.log, s, rec, now) }
	for _, g := range s.rings() {
		l, c := g.drain(handle)
		lost, corrupt = lost+l, corrupt+c
	}
	if s.maps != nil {
		r.maps.col.DrainRings(s.maps)
	}
	return true, lost, corrupt
}

// empty reports whether s's rings hold nothing left to read, as far as
// their heads tell.
func (s *source) empty() bool {
	for _, g := range s.rings() {
		if !g.empty() {
			return false
		}
	}
	return s.maps == nil || s.maps.Empty()
}

// disconnect lets a client that broke a ring invariant go: its rings are
// no longer read, its regions are released, and the reason is counted.
func (r *gpuReceiver) disconnect(ctx context.Context, s *source, err error) {
	reason := "unknown"
	if v := (*shm.ViolationError)(nil); errors.As(err, &v) {
		reason = string(v.Reason)
	}
	r.mu.Lock()
	for k, v := range r.srcs.bySess {
		if v == s {
			delete(r.srcs.bySess, k)
		}
	}
	r.counts.disconnected++
	r.mu.Unlock()
	r.log.Warn("gpuprobe: a client broke the ring protocol; its rings are no longer read",
		zap.Uint32("source", s.id), zap.String("reason", reason), zap.Error(err))
	if r.tel != nil {
		r.tel.GpuprobeReceiverClientsDisconnected.Add(ctx, 1,
			metric.WithAttributes(attribute.String("reason", reason)))
	}
}

// dropSources forgets the given sources and closes the regions it owns.
func (r *gpuReceiver) dropSources(gone []*source) {
	r.mu.Lock()
	kept := r.srcs.list[:0]
	for _, s := range r.srcs.list {
		if !slices.Contains(gone, s) {
			kept = append(kept, s)
		}
	}
	clear(r.srcs.list[len(kept):])
	r.srcs.list = kept
	for _, s := range gone {
		if s.maps != nil {
			r.maps.retired = append(r.maps.retired, s.maps)
			s.maps = nil
		}
	}
	r.mu.Unlock()
	for _, s := range gone {
		r.sh.of(s).Disconnect(s.id, time.Now())
		for _, g := range s.rings() {
			if err := g.close(); err != nil {
				r.log.Debug("gpuprobe: closing a ring", zap.Error(err))
			}
		}
		r.hc.stop(s.calls, r.log)
		if s.clock != nil {
			if err := s.clock.Close(); err != nil {
				r.log.Debug("gpuprobe: closing a clock region", zap.Error(err))
			}
		}
	}
}
