package receiver

import (
	"math"
	"runtime/debug"
	"testing"

	"go.uber.org/zap"
)

// TestMemoryBudget: the images' and the work's halves add up to the
// budget, and the stated bound is the budget plus 512 MiB.
func TestMemoryBudget(t *testing.T) {
	for _, b := range []uint64{16 << 20, 128<<20 + 1, 1 << 30} {
		if got := uint64(imageMemory(b) + patchMemory(b)); got != b {
			t.Errorf("budget %d: halves add to %d", b, got)
		}
		if got := memoryBound(b); got != int64(b)+512<<20 {
			t.Errorf("budget %d: bound %d, want budget + 512 MiB", b, got)
		}
	}
}

// TestSetMemoryLimit: with no limit set the receiver sets the bound; a
// limit GOMEMLIMIT (or anyone) set is kept.
func TestSetMemoryLimit(t *testing.T) {
	old := debug.SetMemoryLimit(math.MaxInt64)
	defer debug.SetMemoryLimit(old)
	setMemoryLimit(zap.NewNop(), 128<<20)
	if got := debug.SetMemoryLimit(-1); got != memoryBound(128<<20) {
		t.Fatalf("limit %d, want %d", got, memoryBound(128<<20))
	}
	debug.SetMemoryLimit(1 << 40)
	setMemoryLimit(zap.NewNop(), 128<<20)
	if got := debug.SetMemoryLimit(-1); got != 1<<40 {
		t.Fatalf("a limit already set was changed to %d", got)
	}
}
