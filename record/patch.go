package record

import "fmt"

// PatchSize is the size of a Patch record.
const PatchSize = 48

// PatchOutcome is how the shim's asynchronous patch of one module ended.
type PatchOutcome uint16

// Patch outcomes.
const (
	PatchSwapped     PatchOutcome = 0 // the patched kernels were swapped in
	PatchUnpatched   PatchOutcome = 1 // the collector sent no patched image
	PatchFailed      PatchOutcome = 2 // loading or binding the patched image failed
	PatchDropped     PatchOutcome = 3 // the application unloaded the module first
	patchOutcomeLast              = PatchDropped
)

var patchOutcomeNames = [...]string{"swapped", "unpatched", "failed", "dropped"}

// String is the outcome's gpuprobe.patch.outcome value.
func (o PatchOutcome) String() string {
	if o <= patchOutcomeLast {
		return patchOutcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", uint16(o))
}

// PatchCache is what the shim's cache of compiled patched images did for
// one module.
type PatchCache uint16

// Patch cache results.
const (
	PatchCacheOff     PatchCache = 0 // no cache (GPUPROBE_CACHE_DIR unset or unusable), or never reached
	PatchCacheHit     PatchCache = 1 // the compiled image came from the cache: no JIT
	PatchCacheMiss    PatchCache = 2 // compiled, then stored
	PatchCacheCorrupt PatchCache = 3 // an entry failed its check: removed, compiled again
	patchCacheLast               = PatchCacheCorrupt
)

var patchCacheNames = [...]string{"off", "hit", "miss", "corrupt"}

// String is the result's gpuprobe.patch.cache value.
func (c PatchCache) String() string {
	if c <= patchCacheLast {
		return patchCacheNames[c]
	}
	return fmt.Sprintf("cache(%d)", uint16(c))
}

// Patch is the shim's account of one module it patched off the
// application's threads (type 16, 48 bytes), written by its patch thread
// when the job ends: the time spent asking the collector and compiling,
// and what the cache did. Patching in place on the loading thread
// (GPUPROBE_PATCH_WAIT_MS) writes none.
//
//	offset  0  prefix {u16 type = 16, u16 version = 1, u32 size = 48}
//	offset  8  u64 module      the application's CUmodule or CUlibrary
//	offset 16  u64 request_ns  asking the collector for the patched image
//	offset 24  u64 compile_ns  loading it: the driver's JIT or link, or the cached image
//	offset 32  u32 pid         process id (tgid)
//	offset 36  u32 kernels     patched kernels swapped in
//	offset 40  u16 outcome     PatchOutcome
//	offset 42  u16 cache       PatchCache
//	offset 44  u32 reserved    zero
type Patch struct {
	Module    uint64
	RequestNS uint64
	CompileNS uint64
	PID       uint32
	Kernels   uint32
	Outcome   PatchOutcome
	Cache     PatchCache
}

// Decode fills p from the record in b.
func (p *Patch) Decode(b []byte) error {
	if err := check(b, TypePatch, PatchSize); err != nil {
		return err
	}
	*p = Patch{
		Module:    le64(b, 8),
		RequestNS: le64(b, 16),
		CompileNS: le64(b, 24),
		PID:       le32(b, 32),
		Kernels:   le32(b, 36),
		Outcome:   PatchOutcome(le16(b, 40)),
		Cache:     PatchCache(le16(b, 42)),
	}
	if p.Outcome > patchOutcomeLast {
		return &DecodeError{Type: TypePatch, Field: "outcome", Offset: 40, Reason: fmt.Sprintf("unknown outcome %d", uint16(p.Outcome))}
	}
	if p.Cache > patchCacheLast {
		return &DecodeError{Type: TypePatch, Field: "cache", Offset: 42, Reason: fmt.Sprintf("unknown cache result %d", uint16(p.Cache))}
	}
	if le32(b, 44) != 0 {
		return &DecodeError{Type: TypePatch, Field: "reserved", Offset: 44, Reason: "must be zero"}
	}
	return nil
}

// Append appends the encoded record to b.
func (p *Patch) Append(b []byte) []byte {
	b, r := grow(b, PatchSize)
	putPrefix(r, TypePatch, PatchSize)
	put64(r, 8, p.Module)
	put64(r, 16, p.RequestNS)
	put64(r, 24, p.CompileNS)
	put32(r, 32, p.PID)
	put32(r, 36, p.Kernels)
	put16(r, 40, uint16(p.Outcome))
	put16(r, 42, uint16(p.Cache))
	return b
}
