package jit_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/interp"
)

// The interpreter results of the testdata/bpf programs: each program is run
// over a grid the way the GPU would run it, and what it left in its maps is
// checked against the same logic written in Go.

// loadProg returns the program called name from testdata/bpf/<object>.o.
func loadProg(t *testing.T, object, name string) *jit.Program {
	t.Helper()
	progs, err := jit.LoadELF(bpfObject(t, object))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range progs {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("%s.o has no program %q (has %v)", object, name, progNames(progs))
	return nil
}

// grid is a launch shape.
type grid struct {
	blocks, threads [3]uint64
}

func (g grid) dims() (gx, gy, gz, bx, by, bz uint64) {
	d := func(v uint64) uint64 { return max(v, 1) }
	return d(g.blocks[0]), d(g.blocks[1]), d(g.blocks[2]), d(g.threads[0]), d(g.threads[1]), d(g.threads[2])
}

// each calls f with the Env of every thread of the grid, in launch order.
func (g grid) each(maps *interp.Maps, f func(env *interp.Env)) {
	gx, gy, gz, bx, by, bz := g.dims()
	for z := uint64(0); z < gz; z++ {
		for y := uint64(0); y < gy; y++ {
			for x := uint64(0); x < gx; x++ {
				for tz := uint64(0); tz < bz; tz++ {
					for ty := uint64(0); ty < by; ty++ {
						for tx := uint64(0); tx < bx; tx++ {
							lin := tx + ty*bx + tz*bx*by
							f(&interp.Env{
								BlockIdx:  [3]uint64{x, y, z},
								ThreadIdx: [3]uint64{tx, ty, tz},
								BlockDim:  g.threads,
								GridDim:   g.blocks,
								LaneID:    lin % 32,
								WarpID:    lin / 32,
								SMID:      x % 7,
								Maps:      maps,
							})
						}
					}
				}
			}
		}
	}
}

func (g grid) size() uint64 {
	gx, gy, gz, bx, by, bz := g.dims()
	return gx * gy * gz * bx * by * bz
}

func u64At(b []byte, off int) uint64 { return binary.LittleEndian.Uint64(b[off:]) }

func mustValue(t *testing.T, b []byte, err error) uint64 {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint64(b)
}

func run(t *testing.T, m *interp.Machine, ctx []byte, env *interp.Env) uint64 {
	t.Helper()
	r0, err := m.Run(ctx, env)
	if err != nil {
		t.Fatalf("thread %v block %v: %v", env.ThreadIdx, env.BlockIdx, err)
	}
	return r0
}

func prepare(t *testing.T, p *jit.Program) *interp.Machine {
	t.Helper()
	m, err := interp.Prepare(p)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestThreadhist(t *testing.T) {
	m := prepare(t, loadProg(t, "threadhist", "threadhist"))
	tests := []struct {
		name    string
		grid    grid
		repeats uint64
	}{
		{"4x64", grid{[3]uint64{4}, [3]uint64{64}}, 1},
		{"4x64 twice", grid{[3]uint64{4}, [3]uint64{64}}, 2},
		{"2x(8,4,2)", grid{[3]uint64{2}, [3]uint64{8, 4, 2}}, 1},
		{"(3,2)x1", grid{[3]uint64{3, 2}, [3]uint64{1}}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			maps := interp.NewMaps()
			for range tt.repeats {
				tt.grid.each(maps, func(env *interp.Env) {
					if r0 := run(t, m, nil, env); r0 != 0 {
						t.Fatalf("r0 = %d, want 0", r0)
					}
				})
			}
			for gid := range tt.grid.size() + 1 {
				want := tt.repeats
				if gid == tt.grid.size() { // one past the grid: never ran
					want = 0
				}
				b, err := maps.ThreadValue("thread_runs", gid, 0)
				if got := mustValue(t, b, err); got != want {
					t.Errorf("thread %d ran %d times, want %d", gid, got, want)
				}
			}
			_, _, _, bx, by, bz := tt.grid.dims()
			gx := tt.grid.blocks[0]
			for b := range gx + 1 {
				want := bx * by * bz * tt.repeats * (tt.grid.size() / (gx * bx * by * bz))
				if b == gx {
					want = 0
				}
				v, err := maps.Value("block_threads", uint32(b))
				if got := mustValue(t, v, err); got != want {
					t.Errorf("block x=%d: %d threads, want %d", b, got, want)
				}
			}
		})
	}
}

func TestKernelretsnoop(t *testing.T) {
	m := prepare(t, loadProg(t, "kernelretsnoop", "kernelretsnoop"))
	g := grid{[3]uint64{4}, [3]uint64{64}}
	maps := interp.NewMaps()
	g.each(maps, func(env *interp.Env) {
		gid := env.GlobalThreadID()
		env.Timer = func() uint64 { return 1_000_000 + gid*10 }
		if r0 := run(t, m, nil, env); r0 != 0 {
			t.Fatalf("perf_event_output returned %d", int64(r0))
		}
	})
	recs, dropped, err := maps.Records("exits")
	if err != nil {
		t.Fatal(err)
	}
	if dropped != 0 || uint64(len(recs)) != g.size() {
		t.Fatalf("%d records, %d dropped; want %d, 0", len(recs), dropped, g.size())
	}
	seen := map[[2]uint64]bool{}
	for i, r := range recs {
		if len(r) != 64 {
			t.Fatalf("record %d: %d bytes, want 64", i, len(r))
		}
		bx, tx := u64At(r, 0), u64At(r, 24)
		if seen[[2]uint64{bx, tx}] {
			t.Errorf("block %d thread %d: two records", bx, tx)
		}
		seen[[2]uint64{bx, tx}] = true
		gid := bx*64 + tx
		want := []uint64{bx, 0, 0, tx, 0, 0, 1_000_000 + gid*10}
		for f, w := range want {
			if got := u64At(r, f*8); got != w {
				t.Errorf("record %d field %d: %d, want %d", i, f, got, w)
			}
		}
		if sm, lane := binary.LittleEndian.Uint32(r[56:]), binary.LittleEndian.Uint32(r[60:]); uint64(sm) != bx%7 || uint64(lane) != tx%32 {
			t.Errorf("record %d: sm %d lane %d, want %d %d", i, sm, lane, bx%7, tx%32)
		}
	}
}

func TestWarpagg(t *testing.T) {
	m := prepare(t, loadProg(t, "warpagg", "warpagg"))
	tests := []struct {
		name  string
		lanes int
		stamp func(lane int) uint64 // exit timestamp of a lane
	}{
		{"full warp, rising", 32, func(l int) uint64 { return 5000 + uint64(l)*3 }},
		{"full warp, scattered", 32, func(l int) uint64 { return uint64((l*7919)%101) + 1<<40 }},
		{"20 lanes", 20, func(l int) uint64 { return 900 - uint64(l) }},
		{"one lane", 1, func(l int) uint64 { return 42 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			maps := interp.NewMaps()
			const blocks, warpsPerBlock = 2, 2
			for b := range uint64(blocks) {
				for w := range uint64(warpsPerBlock) {
					base := &interp.Env{BlockIdx: [3]uint64{b}, ThreadIdx: [3]uint64{w * 32},
						BlockDim: [3]uint64{32 * warpsPerBlock}, GridDim: [3]uint64{blocks}, WarpID: w, Maps: maps}
					lanes := interp.WarpLanes(base, nil, tt.lanes)
					for i := range lanes {
						ts := tt.stamp(i)
						lanes[i].Env.Timer = func() uint64 { return ts }
					}
					r0s, err := m.RunWarp(lanes)
					if err != nil {
						t.Fatal(err)
					}
					for i, r0 := range r0s {
						if want := uint64(min(i, 1) ^ 1); r0 != want { // leader returns 1
							t.Errorf("block %d warp %d lane %d: r0 %d, want %d", b, w, i, r0, want)
						}
					}
					gw := base.GlobalWarpID()
					v, err := maps.WarpValue("warp_exits", gw, 0)
					if got := mustValue(t, v, err); got != 1 {
						t.Errorf("warp %d: warp_exits %d, want 1", gw, got)
					}
				}
			}
			recs, _, err := maps.Records("warps")
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != blocks*warpsPerBlock {
				t.Fatalf("%d records, want one per warp (%d)", len(recs), blocks*warpsPerBlock)
			}
			var sum, lo, hi uint64 = 0, ^uint64(0), 0
			for i := range tt.lanes {
				ts := tt.stamp(i)
				sum, lo, hi = sum+ts, min(lo, ts), max(hi, ts)
			}
			mask := uint64(1)<<tt.lanes - 1
			for i, r := range recs {
				want := []uint64{uint64(i / warpsPerBlock), uint64(i % warpsPerBlock), uint64(tt.lanes), mask, lo, hi, sum}
				for f, w := range want {
					if got := u64At(r, f*8); got != w {
						t.Errorf("record %d field %d: %d, want %d", i, f, got, w)
					}
				}
			}
		})
	}
}

// memctx encodes a kprobe/__memcapture context.
func memctx(addr uint64, size uint32, store bool) []byte {
	b := make([]byte, jit.MemCtxSize)
	binary.LittleEndian.PutUint64(b, addr)
	binary.LittleEndian.PutUint32(b[8:], size)
	if store {
		binary.LittleEndian.PutUint32(b[12:], jit.MemCtxStore)
	}
	return b
}

func TestMemcount(t *testing.T) {
	m := prepare(t, loadProg(t, "memcount", "memcount"))
	type access struct {
		size  uint32
		store bool
	}
	tests := []struct {
		name     string
		accesses []access
		want     [4]uint64 // loads, stores, load bytes, store bytes
	}{
		{"none", nil, [4]uint64{}},
		{"one load", []access{{4, false}}, [4]uint64{1, 0, 4, 0}},
		{"one store", []access{{16, true}}, [4]uint64{0, 1, 0, 16}},
		{"vectorAdd thread", []access{{4, false}, {4, false}, {4, true}}, [4]uint64{2, 1, 8, 4}},
		{"mixed sizes", []access{{1, false}, {2, true}, {8, false}, {16, true}, {4, true}}, [4]uint64{2, 3, 9, 22}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			maps := interp.NewMaps()
			for i, a := range tt.accesses {
				env := &interp.Env{ThreadIdx: [3]uint64{uint64(i)}, Maps: maps}
				run(t, m, memctx(0x7f0000000000+uint64(i)*64, a.size, a.store), env)
			}
			if len(tt.accesses) == 0 {
				if err := maps.Declare(loadProg(t, "memcount", "memcount").Maps[0]); err != nil {
					t.Fatal(err)
				}
			}
			for k, w := range tt.want {
				v, err := maps.Value("mem_counters", uint32(k))
				if got := mustValue(t, v, err); got != w {
					t.Errorf("counter %d: %d, want %d", k, got, w)
				}
			}
		})
	}
}

