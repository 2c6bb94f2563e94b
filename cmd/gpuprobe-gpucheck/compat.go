//go:build cgo

package main

// The compatibility suite (-compat): every program of testdata/bpf/compat,
// each written in one of bpftime's GPU idioms, is injected into its sample
// kernel twice, its maps in host memory and in device memory
// (jit.DeviceResidentMaps), and what it left in its maps is checked
// against exact values; the kernel's output must stay bit-identical to the
// unpatched run. The programs' comments state what they compute.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"path/filepath"

	"github.com/gpuprobe/gpuprobe/gpuprobe/inject"
	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/shm"
)

// compatPidTgid is what bpf_get_current_pid_tgid returns in the compat
// runs (jit/ptx Options.PidTgid): tgid 0x1234, pid 0x5678.
const compatPidTgid = 0x1234_0000_5678

// Indexes into samples().
const (
	sampleVectorAddN = 0
	sampleVectorAdd  = 1
)

// compatCase is one row of the suite: an object of testdata/bpf/compat run
// on one sample, with its seeds, ring size and check.
type compatCase struct {
	name      string // row name
	object    string // testdata/bpf/compat/<object>.o
	sample    int    // index into samples()
	ringSlots uint32 // slots of each ring map (0: 2)
	seeds     compatSeeds
	// hostMemory: every map of the object stays in host memory (bpftime's
	// 1512 and 1513), so the case runs once, and none may be placed in
	// device memory.
	hostMemory bool
	check      func(*compatRun) (string, error)
}

// compatSeeds are initial map values: map name -> value (a u64) of each
// key from 0, lane 0.
type compatSeeds map[string][]uint64

// compatRun is what a check looks at: the sample, the maps after the
// launch and the kernel's %globaltimer window. The checks run on the GPU's
// results (gpuMaps) and, in the tests, on the interpreter's.
type compatRun struct {
	s   *sample
	m   compatMaps
	win window
}

// compatMaps reads the maps a compat program left.
type compatMaps interface {
	// value is the u64 at key of an array map: of thread lane (global
	// linear id) in a per-thread array, lane 0 otherwise; of a GPU hash
	// map, the u64 under the 4-byte key, 0 when it has none.
	value(name string, key, lane uint64) (uint64, error)
	// ring drains a ring map into fn and returns the records delivered,
	// the ring's counters after the drain and its capacity in records of
	// size bytes.
	ring(name string, size int, fn func(payload []byte)) (int, shm.RingStats, uint64, error)
}

// compatCases is the suite. Geometry of the samples: vectorAdd 683 x 96
// (65,568 threads, every warp full), vectorAddN 4,097 x 256 with n =
// 1<<20 + 100 (the last block's threads past n leave early).
var compatCases = []compatCase{
	{name: "threadcount", object: "threadcount", sample: sampleVectorAdd, check: checkThreadcount},
	{name: "ptrjoin", object: "ptrjoin", sample: sampleVectorAdd, check: checkPtrjoin},
	{name: "atomics", object: "atomics", sample: sampleVectorAdd, check: checkAtomics},
	{name: "boundsexit", object: "boundsexit", sample: sampleVectorAddN, check: checkBoundsexit},
	{name: "ringshort", object: "ringshort", sample: sampleVectorAdd, ringSlots: 1 << 17, check: checkRingFull},
	{name: "ringshort (ring of 1024)", object: "ringshort", sample: sampleVectorAdd, ringSlots: 1024, check: checkRingDrops},
	{name: "geometry", object: "geometry", sample: sampleVectorAdd, check: checkGeometry},
	{name: "loops", object: "loops", sample: sampleVectorAdd, check: checkLoops},
	{name: "seeded", object: "seeded", sample: sampleVectorAdd, seeds: seedOn, check: checkSeeded},
	{name: "seeded (disabled)", object: "seeded", sample: sampleVectorAdd, seeds: seedOff, check: checkSeedOff},
	{name: "gpuhash", object: "gpuhash", sample: sampleVectorAdd, check: checkGPUHash},
	{name: "hashcount", object: "hashcount", sample: sampleVectorAdd, check: checkHashcount},
	{name: "kshared", object: "kshared", sample: sampleVectorAdd, check: checkKshared},
	{name: "hostmaps", object: "hostmaps", sample: sampleVectorAdd, hostMemory: true, check: checkHostmaps},
	{name: "kmap", object: "kmap", sample: sampleVectorAdd, hostMemory: true, check: checkKmap},
}

