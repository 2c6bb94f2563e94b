package shm

import "fmt"

// MaxOvershoot bounds how far racing producers can take tickets beyond a
// full ring: each producer that passed step 2 (or D1) before the ring
// filled takes at most one ticket more (a warp at most 32), so head can
// exceed tail + slot_count by at most the producers running at once. 2^24
// is more than 60 times the threads an H100 holds resident (132 SMs × 2048).
// A head further ahead is a lie (Consumer.Err).
const MaxOvershoot = 1 << 24

// Violation names a ring invariant of the package comment that a producer
// broke. Such a ring's consumer stops, and its owner should let the
// producer go.
type Violation string

// Violations the consumer detects.
const (
	BadHead   Violation = "head"   // head beyond tail + slot_count + MaxOvershoot
	BadDrops  Violation = "drops"  // more drop marks in a slot than its tickets taken
	BadSeq    Violation = "seq"    // a seq that is no ticket of the slot up to the consumer's
	BadLength Violation = "length" // a record longer than its slot (counted in Corrupt)
)

// Violations lists every Violation, for self-metrics.
var Violations = []Violation{BadHead, BadDrops, BadSeq, BadLength}

// ViolationError is a Consumer's Err: which invariant, at which ticket, and
// the value found there.
type ViolationError struct {
	Reason Violation
	Ticket uint64
	Value  uint64
}

func (e *ViolationError) Error() string {
	return fmt.Sprintf("shm: ring producer broke the %s invariant at ticket %d (value %d)", e.Reason, e.Ticket, e.Value)
}

func (c *Consumer) violate(v Violation, t, value uint64) {
	if c.err == nil {
		c.err = &ViolationError{Reason: v, Ticket: t, Value: value}
	}
}
