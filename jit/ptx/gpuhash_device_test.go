//go:build gpu

package ptx

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/internal/cuda"
	"github.com/gpuprobe/gpuprobe/jit"
)

// ghDeviceProgram: key = the u32 the thread's context holds; r0 = the
// result of helper id on it (update: value 0 with flags); with count, an
// update then looks the key up and adds 1 to its value atomically.
func ghDeviceProgram(id jit.HelperID, flags int32, count bool) asm.Instructions {
	insns := asm.Instructions{
		asm.LoadMem(asm.R6, asm.R1, 0, asm.Word),
		asm.StoreMem(asm.R10, -4, asm.R6, asm.Word),
		stImm64(-16, 0),
		mapPtr(asm.R1, "gh"),
		asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, -4),
		asm.Mov.Reg(asm.R3, asm.R10), asm.Add.Imm(asm.R3, -16),
		asm.Mov.Imm(asm.R4, flags),
		call(id),
		asm.Mov.Reg(asm.R7, asm.R0),
	}
	if count {
		insns = append(insns,
			mapPtr(asm.R1, "gh"),
			asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, -4),
			call(jit.HelperMapLookupElem),
			asm.Instruction{OpCode: asm.JEq.Op(asm.ImmSource), Dst: asm.R0, Offset: 2},
			asm.Mov.Imm(asm.R1, 1),
			asm.StoreXAdd(asm.R0, asm.R1, asm.DWord))
	}
	return append(insns, asm.Mov.Reg(asm.R0, asm.R7), asm.Return())
}

// ghDevice runs programs on one GPU against one hash table.
type ghDevice struct {
	t     *testing.T
	c     *cuda.Context
	def   *jit.Map
	l     jit.HashLayout
	table cuda.DevicePtr // the region: shm header, then the table
}

func newGHDevice(t *testing.T, def *jit.Map) *ghDevice {
	if err := cuda.Init(); err != nil {
		t.Fatal(err)
	}
	d, err := cuda.GetDevice(0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := d.PrimaryContext()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Release() })
	g := &ghDevice{t: t, c: c, def: def, l: jit.GPUHashLayout(def)}
	n := dataOffset + g.l.Bytes()
	if g.table, err = c.MemAlloc(n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.MemFree(g.table) })
	if err := c.Memset(g.table, 0, n); err != nil {
		t.Fatal(err)
	}
	return g
}

// run launches insns over keys (one thread each, blocks of 256) and
// returns each thread's r0.
func (g *ghDevice) run(insns asm.Instructions, keys []uint32) []int64 {
	out, _ := g.runTimed(insns, keys, 1)
	return out
}

