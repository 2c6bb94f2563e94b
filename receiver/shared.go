package receiver

import (
	"context"
	"sync"

	"go.opentelemetry.io/collector/component"
)

// lifecycle is what a shared instance does on its first Start and its last
// Shutdown.
type lifecycle interface {
	start(ctx context.Context, host component.Host) error
	shutdown(ctx context.Context) error
}

// shared is a ref-counted map of instances keyed by configuration: every
// acquire of a key returns a new handle on the same instance. The instance
// starts with the first handle's Start and shuts down when the last started
// handle shuts down (or when every handle has shut down), after which the key
// is forgotten and a later acquire builds a fresh instance.
type shared[K comparable, V lifecycle] struct {
	mu sync.Mutex
	m  map[K]*entry[K, V]
}

type entry[K comparable, V lifecycle] struct {
	owner   *shared[K, V]
	key     K
	v       V
	handles int // handles not yet shut down
	started int // handles started and not yet shut down
	running bool
}

func newShared[K comparable, V lifecycle]() *shared[K, V] {
	return &shared[K, V]{m: map[K]*entry[K, V]{}}
}

// handle is one signal's view of a shared receiver; it is the component
// the collector starts and stops. Start and Shutdown are idempotent.
type handle struct {
	r *gpuReceiver
	e interface {
		start(ctx context.Context, host component.Host) error
		stop(ctx context.Context, wasStarted bool) error
	}
	// flush (before stop) and detach (after) end this signal's stream
	// when its handle is shut down: the collector may stop this signal's
	// exporters while the other signal's handle keeps the receiver running.
	flush  func(ctx context.Context)
	detach func()
	mu     sync.Mutex
	up     bool
	down   bool
}

// Start starts the shared receiver if this is its first started handle.
func (h *handle) Start(ctx context.Context, host component.Host) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.up || h.down {
		return nil
	}
	if err := h.e.start(ctx, host); err != nil {
		return err
	}
	h.up = true
	return nil
}

// Shutdown releases this handle; the last one shuts the receiver down.
func (h *handle) Shutdown(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.down {
		return nil
	}
	h.down = true
	if h.flush != nil && h.up {
		h.flush(ctx)
	}
	err := h.e.stop(ctx, h.up) // the last handle drains to its consumer first
	if h.detach != nil {
		h.detach()
	}
	return err
}

// acquire returns a new handle on the instance for k, building it with mk if
// there is none.
func (s *shared[K, V]) acquire(k K, mk func() (V, error)) (*entry[K, V], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[k]
	if !ok {
		v, err := mk()
		if err != nil {
			return nil, err
		}
		e = &entry[K, V]{owner: s, key: k, v: v}
		s.m[k] = e
	}
	e.handles++
	return e, nil
}

// Len is the number of live instances (for tests).
func (s *shared[K, V]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

func (e *entry[K, V]) start(ctx context.Context, host component.Host) error {
	e.owner.mu.Lock()
	defer e.owner.mu.Unlock()
	e.started++
	if e.running {
		return nil
	}
	if err := e.v.start(ctx, host); err != nil {
		e.started--
		return err
	}
	e.running = true
	return nil
}

func (e *entry[K, V]) stop(ctx context.Context, wasStarted bool) error {
	e.owner.mu.Lock()
	defer e.owner.mu.Unlock()
	e.handles--
	if wasStarted {
		e.started--
	}
	if e.started > 0 && e.handles > 0 {
		return nil
	}
	var err error
	if e.running && e.started == 0 {
		e.running = false
		err = e.v.shutdown(ctx)
	}
	if e.handles == 0 {
		delete(e.owner.m, e.key)
	}
	return err
}
