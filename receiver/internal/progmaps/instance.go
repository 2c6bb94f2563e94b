package progmaps

import (
	"errors"
	"fmt"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/shm"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"golang.org/x/sys/unix"
)

// Instance is one application's set of map regions: every client of the
// agent socket gets its own, so values and records never mix between
// processes. NewHostInstance makes the one Instance of the host programs'
// kernel maps.
type Instance struct {
	PID     uint32    // the application's pid
	Src     uint32    // the receiver's source id of the application's launch ring
	Process string    // the application's process name (from /proc at connect)
	Created time.Time // start time of the cumulative metrics
	// Resource is the application's process resource, that of its other
	// spans; the zero Map: one of PID and Process.
	Resource pcommon.Map
	// Host is true for the one instance of host programs' kernel maps
	// (NewHostInstance): its data is not per application, so metrics carry
	// no process.pid and spans take the process from the record.
	Host   bool
	arrays []arrayInst
	rings  []ringInst
}

type arrayInst struct {
	def  *Def
	arr  *shm.Array  // shm arrays; nil for a kernel map
	src  arraySource // arr, or a kernel array
	kmem []byte      // kernel arrays: the mmap of the map, if any, to unmap
}

type ringInst struct {
	def      *Def
	ring     *shm.Ring
	cons     *shm.Consumer
	lastDrop uint64      // ring drop counters already reported
	lastBad  uint64      // corrupt records already reported
	kr       *kernelRing // a kernel BPF_MAP_TYPE_RINGBUF instead of ring/cons
}

// NewInstance creates the regions of defs for one application.
func NewInstance(defs []*Def, pid, src uint32, process string, now time.Time) (*Instance, error) {
	in := &Instance{PID: pid, Src: src, Process: process, Created: now}
	for _, d := range defs {
		spec := shm.Spec{Kind: d.Kind, ValueSize: d.ValueSize, MaxEntries: d.Keys, Lanes: d.Lanes,
			ID: d.ID, Name: "gpuprobe-map-" + d.Name}
		if d.Kind == shm.KindRing || d.hash != nil {
			spec.ValueSize = d.SlotSize
		}
		r, err := shm.Create(spec)
		if err != nil {
			in.Close()
			return nil, fmt.Errorf("map %q of %s: %w", d.Name, d.Object, err)
		}
		if d.Kind == shm.KindRing {
			g, err := shm.NewRing(r)
			if err != nil {
				r.Close()
				in.Close()
				return nil, fmt.Errorf("map %q: %w", d.Name, err)
			}
			in.rings = append(in.rings, ringInst{def: d, ring: g, cons: g.NewConsumer(shm.ConsumerOptions{})})
			continue
		}
		a, err := shm.NewArray(r)
		if err == nil {
			err = writeSeeds(d, a)
		}
		if err != nil {
			r.Close()
			in.Close()
			return nil, fmt.Errorf("map %q: %w", d.Name, err)
		}
		in.arrays = append(in.arrays, arrayInst{def: d, arr: a, src: a})
	}
	return in, nil
}

// Offers are the regions to hand to the application, role 3 (map) with the
// map's name.
func (in *Instance) Offers() []agentwire.Offer {
	out := make([]agentwire.Offer, 0, len(in.arrays)+len(in.rings))
	for _, a := range in.arrays {
		if a.arr != nil {
			out = append(out, agentwire.Offer{Role: agentwire.RoleMap, Name: a.def.Name, Region: a.arr.Region()})
		}
	}
	for _, g := range in.rings {
		if g.ring != nil {
			out = append(out, agentwire.Offer{Role: agentwire.RoleMap, Name: g.def.Name, Region: g.ring.Region()})
		}
	}
	return out
}

// Array returns the region of the array map name, or nil.
func (in *Instance) Array(name string) *shm.Array {
	for _, a := range in.arrays {
		if a.def.Name == name {
			return a.arr
		}
	}
	return nil
}

// Ring returns the region of the ring-buffer map name, or nil.
func (in *Instance) Ring(name string) *shm.Ring {
	for _, g := range in.rings {
		if g.def.Name == name {
			return g.ring
		}
	}
	return nil
}

// Close unmaps and closes every region of the instance.
func (in *Instance) Close() error {
	var errs []error
	for _, a := range in.arrays {
		var err error
		switch {
		case a.arr != nil:
			err = a.arr.Close()
		case a.kmem != nil:
			err = unix.Munmap(a.kmem)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("map %q: %w", a.def.Name, err))
		}
	}
	for _, g := range in.rings {
		var err error
		if g.kr != nil {
			err = g.kr.r.Close()
		} else {
			err = g.ring.Close()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("map %q: %w", g.def.Name, err))
		}
	}
	in.arrays, in.rings = nil, nil
	return errors.Join(errs...)
}
