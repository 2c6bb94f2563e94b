package jit

import (
	"io"
	"sync/atomic"
	"testing"

	"github.com/cilium/ebpf"
)

// CountParses makes every parse by cilium/ebpf's ELF reader add one to the
// counter it returns, until the test ends.
func CountParses(t testing.TB) *atomic.Int64 {
	var n atomic.Int64
	orig := loadCollectionSpec
	loadCollectionSpec = func(r io.ReaderAt) (*ebpf.CollectionSpec, error) {
		n.Add(1)
		return orig(r)
	}
	t.Cleanup(func() { loadCollectionSpec = orig })
	return &n
}