// compat runs the suite: each case with its maps in host, then in device
// memory (host only for a hostMemory case).
func (r *runner) compat(vec, gemm, exits []byte) {
	ss := samples(vec, gemm, exits)
	want := map[int][]byte{}
	for _, c := range compatCases {
		s := ss[c.sample]
		if want[c.sample] == nil {
			out, err := r.unpatched(s)
			if err != nil {
				r.result("compat "+s.name+": unpatched", err, "")
				continue
			}
			want[c.sample] = out
		}
		for _, dev := range c.placements() {
			where := "host"
			if dev {
				where = "device"
			}
			detail, err := r.compatCase(c, s, want[c.sample], dev)
			r.result(fmt.Sprintf("compat %s, maps in %s memory", c.name, where), err, detail)
		}
	}
}

// loadCompatGPU loads a compat object whole (a map's type can depend on
// the object's host programs: jit.LoadSpec) and returns its GPU programs,
// what the collector injects; Linux runs the host halves.
func loadCompatGPU(path string) ([]*jit.Program, error) {
	progs, err := jit.LoadELF(path)
	if err != nil {
		return nil, err
	}
	var gpu []*jit.Program
	for _, p := range progs {
		if p.IsGPU() {
			gpu = append(gpu, p)
		}
	}
	return gpu, nil
}

// placements are the runs of a case: maps in host memory (false) and, but
// for a hostMemory case, in device memory (true).
func (c compatCase) placements() []bool {
	if c.hostMemory {
		return []bool{false}
	}
	return []bool{false, true}
}

// unpatched runs the sample's original module once and returns its output.
func (r *runner) unpatched(s *sample) ([]byte, error) {
	base, err := load(r.c, s.ptx, nil, 0, 0, nil, nil)
	if err != nil {
		return nil, err
	}
	defer base.close()
	out, _, err := r.run(s, base, 0)
	return out, err
}

// compatCase injects the case's object, launches once, checks the output
// and then the maps.
func (r *runner) compatCase(c compatCase, s *sample, want []byte, dev bool) (string, error) {
	progs, err := loadCompatGPU(filepath.Join(r.bpfDir, "compat", c.object+".o"))
	if err != nil {
		return "", err
	}
	opts := inject.Options{Kernels: []string{s.kernel}, Strict: true}
	opts.PTX.PidTgid = compatPidTgid
	if dev {
		opts.PTX.DeviceMaps = jit.DeviceResidentMaps(progs)
	}
	if c.hostMemory {
		if d := jit.DeviceResidentMaps(progs); len(d) > 0 {
			return "", fmt.Errorf("maps %v may be placed in device memory; this object's must stay in host memory", d)
		}
	}
	mod, rep, err := inject.Inject(s.ptx, progs, opts)
	if err != nil {
		return "", err
	}
	slots := c.ringSlots
	if slots == 0 {
		slots = 2
	}
	in, err := load(r.c, mod, rep, s.threads(), slots, opts.PTX.DeviceMaps, c.seeds.fill)
	if err != nil {
		return "", err
	}
	defer in.close()
	got, win, err := r.run(s, in, 0)
	if err != nil {
		return "", err
	}
	if err := in.sync(); err != nil {
		return "", err
	}
	if dev && len(in.mirrors) == 0 {
		return "", errors.New("maps in device memory asked for, but none was placed there")
	}
	if !bytes.Equal(got, want) {
		return "", errors.New("kernel output differs from the unpatched kernel's")
	}
	return c.check(&compatRun{s: s, m: gpuMaps{in, dev}, win: win})
}

// gpuMaps reads an instance's maps (synced to the host after the launch).
type gpuMaps struct {
	in  *instance
	dev bool // maps in device memory: rings are drained by in.records
}

func (g gpuMaps) value(name string, key, lane uint64) (uint64, error) {
	a := g.in.arrays[name]
	if a == nil {
		return 0, fmt.Errorf("map %s was not bound", name)
	}
	if m := g.in.hashes[name]; m != nil {
		return hashValue(m, a, key)
	}
	return a.Uint64(key, lane)
}

