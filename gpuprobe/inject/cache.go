package inject

import (
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"sync"

	"github.com/gpuprobe/gpuprobe/jit"
)

// Key identifies an injection: the SHA-256 of the module, the program set
// (names, sections, instructions, map definitions) and the options.
type Key [sha256.Size]byte

// KeyOf computes the cache key of an injection.
func KeyOf(module []byte, progs []*jit.Program, opts Options) Key {
	h := sha256.New()
	writeBytes(h, module)
	writeInt(h, uint64(len(progs)))
	for _, p := range progs {
		hashProgram(h, p)
	}
	// Every option changes the output; %#v spells out each field.
	fmt.Fprintf(h, "%#v", opts)
	var k Key
	h.Sum(k[:0])
	return k
}

func writeInt(h hash.Hash, v uint64) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	h.Write(b[:])
}

func writeBytes(h hash.Hash, b []byte) {
	writeInt(h, uint64(len(b)))
	h.Write(b)
}

func hashProgram(h hash.Hash, p *jit.Program) {
	if p == nil {
		writeInt(h, 0)
		return
	}
	writeBytes(h, []byte(p.Name))
	writeBytes(h, []byte(p.Section))
	writeInt(h, uint64(p.Kind))
	writeBytes(h, []byte(p.Target))
	writeInt(h, uint64(len(p.Insns)))
	for i := range p.Insns {
		ins := &p.Insns[i]
		writeInt(h, uint64(ins.OpCode))
		writeInt(h, uint64(ins.Dst)|uint64(ins.Src)<<8|uint64(uint16(ins.Offset))<<16)
		writeInt(h, uint64(ins.Constant))
		writeBytes(h, []byte(ins.Reference()))
	}
	writeInt(h, uint64(len(p.Maps)))
	for _, m := range p.Maps {
		writeBytes(h, []byte(m.Name))
		writeInt(h, uint64(m.Type)|uint64(m.Flags)<<32)
		writeInt(h, uint64(m.KeySize)|uint64(m.ValueSize)<<32)
		writeInt(h, uint64(m.MaxEntries))
	}
}

// Injector is Inject with a bounded LRU cache of results keyed by KeyOf,
// safe for concurrent use. Failures are not cached.
type Injector struct {
	mu         sync.Mutex
	maxEntries int
	maxBytes   int
	bytes      int
	lru        *list.List // of *cacheEntry, most recent first
	index      map[Key]*list.Element
	stats      CacheStats
}

// CacheStats counts cache outcomes.
type CacheStats struct {
	Hits, Misses, Evictions uint64
	Entries, Bytes          int
}

type cacheEntry struct {
	key    Key
	module []byte
	report Report
	size   int // bytes counted against maxBytes: the module and reportSize
}

// reportSize estimates the bytes a cached Report holds: its kernels'
// (a module may have thousands, whose names are client-chosen), programs'
// and globals' descriptions.
func reportSize(r *Report) int {
	n := 256
	for _, k := range r.Kernels {
		n += 160 + len(k.Name) + 16*(len(k.Entry)+len(k.Exit)+len(k.MemCapture))
	}
	for _, p := range r.Programs {
		n += 96 + len(p.Name) + len(p.Func) + 16*len(p.Kernels)
	}
	for _, u := range r.Unmatched {
		n += 16 + len(u)
	}
	return n + 128*len(r.Globals)
}

// NewInjector returns an Injector that keeps at most maxEntries results
// and maxBytes bytes of patched PTX (the oldest go first).
func NewInjector(maxEntries, maxBytes int) (*Injector, error) {
	if maxEntries <= 0 || maxBytes <= 0 {
		return nil, fmt.Errorf("inject: cache bounds must be positive (entries %d, bytes %d)", maxEntries, maxBytes)
	}
	return &Injector{maxEntries: maxEntries, maxBytes: maxBytes, lru: list.New(), index: map[Key]*list.Element{}}, nil
}

// Inject returns the cached result for the same module, programs and
// options, or runs Inject and caches its result. The returned module is
// the caller's own copy; the report's slices are shared with the cache and
// must not be modified. Report.Cached says where the result came from.
func (in *Injector) Inject(module []byte, progs []*jit.Program, opts Options) ([]byte, *Report, error) {
	key := KeyOf(module, progs, opts)
	in.mu.Lock()
	if el, ok := in.index[key]; ok {
		in.lru.MoveToFront(el)
		in.stats.Hits++
		e := el.Value.(*cacheEntry)
		out, rep := append([]byte(nil), e.module...), e.report
		in.mu.Unlock()
		rep.Cached = true
		return out, &rep, nil
	}
	in.stats.Misses++
	in.mu.Unlock()

	out, rep, err := Inject(module, progs, opts)
	if err != nil {
		return nil, nil, err
	}
	in.add(key, out, rep)
	return out, rep, nil
}

func (in *Injector) add(key Key, module []byte, rep *Report) {
	in.mu.Lock()
	defer in.mu.Unlock()
	size := len(module) + reportSize(rep)
	if _, ok := in.index[key]; ok || size > in.maxBytes {
		return
	}
	e := &cacheEntry{key: key, module: append([]byte(nil), module...), report: *rep, size: size}
	in.index[key] = in.lru.PushFront(e)
	in.bytes += size
	for in.lru.Len() > in.maxEntries || in.bytes > in.maxBytes {
		old := in.lru.Back()
		oe := old.Value.(*cacheEntry)
		in.lru.Remove(old)
		delete(in.index, oe.key)
		in.bytes -= oe.size
		in.stats.Evictions++
	}
}

// Stats returns the cache counters.
func (in *Injector) Stats() CacheStats {
	in.mu.Lock()
	defer in.mu.Unlock()
	s := in.stats
	s.Entries, s.Bytes = in.lru.Len(), in.bytes
	return s
}
