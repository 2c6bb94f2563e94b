package patcher

import (
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"sync"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/inject"
	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/ptx"
	"github.com/gpuprobe/gpuprobe/shm"
)

// Skip says that one program was left out of one module because it could
// not be patched into it; the module was patched with the others.
type Skip struct {
	Index int    // the program's index in Options.Programs
	Key   string // Options.Keys[Index], or "program NAME"
	Err   error  // why (an *agentwire.NoPatch)
}

// key names program i for logs: its config key, else its name.
func (p *Patcher) key(i int) string {
	if i < len(p.opts.Keys) && p.opts.Keys[i] != "" {
		return p.opts.Keys[i]
	}
	return "program " + p.opts.Programs[i].Name
}

// patchIsolated patches the text with every program that can be patched
// into it: a program whose own error (verifying, compiling, binding its
// maps) stops the module is left out, reported through Options.OnSkip, and
// the module is injected again without it (a new cache key, so the
// injection cache never holds a set with a failing program). Only when
// every program fails, or the error belongs to no program, is the answer
// NOPATCH.
func (p *Patcher) patchIsolated(text []byte, opts inject.Options, bind Binder) (*agentwire.Patched, error) {
	idx := make([]int, len(p.opts.Programs)) // position in progs → index in Options.Programs
	for i := range idx {
		idx[i] = i
	}
	progs := p.opts.Programs
	for {
		a, bad, err := p.patchWith(text, progs, opts, bind)
		if err == nil {
			return a, nil
		}
		bad = p.sameKey(bad, idx)
		if len(bad) == 0 || len(bad) >= len(progs) {
			return nil, err
		}
		var keepP []*jit.Program
		var keepI []int
		for k, pr := range progs {
			if slices.Contains(bad, k) {
				p.skip(Skip{Index: idx[k], Key: p.key(idx[k]), Err: err})
				continue
			}
			keepP, keepI = append(keepP, pr), append(keepI, idx[k])
		}
		progs, idx = keepP, keepI
	}
}

// sameKey adds to bad (positions in the current set, whose indices in
// Options.Programs are idx) every program with the key of one in it: the
// programs of one probe (kernel_phases' entry and exit) go together.
func (p *Patcher) sameKey(bad, idx []int) []int {
	keys := map[string]bool{}
	for _, k := range bad {
		keys[p.key(idx[k])] = true
	}
	for k, i := range idx {
		if keys[p.key(i)] && !slices.Contains(bad, k) {
			bad = append(bad, k)
		}
	}
	return bad
}

// skip reports a program left out of a module.
func (p *Patcher) skip(s Skip) {
	if p.opts.OnSkip != nil {
		p.opts.OnSkip(s)
	}
}

// missTracker wraps a Binder and remembers the last map it had no
// binding for: when globals fails on a missing region, that map is the
// cause (globals returns at the first such map).
type missTracker struct {
	bind Binder
	last string
}

func (m *missTracker) binder(name string) (Binding, bool) {
	b, ok := m.bind(name)
	if !ok {
		m.last = name
	}
	return b, ok
}

// culprits returns the indices in progs of the programs that use the map
// globals failed on (by definition, so two objects' maps of the same name
// are told apart), or nil when the failure was not a missing region.
func (m *missTracker) culprits(err error, progs []*jit.Program, gs []inject.Global) []int {
	var np *agentwire.NoPatch
	if m.last == "" || !errors.As(err, &np) || !strings.HasPrefix(np.Message, "map "+m.last+" of program ") {
		return nil // a kernel map's miss is no error: the error came later
	}
	var out []int
	for _, g := range gs {
		if g.MapDef == nil || g.MapDef.Name != m.last {
			continue
		}
		for k, pr := range progs {
			if slices.Contains(pr.Maps, g.MapDef) && !slices.Contains(out, k) {
				out = append(out, k)
			}
		}
	}
	return out
}

// bindMailbox points the programs' mailbox globals (out, built from gs by
// globals, which leaves them 0) at the client's mailbox region, and their
// mailbox-locks globals at the region's lock block (shm "Mailbox"), if it
// has one. Without a lock block (a binding without RingBlock) both stay 0
// and host calls fail fast: requesters of one mailbox must share locks.
func bindMailbox(out []agentwire.PatchedGlobal, gs []inject.Global, bind Binder) {
	kinds := map[string]ptx.GlobalKind{}
	for _, g := range gs {
		if g.Kind == ptx.GlobalMailbox || g.Kind == ptx.GlobalMailboxLocks {
			kinds[g.Name] = g.Kind
		}
	}
	if len(kinds) == 0 {
		return
	}
	b, ok := bind(MailboxBinding)
	if !ok || len(b.RingBlock) < shm.MailboxLocksHeader {
		return
	}
	slots := binary.LittleEndian.Uint32(b.RingBlock[shm.MailboxLocksSlots:])
	for i := range out {
		switch kinds[out[i].Name] {
		case ptx.GlobalMailbox:
			out[i].Kind, out[i].Region, out[i].Value = agentwire.GlobalRegion, b.Region, 0
		case ptx.GlobalMailboxLocks:
			out[i].Kind, out[i].Region, out[i].Value = agentwire.GlobalRingBlock, b.Region, 0
			out[i].Size = shm.MailboxLocksHeader + uint64(slots)*shm.MailboxLockSize
			out[i].Init = b.RingBlock
		}
	}
}

// maxFailed bounds the failCache: a set of entries is dropped whole when
// it is full (failures are rare; the cache only spares recompiling the
// same failing program for every process that loads the same module).
const maxFailed = 256

// failCache remembers, by injection key (module, programs, options), which
// program's own error made the injection fail: the injection cache keeps
// only successes, so without it every PATCH of that module would compile
// the failing program again before leaving it out.
type failCache struct {
	mu sync.Mutex
	m  map[inject.Key]failure
}

type failure struct {
	index int
	err   error
}

func (c *failCache) get(k inject.Key) (failure, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.m[k]
	return f, ok
}

func (c *failCache) put(k inject.Key, index int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxFailed {
		c.m = map[inject.Key]failure{}
	}
	c.m[k] = failure{index, err}
}
