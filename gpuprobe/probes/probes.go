// Package probes holds gpuprobe's built-in GPU probe programs, written in
// eBPF C and compiled by clang into objects that are committed next to their
// sources (as cilium/ebpf's bpf2go does), so that the collector needs no
// clang at run time. `go generate ./gpuprobe/probes` rebuilds them; the tests
// rebuild them with clang and fail when a committed object is stale.
//
// kernel_phases (kernel_phases.c) measures each launch's device window on
// the GPU and writes one record.Exec per launch into a GPU ring buffer (map
// kp_exec, type 1527): launch id, earliest block start, latest block end,
// blocks and threads. The aggregation is done by the probes themselves: a
// per-block word in shared memory (map kp_block, type 1601) finds each
// block's last thread, a device-memory table (map kp_table, type 1503, never
// read by the host) collects the blocks of a launch in striped cells, and
// the launch's last block writes the record and resets its slot. Its
// sections target "*": every kernel of a module (gpuprobe/inject matches
// targets as patterns).
package probes

import (
	_ "embed"
	"fmt"
	"sort"

	"github.com/gpuprobe/gpuprobe/jit"
)

//go:generate clang -target bpf -O2 -g -Wall -Werror -mcpu=v3 -I../../jit/include -c kernel_phases.c -o kernel_phases.o

//go:embed kernel_phases.o
var kernelPhasesObj []byte

// KernelPhases is the name of the built-in warp timing probe set.
const KernelPhases = "kernel_phases"

// Map and program names of kernel_phases, for loaders and decoders.
const (
	KernelPhasesBlockMap = "kp_block"            // per-block array (1601, shared memory): the block's exit count, tag and start
	KernelPhasesTableMap = "kp_table"            // GPU array (1503), device memory only: per-launch cells
	KernelPhasesRingMap  = "kp_exec"             // GPU ring buffer (1527): record.Exec records
	KernelPhasesEntry    = "kernel_phases_entry" // entry program
	KernelPhasesExit     = "kernel_phases_exit"  // exit program
)

// KernelPhasesSlots is how many launches of one module kernel_phases tracks
// at once (KP_SLOTS in kernel_phases.c): launch id modulo this picks a
// launch's cells in kp_table, so launches that many ids apart must not
// execute at the same time.
const KernelPhasesSlots = 256

// KernelPhasesRingDevice says that kernel_phases should be compiled with
// device-side ring reservation (jit/ptx Options.RingDevice; shm/doc.go):
// a record then costs posted PCIe writes instead of a serialized
// sys-scope atomic. A loader that sets it allocates the ring's
// device block (shm.Ring.DeviceBlock) and stores its address in the
// ring_device global; while that global is 0 the probe uses the host
// protocol, so setting it is always safe.
const KernelPhasesRingDevice = true

// objects maps each built-in probe set to its embedded ELF object.
var objects = map[string][]byte{
	KernelPhases: kernelPhasesObj,
}

// KernelPhasesDeviceOnly lists the maps of kernel_phases that the host never
// reads; a loader puts them in device memory private to each module.
var KernelPhasesDeviceOnly = []string{KernelPhasesTableMap}

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
