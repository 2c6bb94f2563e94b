package receiver

import (
	"math"
	"runtime/debug"

	"go.uber.org/zap"
)

// The patching memory budget (agent::max_patch_memory) is split between
// the PATCH images the agent holds (agent Options.ImageMemory) and the
// work of inflating, parsing and patching them (patcher.Limits.MaxMemory):
// half each, so that together they stay under the key.
func imageMemory(budget uint64) int64 { return int64(budget / 2) }
func patchMemory(budget uint64) int64 { return int64(budget - budget/2) }

// cacheMemory bounds the injection cache (patcher.Options.CacheBytes).
const cacheMemory = 256 << 20

// restMemory is what the rest of the collector may use beyond patching:
// rings, per-client state, pdata in flight, the runtime (measured at rest
// and under the adversarial suite's other classes: 37-277 MiB).
const restMemory = 256 << 20

// memoryBound is the collector's stated memory bound for a patching
// budget (docs/security.md): patching, the injection cache and the rest.
func memoryBound(budget uint64) int64 {
	return int64(min(budget, math.MaxInt64/4)) + cacheMemory + restMemory
}

// setMemoryLimit sets the Go runtime's soft memory limit to the stated
// bound unless GOMEMLIMIT set one: the budgets bound the live heap, and
// the limit makes the collector collect its garbage before its resident
// memory passes the bound (a soft limit: it never fails an allocation).
func setMemoryLimit(log *zap.Logger, budget uint64) {
	if debug.SetMemoryLimit(-1) != math.MaxInt64 {
		return // GOMEMLIMIT (or another component) chose
	}
	b := memoryBound(budget)
	debug.SetMemoryLimit(b)
	log.Info("gpuprobe: Go soft memory limit set to the stated bound (GOMEMLIMIT overrides)",
		zap.Int64("bytes", b), zap.Uint64("agent::max_patch_memory", budget))
}
