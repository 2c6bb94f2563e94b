package receiver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gpuprobe/gpuprobe/receiver/internal/translate"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
)

// The receiver's shutdown. Every handle's Shutdown has the poll loop run
// a final flush: every ring read to the end it had when the flush began,
// every pending launch emitted with what it has, the spans and a last
// metrics point handed to the pipelines that are still attached, before
// Shutdown returns (the collector stops the exporters next). The last
// handle's Shutdown then closes the agent socket and ends the loop, whose
// last pass does the same once more and releases every source.
//
// All of it shares one deadline: shutdown_timeout from the first handle's
// Shutdown, or an earlier deadline of a Shutdown's context. What is not
// delivered by then is counted in gpuprobe.receiver.shutdown.undelivered
// by kind; Shutdown returns an error only when the poll loop itself did
// not end (a pipeline that does not return).

// Kinds of gpuprobe.receiver.shutdown.undelivered.
const (
	undeliveredRecords  = "records"  // left unread in a ring (also in records.dropped)
	undeliveredLaunches = "launches" // pending, never emitted
	undeliveredSpans    = "spans"    // built, not taken by the traces pipeline
)

// stopGrace is how long past the deadline the last Shutdown waits for the
// poll loop's last pass, which then only counts what is left and releases
// the sources.
const stopGrace = 250 * time.Millisecond

// shutdownState is what the handles' Shutdowns share.
type shutdownState struct {
	mu       sync.Mutex
	deadline time.Time // set by the first Shutdown
	begun    bool      // some handle's Shutdown began (poll goroutine reads it under mu)
	// tracesGone: the traces pipeline was detached; spans built later are
	// undelivered.
	tracesGone bool
}

// flushRequest asks the poll loop for a final flush by deadline; done is
// closed when it is over.
type flushRequest struct {
	deadline time.Time
	done     chan struct{}
}

// shutdownDeadline returns the deadline of a handle's Shutdown with ctx:
// the shared one (set now by the first), or ctx's when earlier.
func (d *shutdownState) deadlineFor(ctx context.Context, timeout time.Duration) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.deadline.IsZero() {
		d.deadline = time.Now().Add(timeout)
		d.begun = true
	}
	dl := d.deadline
	if cd, ok := ctx.Deadline(); ok && cd.Before(dl) {
		dl = cd
	}
	return dl
}

// tracesDetached notes that the traces pipeline is gone (its handle was
// shut down).
func (d *shutdownState) tracesDetached() {
	d.mu.Lock()
	d.tracesGone = true
	d.mu.Unlock()
}

// state reports whether a Shutdown began, and whether the traces
// pipeline is gone.
func (d *shutdownState) state() (begun, tracesGone bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.begun, d.tracesGone
}

// requestFlush has the poll loop run a final flush and waits for it, until
// the shutdown deadline. It returns at once when the loop is not running.
func (r *gpuReceiver) requestFlush(ctx context.Context) {
	if r.run.flushc == nil || r.run.done == nil {
		return
	}
	deadline := r.run.down.deadlineFor(ctx, r.cfg.ShutdownTimeout)
	wait, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	req := flushRequest{deadline: deadline, done: make(chan struct{})}
	select {
	case r.run.flushc <- req:
	case <-r.run.done:
		return
	case <-wait.Done():
		r.log.Warn("gpuprobe: the poll loop did not take the final flush by the shutdown deadline (a pipeline does not return?)",
			zap.Duration("shutdown_timeout", r.cfg.ShutdownTimeout))
		return
	}
	select {
	case <-req.done:
	case <-r.run.done:
	case <-wait.Done():
		r.log.Warn("gpuprobe: the final flush did not end by the shutdown deadline; what it did not deliver is counted in gpuprobe.receiver.shutdown.undelivered",
			zap.Duration("shutdown_timeout", r.cfg.ShutdownTimeout))
	}
}

// finalFlush (poll goroutine) reads every ring to the end it has now,
// emits every pending launch, and hands spans and metrics to the attached
// pipelines, by deadline. stopping (the loop's last pass) also releases
// every source; past the deadline what is left is counted, not read.
func (r *gpuReceiver) finalFlush(deadline time.Time, stopping bool) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	reading, stopReading := context.WithDeadline(ctx, readDeadline(time.Now(), deadline))
	drainRings(reading, r)
	read := reading.Err() == nil
	stopReading()
	switch {
	case stopping && read:
		r.pollOnce(ctx, time.Now(), true, false) // releases every source
	case stopping && ctx.Err() == nil:
		abandon(ctx, r) // no time to read more: counted, and released
	}
	if ctx.Err() != nil {
		if stopping { // else the last pass counts them
			abandon(ctx, r)
			countUndelivered(ctx, r, undeliveredLaunches, r.sh.pending())
		}
		r.mu.Lock()
		tc := r.out.traces
		r.mu.Unlock()
		td := takeTraces(r) // not sent: the deadline passed
		if _, gone := r.run.down.state(); tc != nil || gone {
			countUndelivered(ctx, r, undeliveredSpans, td.SpanCount())
		}
		return
	}
	now := time.Now()
	r.sh.each(func(_ int, tr *translate.Translator) { tr.FlushPending(now) })
	r.mu.Lock()
	tc := r.out.traces
	r.mu.Unlock()
	r.sendTraces(ctx, tc)
	r.hc.flush(ctx, r.cfg.Resource.ServiceName, r.log)
	r.emitMetrics(ctx, now)
}

