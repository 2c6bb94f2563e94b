package translate

import (
	"reflect"
	"sync"
	"time"
	"unsafe"

	"github.com/gpuprobe/gpuprobe/stacksym"
	"go.opentelemetry.io/collector/pdata/pcommon"
)

// Node is the state that the Translators of one collector share when the
// clients are split among several (NewShard): the attribution of
// shared GPUs' time, which needs the windows of every process on a GPU,
// the trace policy's node buckets, the host call durations, and the start of the cumulative
// series, and the symbol tables of the files the processes map (one
// library's table for every process that maps it). Each Translator keeps the rest (pairing, series, spans) for the
// clients it is handed; a process's clients must all go to one
// Translator (the per-process state and bounds are its). The first
// Translator made with a Node writes the node's GPU and host call metrics.
type Node struct {
	start  pcommon.Timestamp
	shares *gpuShares
	hw     *hwCounters
	trace  nodeTrace
	hosts  nodeDurations // host call durations
	syms   *stacksym.Files
	mu     sync.Mutex // guards owned
	owned  bool       // a Translator writes the node's GPU metrics already
}

// NewNode returns the shared state for Translators made with options o
// (o.Windows.GPUTime configures the attribution).
func NewNode(o Options) *Node {
	start := pcommon.NewTimestampFromTime(time.Now())
	return &Node{start: start, shares: newGPUShares(o.Windows.GPUTime, start), hw: newHWCounters(o.Windows.Counters, o.Windows.GPUTime.Lag),
		syms: &stacksym.Files{}}
}

// claim reports whether the caller, a Translator being made, is the
// first: the one that writes the node's GPU and host call metrics.
func (n *Node) claim() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	first := !n.owned
	n.owned = true
	return first
}

// GPUTimeCounters returns the attribution's counters so far.
func (n *Node) GPUTimeCounters() GPUTimeCounters { return n.shares.counters() }

// nodeTrace is the trace policy's node buckets and the processes tracing
// in every Translator (tracePolicy.active of each, summed).
type nodeTrace struct {
	mu                sync.Mutex
	node, nodeAnomaly tokenBucket
	active            int
}

// setActive adds the change of one Translator's processes tracing (from
// was, to now) to the node's count, and returns the node's count.
func (nt *nodeTrace) setActive(was, now int) int {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	nt.active += now - was
	return nt.active
}

// Add adds every count of o to c.
func (c *Counters) Add(o Counters) {
	if countersWords > 0 {
		// Counters is uint64 words and nothing else (countersWords):
		// add them as an array, not field by field through reflect (the
		// poll loop sums every shard's counters twice a pass).
		d := unsafe.Slice((*uint64)(unsafe.Pointer(c)), countersWords)
		s := unsafe.Slice((*uint64)(unsafe.Pointer(&o)), countersWords)
		for i := range d {
			d[i] += s[i]
		}
		return
	}
	addUints(reflect.ValueOf(c).Elem(), reflect.ValueOf(o))
}

// countersWords is the number of uint64 words Counters is made of, 0 if
// it holds anything else (then Add goes through reflect).
var countersWords = uint64Words(reflect.TypeFor[Counters]())

// uint64Words is the number of uint64 words of type t when it is made of
// uint64s only (structs and arrays of them, no padding), else 0.
func uint64Words(t reflect.Type) int {
	n := 0
	switch t.Kind() {
	case reflect.Uint64:
		return 1
	case reflect.Array:
		n = t.Len() * uint64Words(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			w := uint64Words(t.Field(i).Type)
			if w == 0 {
				return 0
			}
			n += w
		}
	}
	if uintptr(n)*8 != t.Size() {
		return 0
	}
	return n
}

// addUints adds the uint64 fields of src (in nested structs and arrays
// too) to dst's.
func addUints(dst, src reflect.Value) {
	for i := range dst.NumField() {
		switch f := dst.Field(i); f.Kind() {
		case reflect.Uint64:
			f.SetUint(f.Uint() + src.Field(i).Uint())
		case reflect.Struct:
			addUints(f, src.Field(i))
		case reflect.Array:
			for j := range f.Len() {
				f.Index(j).SetUint(f.Index(j).Uint() + src.Field(i).Index(j).Uint())
			}
		}
	}
}
