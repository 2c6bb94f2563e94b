// Package probes holds gpuprobe's built-in GPU probe programs, written in
// eBPF C and compiled by clang into objects that are committed next to their
// sources (as cilium/ebpf's bpf2go does), so that the collector needs no
// clang at run time. `go generate ./gpuprobe/probes` rebuilds them; the tests
// rebuild them with clang and fail when a committed object is stale.
//
// kernel_phases (kernel_phases.c) times every warp of the kernels it is
// attached to: the entry program stores the warp's start time in a per-warp
// array (map kp_start, type 1600), the exit program writes one record.Warp
// per warp into a GPU ring buffer (map kp_warps, type 1527) with the launch
// id, the block, the warp index, the SM, the active lanes, the start, the
// first and the last lane exit. Its sections target "*": every kernel of a
// module (gpuprobe/inject matches targets as patterns).
package probes

import (
	_ "embed"
	"fmt"
	"sort"

	"github.com/gpuprobe/gpuprobe/jit"
)

//go:generate clang -target bpf -O2 -g -Wall -Werror -mcpu=v3 -I../../testdata/bpf -c kernel_phases.c -o kernel_phases.o

//go:embed kernel_phases.o
var kernelPhasesObj []byte

// KernelPhases is the name of the built-in warp timing probe set.
const KernelPhases = "kernel_phases"

// Map and program names of kernel_phases, for loaders and decoders.
const (
	KernelPhasesStartMap = "kp_start"            // per-warp array (1600): the warp's start time
	KernelPhasesRingMap  = "kp_warps"            // GPU ring buffer (1527): record.Warp records
	KernelPhasesEntry    = "kernel_phases_entry" // entry program
	KernelPhasesExit     = "kernel_phases_exit"  // exit program
)

// KernelPhasesRingDevice says that kernel_phases should be compiled with
// device-side ring reservation (jit/ptx Options.RingDevice; shm/doc.go):
// one record per warp then costs posted PCIe writes instead of a
// serialized sys-scope atomic. A loader that sets it allocates the ring's
// device block (shm.Ring.DeviceBlock) and stores its address in the
// ring_device global; while that global is 0 the probe uses the host
// protocol, so setting it is always safe.
const KernelPhasesRingDevice = true

// objects maps each built-in probe set to its embedded ELF object.
var objects = map[string][]byte{
	KernelPhases: kernelPhasesObj,
}

// Names lists the built-in probe sets.
func Names() []string {
	out := make([]string, 0, len(objects))
	for n := range objects {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Object returns the embedded ELF object of a built-in probe set.
func Object(name string) ([]byte, error) {
	obj, ok := objects[name]
	if !ok {
		return nil, fmt.Errorf("probes: no built-in probe set %q (have %v)", name, Names())
	}
	return obj, nil
}

// Load returns the programs of a built-in probe set, freshly loaded (the
// caller may change them, e.g. their Target).
func Load(name string) ([]*jit.Program, error) {
	obj, err := Object(name)
	if err != nil {
		return nil, err
	}
	progs, err := jit.LoadELFBytes(obj)
	if err != nil {
		return nil, fmt.Errorf("probes: %s: %w", name, err)
	}
	return progs, nil
}