func TestAllhelpers(t *testing.T) {
	m := prepare(t, loadProg(t, "allhelpers", "allhelpers"))
	tests := []struct {
		tx   uint64
		want uint64 // r0: 1, or 0 when the thread ends its kernel (helper 507)
	}{{0, 1}, {5, 1}, {7, 0}, {31, 1}}
	for _, tt := range tests {
		t.Run(fmt.Sprint("thread ", tt.tx), func(t *testing.T) {
			var out bytes.Buffer
			maps := interp.NewMaps()
			env := &interp.Env{
				ThreadIdx: [3]uint64{tt.tx, 1, 0}, BlockIdx: [3]uint64{3, 2, 1},
				BlockDim: [3]uint64{32, 2, 1}, GridDim: [3]uint64{4, 3, 2},
				LaneID: tt.tx, WarpID: 9, SMID: 77, PidTgid: 1234<<32 | 1235, LaunchID: 99,
				Timer: func() uint64 { return 123456789 }, Maps: maps, Out: &out,
			}
			if r0 := run(t, m, nil, env); r0 != tt.want {
				t.Errorf("r0 = %d, want %d", r0, tt.want)
			}
			recs, _, err := maps.Records("events")
			if err != nil || len(recs) != 1 || len(recs[0]) != 240 {
				t.Fatalf("records %v (%v), want one of 240 bytes", len(recs), err)
			}
			r := recs[0]
			want := []uint64{
				1234<<32 | 1235, 123456789,
				3, 2, 1, 32, 2, 1, tt.tx, 1, 0, 4, 3, 2,
				77, 9, tt.tx,
				1, 1, 1 << (tt.tx & 31), tt.tx, tt.tx, tt.tx, // one-lane warp: leader, 1 lane, its bit, sum=min=max
				99,
				tt.tx*3 + 1, 0, 0, 0,
				0, uint64(len(fmt.Sprintf("thread %d\n", tt.tx))),
			}
			names := []string{"pid_tgid", "timer", "block.x", "block.y", "block.z", "block_dim.x", "block_dim.y", "block_dim.z",
				"thread.x", "thread.y", "thread.z", "grid.x", "grid.y", "grid.z", "sm_id", "warp_id", "lane_id",
				"leader", "lanes", "mask", "sum", "min", "max", "launch_id", "looked_up", "hash_update", "hash_delete",
				"membar", "puts", "printk"}
			for f, w := range want {
				if got := u64At(r, f*8); got != w {
					t.Errorf("%s: %d, want %d", names[f], int64(got), int64(w))
				}
			}
			v, err := maps.Value("array_map", uint32(tt.tx))
			if got := mustValue(t, v, err); got != tt.tx*3+1 {
				t.Errorf("array_map[%d] = %d, want %d", tt.tx, got, tt.tx*3+1)
			}
			key := binary.LittleEndian.AppendUint32(nil, uint32(tt.tx))
			if _, ok, err := maps.HashValue("hash_map", key); ok || err != nil {
				t.Errorf("hash_map[%d] still present after delete (err %v)", tt.tx, err)
			}
			text := out.String()
			for _, w := range []string{"allhelpers", fmt.Sprintf("thread %d\n", tt.tx)} {
				if !strings.Contains(text, w) {
					t.Errorf("output %q lacks %q", text, w)
				}
			}
		})
	}
}

