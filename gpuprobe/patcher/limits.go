package patcher

import (
	"bytes"
	"fmt"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin"
	"github.com/gpuprobe/gpuprobe/gpuprobe/ptxmod"
)

// Limits bound what one PATCH may cost and what all of them together
// may hold. Everything a client sends is checked against them before the
// work it would cost is done; a request past one is answered NOPATCH
// (code 3) with a message that names the limit, and the application
// loads its original image.
type Limits struct {
	// Inflate bounds decompressing the PTX entry (its size, its ratio).
	Inflate fatbin.Limits
	// Parse bounds the PTX text: bytes, tokens and functions.
	Parse ptxmod.Limits
	// MaxKernels bounds the .entry directives of the text, counted before
	// parsing: each patched kernel costs about PerKernel bytes.
	MaxKernels int
	// PerKernel is the memory charged per .entry for the injection (the
	// probes' text spliced into it and the edits); kernel_phases, inlined,
	// measured 73 KB allocated and 12 KB of output a kernel.
	PerKernel int64
	// MaxMemory bounds the bytes charged to all PATCH work in flight at
	// once (inflated text, ptxmod.Cost of its parse, PerKernel × kernels).
	MaxMemory int64
	// MaxWait bounds the wait for room in MaxMemory; past it the request
	// is answered NOPATCH.
	MaxWait time.Duration
}

// DefaultLimits are the limits of a Patcher whose Options.Limits is zero.
// 64 MiB of PTX and 8192 kernels are above what the CUDA libraries that
// ship PTX hold per module; one such module fits MaxMemory alone.
var DefaultLimits = Limits{
	Inflate:    fatbin.Limits{MaxEntry: 64 << 20, MaxTotal: 64 << 20, MaxRatio: fatbin.DefaultLimits.MaxRatio},
	Parse:      ptxmod.Limits{MaxBytes: 64 << 20, MaxTokens: 1 << 24, MaxFuncs: 1 << 16},
	MaxKernels: 8192,
	PerKernel:  80 << 10,
	MaxMemory:  1 << 30,
	MaxWait:    2 * time.Second,
}

// withDefaults fills the zero fields of l from DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.Inflate == (fatbin.Limits{}) {
		l.Inflate = d.Inflate
	}
	if l.Parse == (ptxmod.Limits{}) {
		l.Parse = d.Parse
	}
	if l.MaxKernels == 0 {
		l.MaxKernels = d.MaxKernels
	}
	if l.PerKernel == 0 {
		l.PerKernel = d.PerKernel
	}
	if l.MaxMemory == 0 {
		l.MaxMemory = d.MaxMemory
	}
	if l.MaxWait == 0 {
		l.MaxWait = d.MaxWait
	}
	return l
}

// entryDirective is what the kernel count looks for.
var entryDirective = []byte(".entry")

// admit checks the PTX text against the limits and reserves what
// patching it costs; release gives it back.
func (p *Patcher) admit(text []byte) (release func(), err error) {
	l := p.opts.Limits
	if k := bytes.Count(text, entryDirective); k > l.MaxKernels {
		return nil, noPatch(agentwire.NoPatchError, "%d bytes of PTX with %d .entry directives, over the %d-kernel limit (patcher Limits.MaxKernels)", len(text), k, l.MaxKernels)
	}
	cost, err := ptxmod.Cost(text, l.Parse)
	if err != nil {
		return nil, noPatch(agentwire.NoPatchError, "%d bytes of PTX: %v (patcher Limits.Parse)", len(text), err)
	}
	cost += int64(len(text)) + int64(bytes.Count(text, entryDirective))*l.PerKernel
	return p.reserve(cost, fmt.Sprintf("patching %d bytes of PTX", len(text)))
}

// reserve takes n bytes of the patch memory, as a NOPATCH when it cannot.
func (p *Patcher) reserve(n int64, what string) (func(), error) {
	rel, err := p.mem.Acquire(n, what)
	if err != nil {
		return nil, noPatch(agentwire.NoPatchError, "%v (patcher Limits.MaxMemory)", err)
	}
	return rel, nil
}

// inflateCost is what inflating an entry may allocate: nothing for text
// stored as is; for a compressed one, up to twice the claimed size for
// the output growing by doubling, and a zstd window as large as the
// claim (single-segment frames), all capped by l.MaxEntry.
func inflateCost(e *fatbin.Entry, l fatbin.Limits) int64 {
	if e.Compression() == fatbin.CompressionNone {
		return 0
	}
	return 3 * int64(min(e.Size(), uint64(l.MaxEntry)))
}
