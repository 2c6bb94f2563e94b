package progmaps

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/shm"
	"golang.org/x/sys/unix"
)

// KernelMap is a kernel map of a user's host program (an array or a ring
// buffer), as gpuprobe/hostprobe/userprog's Set.Maps returns it: its
// fields match userprog.Map, so progmaps.KernelMap(m) converts one.
type KernelMap struct {
	Object string        // the ELF object's path
	Name   string        // map name
	Spec   *ebpf.MapSpec // definition as written in the object (value BTF type)
	Map    *ebpf.Map     // the kernel map; owned by the caller, kept open while the Instance lives
}

// Names of host ring-record fields that identify the process (last path
// segment, any case): the first found, in this order. pid and tgid are the
// process id (bpf_get_current_pid_tgid() >> 32); pid_tgid is the helper's
// whole value.
var pidNames = []string{"pid", "tgid", "process_id", "pid_tgid"}

// kernelRingReadCap bounds the records read from one kernel ring in one
// ReadRings call when max is 0, so that a fast producer cannot keep the
// poll loop reading forever.
const kernelRingReadCap = 1 << 16

// arraySource is what the metrics read an array through: shm.Array, or a
// kernel BPF_MAP_TYPE_ARRAY.
type arraySource interface {
	Keys() int
	Lanes() int
	Value(key, lane uint64) ([]byte, error)
}

// refresher is an arraySource that copies its values before each emission.
type refresher interface{ refresh() error }

// NewHostInstance returns the Instance of the host programs' kernel maps:
// arrays become metrics (no process.pid attribute: one value for all
// processes) and ring buffers spans or span events, exactly as for GPU
// maps, except that their times are CLOCK_MONOTONIC (bpf_ktime_get_ns) and
// the process of a record comes from its pid / tgid / pid_tgid field. Maps
// of other types are an error naming the object and the map. The Instance
// reads the maps; it does not close them (Close unmaps and stops reading).
func NewHostInstance(maps []KernelMap, now time.Time) (*Instance, error) {
	in := &Instance{Host: true, Created: now}
	for i, km := range maps {
		d, err := newHostDef(km, uint32(i))
		if err != nil {
			in.Close()
			return nil, fmt.Errorf("host map %q of %s: %w", km.Name, km.Object, err)
		}
		switch d.Kind {
		case shm.KindRing:
			r, err := ringbuf.NewReader(km.Map)
			if err != nil {
				in.Close()
				return nil, fmt.Errorf("host map %q of %s: ring buffer reader: %w", km.Name, km.Object, err)
			}
			// A deadline in the past: reads return what is there and never
			// wait (time.Time{} would mean no deadline).
			r.SetDeadline(time.Unix(1, 0))
			in.rings = append(in.rings, ringInst{def: d, kr: &kernelRing{r: r}})
		default:
			ka, mem, err := newKernelArray(km.Map, d)
			if err != nil {
				in.Close()
				return nil, fmt.Errorf("host map %q of %s: %w", km.Name, km.Object, err)
			}
			in.arrays = append(in.arrays, arrayInst{def: d, src: ka, kmem: mem})
		}
	}
	return in, nil
}

// newHostDef describes a host program's map for export.
func newHostDef(km KernelMap, id uint32) (*Def, error) {
	if km.Spec == nil || km.Map == nil {
		return nil, errors.New("no map spec or no kernel map")
	}
	d := &Def{Object: km.Object, Name: km.Name, Type: jit.MapType(km.Spec.Type), ID: id, Lanes: 1,
		metricBase: "gpuprobe.map." + km.Name, rec: recordLayout{tsField: -1, devField: -1, pidField: -1, hostClock: true}}
	switch km.Spec.Type {
	case ebpf.Array:
		if km.Map.Type() != ebpf.Array || km.Map.KeySize() != 4 {
			return nil, fmt.Errorf("kernel map is %v with %d-byte keys, want an array with 4-byte keys", km.Map.Type(), km.Map.KeySize())
		}
		d.Kind, d.Keys, d.ValueSize = shm.KindArray, km.Map.MaxEntries(), km.Map.ValueSize()
		if d.ValueSize == 0 || uint64(d.Keys)*align8(uint64(d.ValueSize)) > MaxRegionBytes {
			return nil, fmt.Errorf("%d keys of %d bytes: want a value size > 0 and at most %d bytes", d.Keys, d.ValueSize, MaxRegionBytes)
		}
	case ebpf.RingBuf:
		if km.Spec.Value == nil {
			return nil, errors.New("ring buffer declares no record type (__type(value, struct ...))")
		}
		n, err := btf.Sizeof(km.Spec.Value)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("record type: size %d: %v", n, err)
		}
		d.Kind, d.ValueSize = shm.KindRing, uint32(n)
	default:
		return nil, fmt.Errorf("type %v is not exported (arrays and ring buffers are)", km.Spec.Type)
	}
	if err := d.compile(km.Spec.Value); err != nil {
		return nil, err
	}
	if d.Kind == shm.KindRing {
		d.rec.pidField = findField(d.Dec.Fields(), pidNames, false)
		if d.rec.pidField >= 0 {
			desc := d.Dec.Fields()[d.rec.pidField]
			d.rec.pidIsTgid = desc.Size == 8 && lastSegment(desc.Name) == "pid_tgid"
		}
	}
	return d, nil
}

