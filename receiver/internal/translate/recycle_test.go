package translate

import (
	"reflect"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/gpuprobe/gpuprobe/record"
)

// fillNonZero sets every field of v (addressable), unexported ones
// included, to a non-zero value: pointers to a new zero value, slices and
// maps to one of length 1 or empty, numbers to 1.
func fillNonZero(v reflect.Value) {
	v = reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())).Elem()
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			fillNonZero(v.Field(i))
		}
	case reflect.Array:
		for i := range v.Len() {
			fillNonZero(v.Index(i))
		}
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		v.SetUint(1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1)
	case reflect.String:
		v.SetString("x")
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
	}
}

// nonZeroFields names the fields of struct v (recursively) that are not
// zero.
func nonZeroFields(v reflect.Value, prefix string) []string {
	var out []string
	for i := range v.NumField() {
		f, name := v.Field(i), prefix+v.Type().Field(i).Name
		switch {
		case f.IsZero():
		case f.Kind() == reflect.Struct:
			out = append(out, nonZeroFields(f, name+".")...)
		default:
			out = append(out, name)
		}
	}
	return out
}

// TestRecycledLaunchStartsClean: a launch taken from the free list carries
// nothing of its previous life but the next generation, whatever fields
// the launch struct has.
func TestRecycledLaunchStartsClean(t *testing.T) {
	lt := newTr(Options{}).launches
	old := &launch{}
	fillNonZero(reflect.ValueOf(old).Elem())
	old.graph.chain = nil // graph runs are never recycled
	gen := old.q.gen
	stale := old.ref()
	lt.free.put(old)
	l := lt.free.get()
	if l != old {
		t.Fatal("the free list's launch was not reused")
	}
	if got := nonZeroFields(reflect.ValueOf(*l), ""); !slices.Equal(got, []string{"q.gen"}) || l.q.gen != gen+1 {
		t.Errorf("reused launch has %v set (generation %d after %d); want only its generation, one more", got, l.q.gen, gen)
	}
	if stale.current() || stale.live() || stale.tracked() {
		t.Error("a queue entry of the launch's earlier life is not stale")
	}
	if r := l.ref(); !r.live() {
		t.Error("the reused launch's own queue entry is not live")
	}
}

// TestRecycleBounds: graph runs never reach the free list, and the list
// keeps at most maxFreeLaunches.
func TestRecycleBounds(t *testing.T) {
	lt := newTr(Options{}).launches
	lt.free.put(&launch{graph: graphRun{chain: &replayChain{}}})
	if len(lt.free.l) != 0 {
		t.Fatal("a graph run was recycled")
	}
	for range maxFreeLaunches + 10 {
		lt.free.put(&launch{})
	}
	if len(lt.free.l) != maxFreeLaunches {
		t.Errorf("free list %d, want %d", len(lt.free.l), maxFreeLaunches)
	}
}

// TestRecycledQueueEntriesStale: an emitted launch's memory reused by a
// later launch leaves its old queue entry behind, among the older pending
// launches; eviction must still take the oldest pending launch, not the
// reused one through its stale entry.
func TestRecycledQueueEntriesStale(t *testing.T) {
	var s stream
	s.calibrate(0)
	s.add(&record.KernelName{Function: 1, Name: "k"})
	for id := range uint64(3) {
		s.launch(id+1, 1, 1000*(id+1), 1, 32, 0, false)
	}
	tr := newTr(Options{MaxPendingLaunches: 3})
	now := time.Unix(1000, 0)
	feed(t, tr, &s, now)
	second := tr.launches.pending.get(srcKey{1, 2})
	s.b = s.b[:0]
	s.add(&record.Completion{LaunchID: 2, CompleteNS: 4000}) // launch 2 is emitted
	s.launch(4, 1, 4000, 1, 32, 0, false)                    // and its memory is launch 4's
	s.launch(5, 1, 5000, 1, 32, 0, false)                    // which makes room: launch 1 goes
	s.launch(6, 1, 6000, 1, 32, 0, false)                    // then launch 3, not 4
	feed(t, tr, &s, now)
	if tr.launches.pending.get(srcKey{1, 4}) != second {
		t.Fatal("launch 4 did not reuse launch 2's memory")
	}
	var ids []uint64
	for id := range uint64(7) {
		if tr.launches.pending.get(srcKey{1, id}) != nil {
			ids = append(ids, id)
		}
	}
	if !slices.Equal(ids, []uint64{4, 5, 6}) || tr.launches.pending.n != 3 {
		t.Errorf("pending %v, want [4 5 6]", ids)
	}
	if c := tr.Counters(); c.LaunchesEvicted != 2 || c.LaunchesEmitted != 3 {
		t.Errorf("evicted %d, emitted %d; want 2 and 3", c.LaunchesEvicted, c.LaunchesEmitted)
	}
	tr.FlushPending(now)
	if c := tr.Counters(); c.LaunchesEmitted != 6 || tr.Pending() != 0 {
		t.Errorf("emitted %d, pending %d after the flush; want 6 and 0", c.LaunchesEmitted, tr.Pending())
	}
}

// TestGraphNodeNotRecycled: a graph launch call's node keeps its launch
// (groupNode.l) until it is released, and graph runs are never reused, so
// a late window of an emitted node cannot reach a later launch.
func TestGraphNodeNotRecycled(t *testing.T) {
	tr := winTr(false)
	now := time.Unix(1000, 0)
	graphLaunch := shim(&record.Launch{LaunchID: 100, PID: 42, TID: 43, EnqueueNS: 10_000, ReturnNS: 10_050, Stream: 7,
		Function: 0xa, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}, API: record.APIGraphLaunch, Flags: record.LaunchUnprobed})
	handleAll(t, tr, now, windowsOn, shim(&record.KernelName{Function: 0xa, Name: "_Z2kav"}), graphLaunch)
	if got := expireSteps(tr, now); got != winSteps[3] {
		t.Fatalf("graph node emitted at %v, want %v", got, winSteps[3])
	}
	if len(tr.launches.free.l) != 0 {
		t.Fatal("a graph node's run went to the free list")
	}
	// A plain launch, then the graph node's late window.
	later := now.Add(time.Second)
	handleAll(t, tr, later,
		shim(&record.Launch{LaunchID: 200, PID: 42, TID: 43, EnqueueNS: 20_000, ReturnNS: 20_050, Stream: 7,
			Function: 0xa, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}, Flags: record.LaunchUnprobed}),
		shim(&record.Window{LaunchID: 100, StartNS: 11_000, EndNS: 11_500, NameHash: record.NameHash("_Z2kav"), Flags: record.WindowGraph}))
	l := tr.launches.pending.get(srcKey{1, 200})
	if l == nil || l.gpu.win.ok {
		t.Fatalf("the plain launch is %v: want it pending without a window", l)
	}
	if c := tr.Counters().WindowCounters; c.WindowsLate != 1 || c.WindowsMatched != 0 {
		t.Errorf("late %d, matched %d; want 1 and 0", c.WindowsLate, c.WindowsMatched)
	}
}