func (g gpuMaps) ring(name string, _ int, fn func([]byte)) (int, shm.RingStats, uint64, error) {
	r := g.in.rings[name]
	if r == nil {
		return 0, shm.RingStats{}, 0, fmt.Errorf("map %s was not bound", name)
	}
	each := func(rec shm.Record) { fn(rec.Payload) }
	var n int
	if g.dev {
		n = g.in.records(each)
	} else {
		n = r.NewConsumer(shm.ConsumerOptions{}).Read(0, each)
	}
	return n, r.Stats(), uint64(r.Slots()), g.in.drainErr
}

// blocks and block are the sample's grid and block size (1-D samples).
func (cr *compatRun) blocks() uint64 { return uint64(cr.s.grid.X) }
func (cr *compatRun) block() uint64  { return uint64(cr.s.block.X) }

// lanes checks key of per-thread array name for every thread t of the
// launch against want(t).
func (cr *compatRun) lanes(name string, key uint64, want func(t uint64) uint64) error {
	for t := uint64(0); t < cr.s.threads(); t++ {
		v, err := cr.m.value(name, key, t)
		if err != nil {
			return err
		}
		if w := want(t); v != w {
			return fmt.Errorf("%s[%d] of thread %d (block %d, thread %d) = %d, want %d", name, key, t, t/cr.block(), t%cr.block(), v, w)
		}
	}
	return nil
}

// keys checks keys [0, n) of array name (lane 0) against want(k).
func (cr *compatRun) keys(name string, n uint64, want func(k uint64) uint64) error {
	for k := uint64(0); k < n; k++ {
		v, err := cr.m.value(name, k, 0)
		if err != nil {
			return err
		}
		if w := want(k); v != w {
			return fmt.Errorf("%s[%d] = %d, want %d", name, k, v, w)
		}
	}
	return nil
}

func always(v uint64) func(uint64) uint64 { return func(uint64) uint64 { return v } }

// upTo gives v below n and 0 from n on (slots past the grid stay zero).
func upTo(n, v uint64) func(uint64) uint64 {
	return func(k uint64) uint64 {
		if k < n {
			return v
		}
		return 0
	}
}

// values gives want[k].
func values(want ...uint64) func(uint64) uint64 { return func(k uint64) uint64 { return want[k] } }

