package discover

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"
)

// DefaultInterval is the Watcher's scan interval when Options leave it 0.
const DefaultInterval = time.Second

// Options configure a Watcher.
type Options struct {
	// ProcRoot is the proc file system (default "/proc").
	ProcRoot string
	// Interval is the time between scans (default DefaultInterval).
	Interval time.Duration
	// Paths are host_probes::library_paths, resolved again at every scan
	// (a library replaced by a new file is found again).
	Paths []string
	// Ldconfig adds the libraries `ldconfig -p` lists, again whenever
	// /etc/ld.so.cache changes.
	Ldconfig bool
	// NoProcs turns the /proc scan off (host_probes::scan_interval 0):
	// only Paths and ldconfig are watched.
	NoProcs bool
	// RescanEvery is passed to the Scanner (default DefaultRescanEvery).
	RescanEvery int
	// Logger gets source errors (each distinct one once) and findings
	// (default: none).
	Logger *zap.Logger
	// Processes, when set, is called after each /proc scan, from Run's
	// goroutine once the scan's new libraries were reported, with every
	// process the scan saw mapping a CUDA library (Scanner.Processes).
	Processes func([]Process)
}

// Stats say what a Watcher did.
type Stats struct {
	ScanStats
	// Rounds counts completed rounds over all sources.
	Rounds uint64
	// Libraries counts the distinct libraries reported.
	Libraries int
	// LdconfigRuns counts runs of ldconfig.
	LdconfigRuns uint64
}

// Watcher keeps finding CUDA libraries: in the configured paths, the
// ldconfig cache and the processes running now and later.
type Watcher struct {
	opts    Options
	log     *zap.Logger
	scanner *Scanner

	mu       sync.Mutex
	reported map[Key]bool
	rounds   uint64
	ldRuns   uint64

	// Used by the worker goroutine only.
	ldRan     bool
	ldMtime   time.Time
	ldLibs    []Library
	lastError map[string]string
}

// NewWatcher checks opts and returns a Watcher; it starts nothing.
func NewWatcher(opts Options) (*Watcher, error) {
	if opts.Interval < 0 {
		return nil, fmt.Errorf("discover: interval must not be negative, got %s", opts.Interval)
	}
	if opts.Interval == 0 {
		opts.Interval = DefaultInterval
	}
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if !opts.NoProcs {
		if _, err := os.Stat(opts.ProcRoot); err != nil {
			return nil, fmt.Errorf("discover: proc file system: %w", err)
		}
	}
	return &Watcher{
		opts:      opts,
		log:       opts.Logger,
		scanner:   NewScanner(ScanOptions{ProcRoot: opts.ProcRoot, RescanEvery: opts.RescanEvery, Logger: opts.Logger}),
		reported:  make(map[Key]bool),
		lastError: make(map[string]string),
	}, nil
}

// Run scans at once and then every Interval, and calls found for each
// library file not reported before, from Run's goroutine (found should
// return quickly: the next reports wait for it). A file is reported once
// per (dev, ino); a library that was replaced (a new inode) is reported
// again. Errors of one source are logged (each distinct one once) and do
// not stop the others. Run returns nil when ctx is done, without waiting
// for a scan in progress (a read of /proc can block on a process stuck in
// the kernel).
func (w *Watcher) Run(ctx context.Context, found func(Library)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan batch)
	go w.work(ctx, batches)
	for {
		select {
		case <-ctx.Done():
			return nil
		case b := <-batches:
			for _, l := range b.libs {
				if ctx.Err() != nil {
					return nil
				}
				w.mu.Lock()
				isNew := !w.reported[l.Key()]
				w.reported[l.Key()] = true
				w.mu.Unlock()
				if isNew {
					w.log.Info("discover: CUDA library found", zap.Stringer("library", l))
					found(l)
				}
			}
			if b.scanned && w.opts.Processes != nil && ctx.Err() == nil {
				w.opts.Processes(b.procs)
			}
		}
	}
}

// batch is what one round found.
type batch struct {
	libs    []Library
	procs   []Process // of the /proc scan, if scanned
	scanned bool      // the /proc scan ran and succeeded
}

// Stats returns what the Watcher did so far.
func (w *Watcher) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return Stats{
		ScanStats:    w.scanner.Stats(),
		Rounds:       w.rounds,
		Libraries:    len(w.reported),
		LdconfigRuns: w.ldRuns,
	}
}

// work runs rounds until ctx is done and hands their findings to Run.
func (w *Watcher) work(ctx context.Context, batches chan<- batch) {
	t := time.NewTicker(w.opts.Interval)
	defer t.Stop()
	for {
		b := w.round(ctx)
		select {
		case <-ctx.Done():
			return
		case batches <- b:
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// round queries every source once.
func (w *Watcher) round(ctx context.Context) batch {
	var b batch
	var libs []Library
	if len(w.opts.Paths) > 0 {
		l, err := FromConfig(w.opts.Paths)
		w.note("config", err)
		libs = append(libs, l...)
	}
	if w.opts.Ldconfig {
		libs = append(libs, w.ldconfig(ctx)...)
	}
	if !w.opts.NoProcs {
		l, err := w.scanner.Scan()
		w.note("procs", err)
		libs = append(libs, l...)
		if err == nil && w.opts.Processes != nil {
			b.procs, b.scanned = w.scanner.Processes(), true
		}
	}
	w.mu.Lock()
	w.rounds++
	w.mu.Unlock()
	b.libs = libs
	return b
}

// ldconfig runs ldconfig in the first round and then when its cache
// changed (or appeared, or went away).
func (w *Watcher) ldconfig(ctx context.Context) []Library {
	var mtime time.Time
	if fi, err := os.Stat(LdconfigCache); err == nil {
		mtime = fi.ModTime()
	}
	if w.ldRan && w.ldMtime.Equal(mtime) {
		return w.ldLibs
	}
	libs, err := FromLdconfig(ctx)
	w.note("ldconfig", err)
	w.mu.Lock()
	w.ldRuns++
	w.mu.Unlock()
	w.ldRan, w.ldMtime, w.ldLibs = true, mtime, libs
	return libs
}

// note logs err of source when it differs from the source's last error.
func (w *Watcher) note(source string, err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if w.lastError[source] == msg {
		return
	}
	w.lastError[source] = msg
	switch {
	case err == nil:
		w.log.Info("discover: source recovered", zap.String("source", source))
	case errors.Is(err, context.Canceled):
	default:
		w.log.Warn("discover: source failed", zap.String("source", source), zap.Error(err))
	}
}