// runTimed is run with the kernel launched n times in a row; it also
// returns the wall time of the last launch (launch to synchronize).
func (g *ghDevice) runTimed(insns asm.Instructions, keys []uint32, n int) ([]int64, time.Duration) {
	t, c := g.t, g.c
	f := compileProg(t, insns, []*jit.Map{g.def}, Options{})
	mod, err := c.LoadModule([]byte(TestModule(f)))
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Unload()
	if gl, ok := f.Global(GlobalMap, g.def.Name); ok { // else a program that uses no map
		p, _, err := mod.Global(gl.Name)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.MemcpyHtoD(p, binary.LittleEndian.AppendUint64(nil, uint64(g.table))); err != nil {
			t.Fatal(err)
		}
	}
	mem := make([]byte, 8*len(keys))
	for i, k := range keys {
		binary.LittleEndian.PutUint32(mem[8*i:], k)
	}
	dmem, err := c.MemAlloc(uint64(len(mem)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.MemFree(dmem)
	dres, err := c.MemAlloc(uint64(len(mem)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.MemFree(dres)
	if err := c.MemcpyHtoD(dmem, mem); err != nil {
		t.Fatal(err)
	}
	fn, err := mod.Function(TestEntry(f))
	if err != nil {
		t.Fatal(err)
	}
	blocks := uint32((len(keys) + 255) / 256)
	if len(keys)%256 != 0 {
		t.Fatalf("%d keys: want a multiple of 256", len(keys))
	}
	var took time.Duration
	for range n {
		t0 := time.Now()
		if err := fn.Launch(cuda.Dim3{X: blocks, Y: 1, Z: 1}, cuda.Dim3{X: 256, Y: 1, Z: 1}, 0, uint64(dmem), 8, uint64(dres)); err != nil {
			t.Fatal(err)
		}
		if err := c.Synchronize(); err != nil {
			t.Fatal(err)
		}
		took = time.Since(t0)
	}
	if err := c.MemcpyDtoH(mem, dres); err != nil {
		t.Fatal(err)
	}
	out := make([]int64, len(keys))
	for i := range out {
		out[i] = int64(binary.LittleEndian.Uint64(mem[8*i:]))
	}
	return out, took
}

// entries reads the table back: live keys with their u64 values, the
// count and full header words.
func (g *ghDevice) entries() (map[uint32]uint64, uint32, uint64) {
	b := make([]byte, g.l.Bytes())
	if err := g.c.MemcpyDtoH(b, g.table+cuda.DevicePtr(dataOffset)); err != nil {
		g.t.Fatal(err)
	}
	live := map[uint32]uint64{}
	for s := range g.l.Slots {
		at := g.l.SlotAt(s)
		switch st := binary.LittleEndian.Uint32(b[at:]); st {
		case jit.HashSlotLive:
			k := binary.LittleEndian.Uint32(b[at+jit.HashKeyAt:])
			if _, dup := live[k]; dup {
				g.t.Errorf("key %d has two live slots", k)
			}
			live[k] = binary.LittleEndian.Uint64(b[at+g.l.ValueAt:])
		case jit.HashSlotEmpty, jit.HashSlotDeleted:
		default:
			g.t.Errorf("slot %d left in state %d", s, st)
		}
	}
	return live, binary.LittleEndian.Uint32(b[jit.HashCountAt:]), binary.LittleEndian.Uint64(b[jit.HashFullAt:])
}

func tally(rcs []int64) map[int64]int {
	n := map[int64]int{}
	for _, rc := range rcs {
		n[rc]++
	}
	return n
}

// TestGPUHashDeviceWarpInsert: every warp inserts one key from all 32
// lanes at once (BPF_NOEXIST), then counts itself into the value: one
// insert per key succeeds, the value counts every thread; then every
// thread deletes its key: one delete per key succeeds.
func TestGPUHashDeviceWarpInsert(t *testing.T) {
	const threads, keys = 1 << 16, 512
	g := newGHDevice(t, &jit.Map{Name: "gh", Type: jit.MapTypeGPUHash, KeySize: 4, ValueSize: 8, MaxEntries: keys})
	ks := make([]uint32, threads)
	for i := range ks {
		ks[i] = uint32(i/32) % keys
	}
	n := tally(g.run(ghDeviceProgram(jit.HelperMapUpdateElem, 1, true), ks))
	if n[0] != keys || n[-errEXIST] != threads-keys || len(n) != 2 {
		t.Fatalf("insert results %v, want %d × 0 and %d × -EEXIST", n, keys, threads-keys)
	}
	live, count, full := g.entries()
	if len(live) != keys || count != keys || full != 0 {
		t.Fatalf("%d live keys, count %d, full %d; want %d, %d, 0", len(live), count, full, keys, keys)
	}
	for k, v := range live {
		if v != threads/keys {
			t.Errorf("key %d counted %d threads, want %d", k, v, threads/keys)
		}
	}
	n = tally(g.run(ghDeviceProgram(jit.HelperMapDeleteElem, 0, false), ks))
	if n[0] != keys || n[-errNOENT] != threads-keys || len(n) != 2 {
		t.Fatalf("delete results %v, want %d × 0 and %d × -ENOENT", n, keys, threads-keys)
	}
	if live, count, _ := g.entries(); len(live) != 0 || count != 0 {
		t.Fatalf("after delete: %d live, count %d", len(live), count)
	}
}

// TestGPUHashDeviceCollisions: warps insert (BPF_NOEXIST) keys that all
// hash to one home slot, as many as an operation probes: every key finds
// a slot, once, and counts every thread of its warps.
func TestGPUHashDeviceCollisions(t *testing.T) {
	def := &jit.Map{Name: "gh", Type: jit.MapTypeGPUHash, KeySize: 4, ValueSize: 8, MaxEntries: 1024}
	g := newGHDevice(t, def)
	home := func(k uint32) uint32 { return jit.HashKey(binary.LittleEndian.AppendUint32(nil, k)) & (g.l.Slots - 1) }
	var same []uint32
	for k := uint32(0); len(same) < jit.HashProbeLimit; k++ {
		if home(k) == home(0) {
			same = append(same, k)
		}
	}
	ks := make([]uint32, 1<<14)
	for i := range ks {
		ks[i] = same[(i/32)%len(same)]
	}
	n := tally(g.run(ghDeviceProgram(jit.HelperMapUpdateElem, 1, true), ks))
	if n[0] != len(same) || n[-errEXIST] != len(ks)-len(same) {
		t.Fatalf("insert results %v, want %d × 0, the rest -EEXIST", n, len(same))
	}
	live, count, full := g.entries()
	if len(live) != len(same) || count != uint32(len(same)) || full != 0 {
		t.Fatalf("%d live, count %d, full %d; want %d, %d, 0", len(live), count, full, len(same), len(same))
	}
	for k, v := range live {
		if v != uint64(len(ks)/len(same)) {
			t.Errorf("key %d: %d, want %d", k, v, len(ks)/len(same))
		}
	}
}

// TestGPUHashDeviceFull: 4096 keys into 64 entries: exactly 64 live, every
// refusal -E2BIG and counted, and no thread hangs.
func TestGPUHashDeviceFull(t *testing.T) {
	const entries = 64
	g := newGHDevice(t, &jit.Map{Name: "gh", Type: jit.MapTypeGPUHash, KeySize: 4, ValueSize: 8, MaxEntries: entries})
	ks := make([]uint32, 1<<16)
	for i := range ks {
		ks[i] = uint32(i) % 4096
	}
	rcs := g.run(ghDeviceProgram(jit.HelperMapUpdateElem, 0, false), ks)
	n := tally(rcs)
	live, count, full := g.entries()
	if n[0]+n[-errE2BIG] != len(ks) || uint64(n[-errE2BIG]) != full {
		t.Fatalf("results %v, full counter %d", n, full)
	}
	if len(live) != entries || count != entries {
		t.Fatalf("%d live, count %d; want %d", len(live), count, entries)
	}
	for i, rc := range rcs {
		if _, ok := live[ks[i]]; rc == 0 && !ok {
			t.Fatalf("thread %d inserted key %d, which is not in the table", i, ks[i])
		}
	}
}

// TestGPUHashDeviceRate logs what a lookup and an atomic add through the
// found pointer cost, 2^22 threads over 4,096 keys (warm: the last of 3
// launches), beside a launch of the same geometry that only loads the key.
func TestGPUHashDeviceRate(t *testing.T) {
	const threads, keys = 1 << 22, 4096
	g := newGHDevice(t, &jit.Map{Name: "gh", Type: jit.MapTypeGPUHash, KeySize: 4, ValueSize: 8, MaxEntries: keys})
	ks := make([]uint32, threads)
	for i := range ks {
		ks[i] = uint32(i) % keys
	}
	g.run(ghDeviceProgram(jit.HelperMapUpdateElem, 1, false), ks[:keys])
	lookup := asm.Instructions{
		asm.LoadMem(asm.R6, asm.R1, 0, asm.Word),
		asm.StoreMem(asm.R10, -4, asm.R6, asm.Word),
		mapPtr(asm.R1, "gh"),
		asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, -4),
		call(jit.HelperMapLookupElem),
		asm.Instruction{OpCode: asm.JEq.Op(asm.ImmSource), Dst: asm.R0, Offset: 2},
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		asm.Return(),
	}
	base := asm.Instructions{asm.LoadMem(asm.R0, asm.R1, 0, asm.Word), asm.Return()}
	_, tb := g.runTimed(base, ks, 3)
	rcs, th := g.runTimed(lookup, ks, 3)
	for i, rc := range rcs {
		if rc == 0 {
			t.Fatalf("thread %d: key %d not found", i, ks[i])
		}
	}
	live, _, _ := g.entries()
	for k, v := range live {
		if v != 3*threads/keys {
			t.Fatalf("key %d counted %d, want %d", k, v, 3*threads/keys)
		}
	}
	t.Logf("%d threads: lookup + atomic add %v, key load only %v: %.2f ns per thread more",
		threads, th, tb, float64(th-tb)/threads)
}