// mix is callfunc.c's mix().
func mix(a, b uint64) uint64 { return a*31 + (b ^ (b >> 3)) }

func TestCallfunc(t *testing.T) {
	m := prepare(t, loadProg(t, "callfunc", "callfunc"))
	g := grid{[3]uint64{3}, [3]uint64{16, 2}}
	maps := interp.NewMaps()
	g.each(maps, func(env *interp.Env) {
		h := mix(mix(env.BlockIdx[0], env.ThreadIdx[0]), env.ThreadIdx[1])
		if r0 := run(t, m, nil, env); r0 != h&0xffff {
			t.Errorf("thread %v block %v: r0 %#x, want %#x", env.ThreadIdx, env.BlockIdx, r0, h&0xffff)
		}
	})
	// The last thread to write mixed[tx] is block 2, thread (tx, 1).
	for tx := range uint64(16) {
		v, err := maps.Value("mixed", uint32(tx))
		if got, want := mustValue(t, v, err), mix(mix(2, tx), 1); got != want {
			t.Errorf("mixed[%d] = %#x, want %#x", tx, got, want)
		}
	}
	v, err := maps.Value("mixed", 1023)
	if got := mustValue(t, v, err); got != 2*g.size() {
		t.Errorf("mix ran %d times, want %d", got, 2*g.size())
	}
}

