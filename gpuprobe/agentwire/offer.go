package agentwire

import (
	"fmt"
	"time"

	"github.com/gpuprobe/gpuprobe/shm"
)

// Defaults of the agent server's connection limits (package agent's
// Options; agent::max_connections_per_uid is checked against
// DefaultMaxConns).
const (
	DefaultHandshakeTimeout = 5 * time.Second
	DefaultMaxPending       = 64
	DefaultMaxPendingPerUID = 8
	DefaultMaxConns         = 256
	DefaultMaxConnsPerUID   = 64
	DefaultFrameTimeout     = 5 * time.Second
	DefaultIdleTimeout      = 5 * time.Minute
)

// Defaults of the ring budget (package agent's RingLimits;
// agent::max_ring_memory and max_ring_memory_per_uid).
const (
	DefaultRingMemory       = 512 << 20
	DefaultRingMemoryPerUID = 128 << 20
)

// Offer is a region the owner hands to a client: an shm region, or (Region
// nil) any mappable file descriptor without an shm header, such as a
// BPF_F_MMAPABLE BPF map's fd (RoleKernelMap).
type Offer struct {
	Role   Role        // what the region is for
	Name   string      // e.g. the map name (<= 40 bytes)
	Region *shm.Region // the region; its memfd is sent, the region stays the owner's
	FD     int         // Region nil: the descriptor to send (it stays the owner's)
	Size   uint64      // Region nil: bytes the client maps, a multiple of 4096
	Kind   shm.Kind    // Region nil: the layout, for the descriptor (a kernel map: shm.KindArray)
}

// Descriptor returns the WELCOME descriptor of an offer and the fd to send.
func (o Offer) Descriptor() (RegionInfo, int, error) {
	if o.Region != nil {
		h := o.Region.Header()
		return RegionInfo{Role: o.Role, Kind: h.Kind, RegionSize: h.RegionSize, ID: h.ID, Name: o.Name}, int(o.Region.File().Fd()), nil
	}
	switch {
	case o.FD < 0:
		return RegionInfo{}, -1, fmt.Errorf("has no region and fd %d", o.FD)
	case o.Size == 0 || o.Size%pageSize != 0:
		return RegionInfo{}, -1, fmt.Errorf("fd %d: size %d is not a positive multiple of %d", o.FD, o.Size, pageSize)
	}
	return RegionInfo{Role: o.Role, Kind: o.Kind, Flags: FlagNoHeader, RegionSize: o.Size, Name: o.Name}, o.FD, nil
}

// pageSize is the unit of headerless regions' sizes.
const pageSize = 4096

// KernelMapSize is the Size to offer for a BPF_F_MMAPABLE array of
// maxEntries values of valueSize bytes: its mmapable bytes, max_entries ×
// round_up(value_size, 8) rounded up to the page size (Linux's layout).
func KernelMapSize(valueSize, maxEntries uint32) uint64 {
	n := uint64(maxEntries) * ((uint64(valueSize) + 7) &^ 7)
	return (n + pageSize - 1) &^ (pageSize - 1)
}