// checkThreadcount: every thread counted once at entry and once at exit.
func checkThreadcount(cr *compatRun) (string, error) {
	for key := uint64(0); key < 2; key++ {
		if err := cr.lanes("tc_runs", key, always(1)); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("%d threads x {entry, exit} = 1", cr.s.threads()), nil
}

// checkPtrjoin: both join shapes leave 1 in every thread's slot.
func checkPtrjoin(cr *compatRun) (string, error) {
	for key := uint64(0); key < 2; key++ {
		if err := cr.lanes("pj_calls", key, always(1)); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("%d threads x 2 keys = 1", cr.s.threads()), nil
}

// checkAtomics: uniform and per-thread atomic adds, exact sums.
func checkAtomics(cr *compatRun) (string, error) {
	g, b, t := cr.blocks(), cr.block(), cr.s.threads()
	if err := cr.keys("at_totals", 2, values(t, g*b*(b+1)/2)); err != nil {
		return "", err
	}
	if err := cr.keys("at_blocks", 1024, upTo(g, b)); err != nil {
		return "", err
	}
	if err := cr.keys("at_threads", 1<<17, upTo(t, 1)); err != nil {
		return "", err
	}
	return fmt.Sprintf("total %d, tid sum %d, %d blocks of %d, %d threads once", t, g*b*(b+1)/2, g, b, t), nil
}

// checkBoundsexit: entry and exit once per thread, early leavers included.
func checkBoundsexit(cr *compatRun) (string, error) {
	t, n := cr.s.threads(), cr.s.scalars[0]
	if err := cr.keys("be_counts", 3, values(t, t, t-n)); err != nil {
		return "", err
	}
	if err := cr.keys("be_blocks", 8192, upTo(cr.blocks(), cr.block())); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d entries = %d exits, %d past n", t, t, t-n), nil
}

// Layout of ringshort.c's struct rs_event.
const (
	rsEventSize = 24
	rsMagic     = 0x5eed
)

// ringRecords drains rs_ring and checks each record; it returns the
// records delivered, the threads they came from, the ring's counters and
// its capacity.
func (cr *compatRun) ringRecords() (int, map[uint64]bool, shm.RingStats, uint64, error) {
	var bad error
	seen := map[uint64]bool{}
	n, st, slots, err := cr.m.ring("rs_ring", rsEventSize, func(p []byte) {
		if bad == nil {
			bad = cr.ringRecord(p, seen)
		}
	})
	if err == nil {
		err = bad
	}
	return n, seen, st, slots, err
}

// ringRecord checks one rs_event and marks its thread in seen.
func (cr *compatRun) ringRecord(p []byte, seen map[uint64]bool) error {
	if len(p) != rsEventSize {
		return fmt.Errorf("record of %d bytes, want %d (the program's, not the map's 256)", len(p), rsEventSize)
	}
	le := binary.LittleEndian
	bx, tx, lane, magic, ts := uint64(le.Uint32(p)), uint64(le.Uint32(p[4:])), uint64(le.Uint32(p[8:])), le.Uint32(p[12:]), le.Uint64(p[16:])
	switch {
	case bx >= cr.blocks() || tx >= cr.block():
		return fmt.Errorf("record of block %d thread %d: outside the %dx%d grid", bx, tx, cr.blocks(), cr.block())
	case lane != tx%32:
		return fmt.Errorf("record of block %d thread %d: lane %d, want %d", bx, tx, lane, tx%32)
	case magic != rsMagic:
		return fmt.Errorf("record of block %d thread %d: magic %#x, want %#x", bx, tx, magic, rsMagic)
	case ts < cr.win.start || ts > cr.win.end:
		return fmt.Errorf("record of block %d thread %d: time %d outside the kernel window [%d, %d]", bx, tx, ts, cr.win.start, cr.win.end)
	}
	gid := bx*cr.block() + tx
	if seen[gid] {
		return fmt.Errorf("two records of block %d thread %d", bx, tx)
	}
	seen[gid] = true
	return nil
}

// checkRingFull: a ring large enough for the grid gets one record per
// thread and drops none.
func checkRingFull(cr *compatRun) (string, error) {
	n, seen, st, _, err := cr.ringRecords()
	if err != nil {
		return "", err
	}
	if t := cr.s.threads(); uint64(n) != t || uint64(len(seen)) != t || st.Dropped != 0 || st.Oversize != 0 {
		return "", fmt.Errorf("%d records from %d threads, %d dropped, %d oversize; want %d, %d, 0, 0", n, len(seen), st.Dropped, st.Oversize, t, t)
	}
	return fmt.Sprintf("%d records of %d bytes, one per thread, 0 dropped", n, rsEventSize), nil
}

// checkRingDrops: a ring too small for the grid accounts for every record:
// produced (one per thread) = delivered + dropped.
func checkRingDrops(cr *compatRun) (string, error) {
	n, seen, st, slots, err := cr.ringRecords()
	if err != nil {
		return "", err
	}
	t := cr.s.threads()
	switch {
	case n == 0 || uint64(n) > slots:
		return "", fmt.Errorf("%d records delivered, want 1..%d (the ring's slots)", n, slots)
	case uint64(n)+st.Dropped != t:
		return "", fmt.Errorf("produced %d != delivered %d + dropped %d (ring %+v)", t, n, st.Dropped, st)
	case len(seen) != n:
		return "", fmt.Errorf("%d records from %d distinct threads", n, len(seen))
	}
	return fmt.Sprintf("produced %d = delivered %d + dropped %d", t, n, st.Dropped), nil
}

// geometry.c's keys.
const (
	geoBlock = iota
	geoThread
	geoBDim
	geoGDim
	geoLane
	geoWarp
	geoSM
	geoTEntry
	geoTExit
	geoPID
)

func pack(x, y, z uint64) uint64 { return x | y<<16 | z<<32 }

// Bounds for the hardware ids, which have no exact expected value: %warpid
// is below the SM's warp slots (64 on sm_70..sm_90), %smid below the SM
// id space (%nsmid, which can exceed the SM count).
const (
	maxWarpSlots = 64
	maxSMID      = 1024
)

// checkGeometry: exact indexes, dims, lane and pid_tgid; bounded warp and
// SM ids; entry <= exit inside the kernel's window.
func checkGeometry(cr *compatRun) (string, error) {
	b := cr.block()
	exact := []struct {
		key  uint64
		want func(t uint64) uint64
	}{
		{geoBlock, func(t uint64) uint64 { return pack(t/b, 0, 0) }},
		{geoThread, func(t uint64) uint64 { return pack(t%b, 0, 0) }},
		{geoBDim, always(pack(b, 1, 1))},
		{geoGDim, always(pack(cr.blocks(), 1, 1))},
		{geoLane, func(t uint64) uint64 { return t % b % 32 }},
		{geoPID, always(compatPidTgid)},
	}
	for _, e := range exact {
		if err := cr.lanes("geo", e.key, e.want); err != nil {
			return "", err
		}
	}
	sms := map[uint64]bool{}
	for t := uint64(0); t < cr.s.threads(); t++ {
		var w [geoPID]uint64
		for _, k := range []uint64{geoWarp, geoSM, geoTEntry, geoTExit} {
			v, err := cr.m.value("geo", k, t)
			if err != nil {
				return "", err
			}
			w[k] = v
		}
		warp, sm, in, out := w[geoWarp], w[geoSM], w[geoTEntry], w[geoTExit]
		switch {
		case warp >= maxWarpSlots:
			return "", fmt.Errorf("thread %d: %%warpid %d, want < %d", t, warp, maxWarpSlots)
		case sm >= maxSMID:
			return "", fmt.Errorf("thread %d: %%smid %d, want < %d", t, sm, maxSMID)
		case in < cr.win.start || in > out || out > cr.win.end:
			return "", fmt.Errorf("thread %d: entry %d, exit %d; want start %d <= entry <= exit <= end %d", t, in, out, cr.win.start, cr.win.end)
		}
		sms[sm] = true
	}
	return fmt.Sprintf("%d threads exact, %d SMs seen, window %d ns", cr.s.threads(), len(sms), cr.win.end-cr.win.start), nil
}

// collatz counts the Collatz steps of x, at most limit (loops.c's loop).
func collatz(x, limit uint64) uint64 {
	n := uint64(0)
	for ; n < limit && x != 1; n++ {
		if x&1 == 1 {
			x = 3*x + 1
		} else {
			x /= 2
		}
	}
	return n
}

// checkLoops: popcount(gid), Collatz steps of tid+1, 7 unless tid%5 == 4.
func checkLoops(cr *compatRun) (string, error) {
	b := cr.block()
	keys := []func(t uint64) uint64{
		func(t uint64) uint64 { return uint64(bits.OnesCount32(uint32(t))) },
		func(t uint64) uint64 { return collatz(t%b+1, 500) },
		func(t uint64) uint64 {
			if t%b%5 == 4 {
				return 0
			}
			return 7
		},
	}
	for k, want := range keys {
		if err := cr.lanes("lp_out", uint64(k), want); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("%d threads x 3 keys exact", cr.s.threads()), nil
}

// The seeds of seeded.c: cfg {enabled, every, weight}, acc {start, 0}.
var (
	seedOn  = compatSeeds{"sd_cfg": {1, 3, 5}, "sd_acc": {1_000_000, 0}}
	seedOff = compatSeeds{"sd_cfg": {0, 3, 5}, "sd_acc": {42, 0}}
)

// fill is a seedFunc: it writes the seeds of map name into its host
// region (lane 0 of each key).
func (cs compatSeeds) fill(name string, a *shm.Array) error {
	for k, v := range cs[name] {
		if err := a.StoreUint64(uint64(k), 0, v); err != nil {
			return fmt.Errorf("%s[%d]: %w", name, k, err)
		}
	}
	return nil
}

// checkSeeded: the seeded start value plus weight per selected thread; the
// configuration comes back as seeded.
func checkSeeded(cr *compatRun) (string, error) {
	cfg, acc := seedOn["sd_cfg"], seedOn["sd_acc"]
	sel := (cr.s.threads() + cfg[1] - 1) / cfg[1]
	if err := cr.keys("sd_cfg", 3, values(cfg...)); err != nil {
		return "", err
	}
	if err := cr.keys("sd_acc", 2, values(acc[0]+cfg[2]*sel, sel)); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d selected threads, acc %d + %d x %d", sel, acc[0], cfg[2], sel), nil
}

// checkSeedOff: disabled by its seed, the program leaves every seed as is.
func checkSeedOff(cr *compatRun) (string, error) {
	for name, vals := range seedOff {
		if err := cr.keys(name, uint64(len(vals)), values(vals...)); err != nil {
			return "", err
		}
	}
	return "seeds unchanged", nil
}