// collatzSteps is loop.c's loop in Go.
func collatzSteps(x uint64) uint64 {
	n := uint64(0)
	for i := 0; i < 1000 && x != 1; i++ {
		if x&1 == 1 {
			x = 3*x + 1
		} else {
			x /= 2
		}
		n++
	}
	return n
}

func TestLoop(t *testing.T) {
	m := prepare(t, loadProg(t, "loop", "collatz"))
	maps := interp.NewMaps()
	g := grid{[3]uint64{1}, [3]uint64{128}}
	g.each(maps, func(env *interp.Env) {
		want := collatzSteps(env.ThreadIdx[0] + 1)
		if r0 := run(t, m, nil, env); r0 != want {
			t.Errorf("thread %d: r0 %d, want %d", env.ThreadIdx[0], r0, want)
		}
	})
	for tx, want := range map[uint32]uint64{0: 0, 1: 1, 2: 7, 26: 111, 96: 118} {
		v, err := maps.Value("steps", tx)
		if got := mustValue(t, v, err); got != want {
			t.Errorf("steps[%d] = %d, want %d", tx, got, want)
		}
	}
}

// TestLaunchlate runs both halves of launchlate: the host half (a uprobe)
// stores its bpf_ktime_get_ns in the shared kernel map; the GPU half takes
// bpf_ktime_get_ns on the GPU, which is %globaltimer plus the collector's
// offset (Env.HostClock here), so the delay is right whatever the offset
// between the two clocks.
func TestLaunchlate(t *testing.T) {
	host := loadProg(t, "launchlate", "launch_host")
	gpu := prepare(t, loadProg(t, "launchlate", "launch_gpu"))
	const launchNs = 1_000_000
	tests := []struct {
		name   string
		delay  uint64
		offset int64 // CLOCK_MONOTONIC - %globaltimer
		bucket uint64
	}{
		{"0 ns", 0, 500, 0},
		{"1 ns", 1, 500, 0},
		{"2 ns", 2, -500, 1},
		{"3 ns", 3, 500, 1},
		{"1 us, GPU clock ahead", 1000, -1 << 40, 9},
		{"2^40 ns, GPU clock behind", 1 << 40, 1 << 50, 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			maps := interp.NewMaps()
			hostEnv := &interp.Env{Maps: maps, HostClock: func() uint64 { return launchNs }}
			if _, err := interp.Run(host, nil, hostEnv); err != nil {
				t.Fatalf("host half: %v", err)
			}
			globaltimer := uint64(int64(launchNs+tt.delay) - tt.offset)
			g := grid{[3]uint64{3}, [3]uint64{64}}
			g.each(maps, func(env *interp.Env) {
				env.Timer = func() uint64 { return globaltimer }
				env.HostClock = func() uint64 { return uint64(int64(env.Timer()) + tt.offset) }
				want := uint64(0)
				if env.ThreadIdx == [3]uint64{} {
					want = tt.bucket
				}
				if r0 := run(t, gpu, nil, env); r0 != want {
					t.Errorf("thread %v: r0 %d, want %d", env.ThreadIdx, r0, want)
				}
			})
			for b := range uint32(64) {
				want := uint64(0)
				if uint64(b) == tt.bucket {
					want = 3 // thread 0 of each block
				}
				v, err := maps.Value("delay_log2_ns", b)
				if got := mustValue(t, v, err); got != want {
					t.Errorf("bucket %d: %d, want %d", b, got, want)
				}
			}
			v, err := maps.Value("launch_clock", 1)
			if got := mustValue(t, v, err); got != tt.delay {
				t.Errorf("launch_clock[1] (last delay) = %d, want %d", got, tt.delay)
			}
			if tt.delay > 1 && tt.bucket != uint64(bits.Len64(tt.delay)-1) {
				t.Fatalf("test table: bucket of %d is log2", tt.delay)
			}
		})
	}
	t.Run("no launch recorded", func(t *testing.T) {
		maps := interp.NewMaps()
		if r0 := run(t, gpu, nil, &interp.Env{Maps: maps}); r0 != 0 {
			t.Errorf("r0 %d, want 0", r0)
		}
	})
}

