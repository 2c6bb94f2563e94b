package agentwire

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrBudget is wrapped by the errors of Budget.Acquire.
var ErrBudget = errors.New("memory budget exceeded")

// Budget bounds the bytes that PATCH work holds across all clients: a
// counting semaphore whose waits are bounded. It is safe for concurrent
// use.
type Budget struct {
	max  int64
	wait time.Duration

	mu      sync.Mutex
	used    int64
	changed chan struct{} // closed and replaced whenever bytes are released
}

// NewBudget returns a budget of max bytes whose Acquire waits at most
// wait for room.
func NewBudget(max int64, wait time.Duration) *Budget {
	return &Budget{max: max, wait: wait, changed: make(chan struct{})}
}

// Max returns the budget's size in bytes.
func (b *Budget) Max() int64 { return b.max }

// Used returns the bytes held now.
func (b *Budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// Acquire takes n bytes, waiting at most the budget's wait for them, and
// returns the function that gives them back (call it once). what names
// the work in the error, which wraps ErrBudget: n is over the whole
// budget, or no room came in time.
func (b *Budget) Acquire(n int64, what string) (release func(), err error) {
	if n > b.max {
		return nil, fmt.Errorf("%s needs %d bytes, over the %d-byte budget: %w", what, n, b.max, ErrBudget)
	}
	n = max(n, 0)
	timer := time.NewTimer(b.wait)
	defer timer.Stop()
	for {
		b.mu.Lock()
		if b.used+n <= b.max {
			b.used += n
			b.mu.Unlock()
			var once sync.Once
			return func() { once.Do(func() { b.release(n) }) }, nil
		}
		ch, used := b.changed, b.used
		b.mu.Unlock()
		select {
		case <-ch:
		case <-timer.C:
			return nil, fmt.Errorf("%s needs %d bytes; %d of the %d-byte budget stayed in use for %v: %w", what, n, used, b.max, b.wait, ErrBudget)
		}
	}
}

func (b *Budget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}
