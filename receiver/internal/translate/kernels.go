package translate

// Kernel names: the shim's name records (function handle → mangled name),
// demangled once per name, and the per-kernel series of their process
// they key.

import (
	"strconv"
	"strings"

	"github.com/gpuprobe/gpuprobe/record"
)

// onKernelName records a function handle's kernel name. A later record
// for the handle replaces it: the shim names a handle again when the
// driver reuses it for another kernel, and sends a name whole after a cut
// copy when its names ring was full; a launch that came first was named by
// its handle. Only a cut copy of the name the handle has changes nothing.
// Launches already pending keep the kernel they were bound to.
func (ct *clientTable) onKernelName(src uint32, k *record.KernelName) {
	c := ct.clientOf(src)
	if k.Truncated {
		ct.counters.NamesTruncated++
	}
	old, known := c.kernels[k.Function]
	if known && (old.mangled == k.Name || (k.Truncated && strings.HasPrefix(old.mangled, k.Name))) {
		return
	}
	mangled, name := k.Name, ""
	if k.Truncated {
		// A cut mangled name does not demangle: show it as it is, marked.
		mangled += TruncatedMarker
		name = mangled
	} else {
		name = ct.series.demangle(k.Name)
	}
	if !known {
		ct.makeKernelRoom(c)
	}
	c.kernels[k.Function] = &kernel{
		mangled: mangled,
		hash:    record.NameHash(k.Name),
		name:    name,
		series:  ct.procOf(src).seriesFor(name),
		include: ct.o.Filter.Match(k.Name, name),
	}
}

// Bounds of the name caches: function handles remembered per client and
// demangled names cached.
const (
	maxKernelHandles = 1 << 14
	maxNameCache     = 1 << 14
)

// demangle returns the span name of a mangled name, cached: every process
// (source) names the same kernels again.
func (sr *seriesStore) demangle(mangled string) string {
	if n, ok := sr.names[mangled]; ok {
		return n
	}
	n := sr.o.Demangle(mangled)
	if len(sr.names) >= maxNameCache {
		clear(sr.names)
	}
	sr.names[mangled] = n
	return n
}

// makeKernelRoom keeps client c's handle → kernel bindings below
// maxKernelHandles: when full, it drops those no pending launch uses, and
// all of them if that leaves the map over 3/4 full (so a client cannot make
// every record rescan the queue). A later launch of a forgotten handle is
// named by its handle; pending launches keep their kernel.
func (ct *clientTable) makeKernelRoom(c *client) {
	if len(c.kernels) < maxKernelHandles {
		return
	}
	for fn, k := range c.kernels {
		if k.live == 0 {
			delete(c.kernels, fn)
		}
	}
	if len(c.kernels) > maxKernelHandles*3/4 {
		clear(c.kernels)
	}
}

func (ct *clientTable) kernelOf(src uint32, fn uint64) *kernel {
	c := ct.clientOf(src)
	if k, ok := c.kernels[fn]; ok {
		return k
	}
	// A launch of a function never named: name it by its handle.
	name := "function@0x" + strconv.FormatUint(fn, 16)
	k := &kernel{mangled: name, name: name, series: ct.procOf(src).seriesFor(name), include: ct.o.Filter.Match(name)}
	ct.makeKernelRoom(c)
	c.kernels[fn] = k
	return k
}
