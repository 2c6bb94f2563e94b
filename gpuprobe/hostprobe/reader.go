package hostprobe

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf/ringbuf"
)

// Stats are the probes' own counts.
type Stats struct {
	// Read is the number of records Read returned.
	Read uint64
	// Dropped is the number of events the kernel dropped because the ring
	// buffer was full.
	Dropped uint64
	// DecodeErrors is the number of samples that did not decode.
	DecodeErrors uint64
}

// Stats returns the counts so far.
func (p *Probes) Stats() Stats {
	s := Stats{Read: p.read.Load(), DecodeErrors: p.decodeErrs.Load()}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dropsDone {
		s.Dropped = p.dropped0
	} else {
		s.Dropped = p.kernelDrops()
	}
	return s
}

// kernelDrops sums the per-CPU drop counters (0 when they cannot be read).
func (p *Probes) kernelDrops() uint64 {
	var per []uint64
	if err := p.drops.Lookup(uint32(0), &per); err != nil {
		return 0
	}
	var n uint64
	for _, v := range per {
		n += v
	}
	return n
}

// Read waits for the next event (at most Options.MaxDelay after the kernel
// wrote it) and appends it to dst encoded as one
// record (record.HostCall or record.KernelName), ready for the
// translator. When ctx is done, Read still returns the events already in
// the ring buffer, then ctx's error: a cancelled ctx drains. After Close,
// Read returns ErrClosed. A sample that does not decode is counted and
// returned as an *EventError; the next Read goes on with the next sample.
// Concurrent Reads take turns.
func (p *Probes) Read(ctx context.Context, dst []byte) ([]byte, error) {
	p.readMu.Lock()
	defer p.readMu.Unlock()
	if p.closed.Load() {
		return dst, ErrClosed
	}
	// Flush wakes a blocked ReadInto, which then returns what the ring
	// holds followed by ErrFlushed.
	stop := context.AfterFunc(ctx, func() { _ = p.ring.Flush() })
	defer stop()
	for {
		// The kernel wakes us only once the ring fills up to its
		// threshold: the deadline picks up the rest within MaxDelay.
		p.ring.SetDeadline(time.Now().Add(p.maxDelay))
		err := p.ring.ReadInto(&p.rec)
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
			continue
		case errors.Is(err, ringbuf.ErrFlushed):
			if ctx.Err() != nil {
				return dst, ctx.Err()
			}
			continue // a late flush of an earlier Read's ctx
		case errors.Is(err, os.ErrClosed) || errors.Is(err, ringbuf.ErrClosed):
			return dst, ErrClosed
		default:
			return dst, fmt.Errorf("hostprobe: reading the events ring buffer: %w", err)
		}
		out, err := decodeEvent(dst, p.rec.RawSample)
		if err != nil {
			p.decodeErrs.Add(1)
			return dst, err
		}
		p.read.Add(1)
		return out, nil
	}
}