func lastSegment(path string) string {
	for i := len(path) - 1; i >= 0; i-- {
		if path[i] == '.' {
			return path[i+1:]
		}
	}
	return path
}

// kernelArray reads a BPF_MAP_TYPE_ARRAY: through an mmap of the map when
// it is BPF_F_MMAPABLE (zero copy, like a shm array), else by copying
// every value with a lookup at each emission (refresh).
type kernelArray struct {
	m         *ebpf.Map
	keys      uint64
	valueSize uint64
	stride    uint64
	mem       []byte // the mapping, when mmapable
	buf       []byte // the copy, when not
}

// newKernelArray maps m when it is mmapable; it returns the mapping too,
// for the Instance to unmap.
func newKernelArray(m *ebpf.Map, d *Def) (*kernelArray, []byte, error) {
	ka := &kernelArray{m: m, keys: uint64(d.Keys), valueSize: uint64(d.ValueSize), stride: align8(uint64(d.ValueSize))}
	if m.Flags()&unix.BPF_F_MMAPABLE == 0 {
		ka.stride = ka.valueSize // the copy is packed
		ka.buf = make([]byte, ka.keys*ka.valueSize)
		return ka, nil, nil
	}
	page := uint64(os.Getpagesize())
	size := (ka.keys*ka.stride + page - 1) / page * page
	mem, err := unix.Mmap(m.FD(), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap %d bytes of the mmapable array: %w", size, err)
	}
	ka.mem = mem
	return ka, mem, nil
}

// Keys is max_entries.
func (ka *kernelArray) Keys() int { return int(ka.keys) }

// Lanes is 1: kernel arrays have one value per key.
func (ka *kernelArray) Lanes() int { return 1 }

// Value returns the value of key: a view into the mapping, or into the
// copy made by the last refresh.
func (ka *kernelArray) Value(key, lane uint64) ([]byte, error) {
	if key >= ka.keys || lane != 0 {
		return nil, fmt.Errorf("kernel array %s: key %d lane %d out of range [0, %d) × [0, 1)", ka.m, key, lane, ka.keys)
	}
	off := key * ka.stride
	if ka.mem != nil {
		return ka.mem[off : off+ka.valueSize : off+ka.valueSize], nil
	}
	return ka.buf[off : off+ka.valueSize : off+ka.valueSize], nil
}

// refresh copies every value of a map that is not mmapable (one lookup
// per key); mmapable maps need nothing.
func (ka *kernelArray) refresh() error {
	if ka.mem != nil {
		return nil
	}
	for k := range ka.keys {
		off := k * ka.valueSize
		if err := ka.m.Lookup(uint32(k), ka.buf[off:off+ka.valueSize]); err != nil {
			return fmt.Errorf("kernel array %s: key %d: %w", ka.m, k, err)
		}
	}
	return nil
}

// kernelRing reads a BPF_MAP_TYPE_RINGBUF without blocking.
type kernelRing struct {
	r   *ringbuf.Reader
	rec ringbuf.Record
}

// readKernelRing reads up to max records (0: up to kernelRingReadCap) of
// a kernel ring buffer and turns them into spans or events.
func (c *Collector) readKernelRing(in *Instance, g *ringInst, now time.Time, max int) int {
	if max <= 0 {
		max = kernelRingReadCap
	}
	var b batch
	n := 0
	for n < max {
		err := g.kr.r.ReadInto(&g.kr.rec)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			c.counters.ReadErrors++
			break
		}
		n++
		c.record(in, g.def, g.kr.rec.RawSample, now, &b)
	}
	b.close()
	return n
}