func TestLegacyMaps(t *testing.T) {
	m := prepare(t, loadProg(t, "legacymaps", "legacy"))
	maps := interp.NewMaps()
	g := grid{[3]uint64{2}, [3]uint64{96}}
	g.each(maps, func(env *interp.Env) { run(t, m, nil, env) })
	for k := range uint32(64) {
		want := uint64(2) // 2 blocks, one thread per key
		if k < 32 {
			want = 4 // threads k and k+64 of each block
		}
		v, err := maps.Value("legacy_counts", k)
		if got := mustValue(t, v, err); got != want {
			t.Errorf("legacy_counts[%d] = %d, want %d", k, got, want)
		}
	}
	for gid := range g.size() {
		v, err := maps.ThreadValue("legacy_per_thread", gid, 0)
		if got := mustValue(t, v, err); got != gid%96 {
			t.Errorf("thread %d stored %d, want its x index %d", gid, got, gid%96)
		}
	}
}

// TestKernelShared runs both halves of kernelshared over two launches:
// the host half counts launches in key 1 of the kernel-shared array, the
// GPU half every thread in key 0, through the one map both see.
func TestKernelShared(t *testing.T) {
	host := loadProg(t, "kernelshared", "ks_launches")
	gpu := prepare(t, loadProg(t, "kernelshared", "ks_threads"))
	hostM, err := interp.Prepare(host)
	if err != nil {
		t.Fatal(err)
	}
	maps := interp.NewMaps()
	g := grid{[3]uint64{3}, [3]uint64{64}}
	const launches = 2
	for range launches {
		if _, err := hostM.Run(nil, &interp.Env{Maps: maps}); err != nil {
			t.Fatalf("host half: %v", err)
		}
		g.each(maps, func(env *interp.Env) { run(t, gpu, nil, env) })
	}
	for key, want := range []uint64{launches * g.size(), launches} {
		v, err := maps.Value("ks_count", uint32(key))
		if got := mustValue(t, v, err); got != want {
			t.Errorf("ks_count[%d] = %d, want %d", key, got, want)
		}
	}
}