// readDeadline returns when a final flush that began at now stops
// reading rings: half way to its deadline, so that emitting what was read
// (pending launches, spans, a last metrics point) has the other half.
func readDeadline(now, deadline time.Time) time.Time {
	return now.Add(deadline.Sub(now) / 2)
}

// drainRings polls until every ring is read to the head it had when it
// began, a pass makes no progress (a ticket a live producer has not
// published yet), or ctx ends. A launch ring's head is frozen at the
// first final flush (ringReader.freeze): what clients write after the
// shutdown began is counted as dropped, so that the shutdown's work is
// bounded by what the rings held, whatever the clients still write.
func drainRings(ctx context.Context, r *gpuReceiver) {
	r.mu.Lock()
	sources := append([]*source(nil), r.srcs.list...)
	r.mu.Unlock()
	ends := map[*ringReader]uint64{}
	for _, s := range sources {
		for _, g := range s.rings() {
			ends[g] = g.ring.Stats().Head
		}
		ends[s.launch] = s.launch.freeze()
	}
	for ctx.Err() == nil {
		moved, left := false, false
		before := positions(ends)
		r.pollOnce(ctx, time.Now(), false, false)
		for g, end := range ends {
			pos := g.cons.Position()
			moved = moved || pos != before[g]
			left = left || (pos < end && g.err() == nil)
		}
		if !left || !moved {
			return
		}
	}
}

// positions returns the consumers' positions of the rings in ends.
func positions(ends map[*ringReader]uint64) map[*ringReader]uint64 {
	pos := make(map[*ringReader]uint64, len(ends))
	for g := range ends {
		pos[g] = g.cons.Position()
	}
	return pos
}

// abandon (past the deadline) releases every source without reading it:
// what its rings hold is counted as dropped and undelivered.
func abandon(ctx context.Context, r *gpuReceiver) {
	r.mu.Lock()
	all := append([]*source(nil), r.srcs.list...)
	r.mu.Unlock()
	var left, lost, bad uint64
	for _, s := range all {
		for _, g := range s.rings() {
			if head, pos := g.ring.Stats().Head, g.cons.Position(); head > pos {
				left += min(head-pos, uint64(g.ring.Slots()))
			}
			g.cons.Drain(g.ring.Slots(), nil)
			l, c := g.count()
			lost, bad = lost+l, bad+c
		}
	}
	r.counts.dropped += lost
	r.counts.corrupt += bad
	if r.tel != nil {
		r.tel.GpuprobeReceiverRecordsDropped.Add(ctx, int64(lost))
		r.tel.GpuprobeReceiverRecordsCorrupt.Add(ctx, int64(bad))
	}
	countUndelivered(ctx, r, undeliveredRecords, int(left))
	r.dropSources(all)
}

// countUndelivered counts n items of kind the shutdown could not deliver.
func countUndelivered(ctx context.Context, r *gpuReceiver, kind string, n int) {
	if n <= 0 {
		return
	}
	r.counts.undelivered += uint64(n)
	if r.tel != nil {
		// The deadline's ctx may be over: the count must still land.
		r.tel.GpuprobeReceiverShutdownUndelivered.Add(context.WithoutCancel(ctx), int64(n),
			metric.WithAttributes(attribute.String("kind", kind)))
	}
}

// shutdown (the last handle's) stops the poll loop after its last pass
// and releases the regions, by the shutdown deadline: past it, it returns
// an error and the rest of the work finishes in the background.
func (r *gpuReceiver) shutdown(ctx context.Context) error {
	if r.run.cancel == nil {
		return nil
	}
	deadline := r.run.down.deadlineFor(ctx, r.cfg.ShutdownTimeout)
	r.run.stopBy = deadline
	wait, cancel := context.WithDeadline(ctx, deadline.Add(stopGrace))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.stop() }()
	select {
	case err := <-done:
		return err
	case <-wait.Done():
		return fmt.Errorf("gpuprobe: shutdown_timeout %v: the poll loop did not end (a pipeline does not return): %w",
			r.cfg.ShutdownTimeout, wait.Err())
	}
}

// stop runs shutdown's work: close the agent socket, end the poll loop
// (its last pass reads and releases every source), release the rest.
func (r *gpuReceiver) stop() error {
	var errs []error
	if r.run.agent != nil {
		if err := r.run.agent.Close(); err != nil {
			errs = append(errs, fmt.Errorf("gpuprobe: closing the agent socket: %w", err))
		}
	}
	r.run.cancel()
	<-r.run.done
	r.run.cancel = nil
	if r.tel != nil {
		r.tel.Shutdown()
	}
	if r.out.self != nil {
		r.out.self.shutdown()
	}
	r.mu.Lock()
	all := append([]*source(nil), r.srcs.list...)
	r.mu.Unlock()
	r.dropSources(all)
	r.mu.Lock()
	retired := r.maps.retired
	r.maps.retired = nil
	r.mu.Unlock()
	closeInstances(r.log, retired)
	if err := r.host.close(); err != nil {
		errs = append(errs, fmt.Errorf("gpuprobe: closing host probes: %w", err))
	}
	return errors.Join(errs...)
}
