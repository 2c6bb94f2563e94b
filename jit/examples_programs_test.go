package jit_test

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/jit/interp"
)

// The interpreter results of the programs scripts/gpu/examples.sh runs for
// bpftime's examples (cudacounter, kerneltrace, shardcount, smhist,
// smhash, threadtime, launchcount): the values examples_check.py expects
// on the GPU, over a small grid.

// launches runs entry then exit (either may be nil) in every thread of g,
// launches times, with a %globaltimer that advances 10 ns a read.
func launches(t *testing.T, g grid, maps *interp.Maps, out *bytes.Buffer, times int, entry, exit *interp.Machine) {
	t.Helper()
	now := uint64(1_000_000)
	timer := func() uint64 { now += 10; return now }
	for range times {
		g.each(maps, func(env *interp.Env) {
			env.Timer, env.Out = timer, out
			for _, m := range []*interp.Machine{entry, exit} {
				if m != nil {
					run(t, m, nil, env)
				}
			}
		})
	}
}

// wantArray checks keys 0.. of GPU array name against want.
func wantArray(t *testing.T, maps *interp.Maps, name string, want []uint64) {
	t.Helper()
	for k, w := range want {
		v, err := maps.Value(name, uint32(k))
		if got := mustValue(t, v, err); got != w {
			t.Errorf("%s[%d] = %d, want %d", name, k, got, w)
		}
	}
}

func TestCudaCounter(t *testing.T) {
	g := grid{[3]uint64{4}, [3]uint64{64}}
	maps, out := interp.NewMaps(), &bytes.Buffer{}
	const n = 3
	launches(t, g, maps, out, n, prepare(t, loadProg(t, "cudacounter", "cc_entry")),
		prepare(t, loadProg(t, "cudacounter", "cc_exit")))
	wantArray(t, maps, "cc_stats", []uint64{n, n * g.size()})
	v, err := maps.Value("cc_stats", 2)
	// The witness is the grid's first thread: entry and exit read the
	// timer back to back (its lookups between read none).
	if got := mustValue(t, v, err); got != n*10 {
		t.Errorf("cc_stats[2] (witness time) = %d, want %d", got, n*10)
	}
	if e, x := strings.Count(out.String(), "Entered vectorAdd"), strings.Count(out.String(), "Exited vectorAdd duration=10 ns"); e != n || x != n {
		t.Errorf("printk: %d Entered, %d Exited, want %d each:\n%s", e, x, n, out)
	}
}

func TestKernelTrace(t *testing.T) {
	g := grid{[3]uint64{2}, [3]uint64{64}}
	maps := interp.NewMaps()
	launches(t, g, maps, nil, 1, prepare(t, loadProg(t, "kerneltrace", "kerneltrace")), nil)
	recs, dropped, err := maps.Records("entries")
	if err != nil {
		t.Fatal(err)
	}
	if dropped != 0 || uint64(len(recs)) != g.size() {
		t.Fatalf("%d records, %d dropped; want %d, 0", len(recs), dropped, g.size())
	}
	for i, r := range recs {
		gid := uint64(i)
		bx, tx := binary.LittleEndian.Uint32(r[8:]), binary.LittleEndian.Uint32(r[20:])
		if len(r) != 32 || uint64(bx) != gid/64 || uint64(tx) != gid%64 || u64At(r, 0) != 1_000_000+10*(gid+1) {
			t.Errorf("record %d (%d bytes): ts %d block %d thread %d", i, len(r), u64At(r, 0), bx, tx)
		}
	}
}

func TestShardCount(t *testing.T) {
	g := grid{[3]uint64{3}, [3]uint64{96}}
	maps := interp.NewMaps()
	const n = 2
	launches(t, g, maps, nil, n, nil, prepare(t, loadProg(t, "shardcount", "sc_exit")))
	for _, m := range []string{"sc_dev", "sc_host"} {
		wantArray(t, maps, m, []uint64{n * g.size(), n})
	}
}

func TestSmHist(t *testing.T) {
	g := grid{[3]uint64{9}, [3]uint64{64}} // grid.each puts block x on SM x % 7
	maps := interp.NewMaps()
	launches(t, g, maps, nil, 1, prepare(t, loadProg(t, "smhist", "smhist")), nil)
	threads, warps := make([]uint64, 7), make([]uint64, 7)
	for b := range uint64(9) {
		threads[b%7] += 64
		warps[b%7] += 2
	}
	wantArray(t, maps, "sm_threads", threads)
	wantArray(t, maps, "sm_warps", warps)
	lanes := make([]uint64, 32)
	for l := range lanes {
		lanes[l] = g.size() / 32
	}
	wantArray(t, maps, "lane_threads", lanes)
}

func TestSmHash(t *testing.T) {
	g := grid{[3]uint64{9}, [3]uint64{64}}
	maps := interp.NewMaps()
	launches(t, g, maps, nil, 2, prepare(t, loadProg(t, "smhash", "smhash")), nil)
	want := map[uint32]uint64{}
	for b := range uint32(9) {
		for w := range uint32(2) { // grid.each's warp id: the warp within the block
			want[b%7<<8|w] += 2 * 32
		}
	}
	var sum uint64
	for k, w := range want {
		v, ok, err := maps.HashValue("smh_threads", binary.LittleEndian.AppendUint32(nil, k))
		if err != nil || !ok || binary.LittleEndian.Uint64(v) != w {
			t.Errorf("smh_threads[%#x] = %x (present %v, %v), want %d", k, v, ok, err, w)
		}
		sum += w
	}
	if sum != 2*g.size() {
		t.Errorf("counts sum to %d, want %d", sum, 2*g.size())
	}
	wantArray(t, maps, "smh_err", []uint64{0, 0})
}

func TestThreadTime(t *testing.T) {
	for _, k := range []struct{ entry, exit string }{{"tt_va_entry", "tt_va_exit"}, {"tt_gemm_entry", "tt_gemm_exit"}} {
		g := grid{[3]uint64{2, 2}, [3]uint64{16, 16}}
		maps := interp.NewMaps()
		const n = 2
		launches(t, g, maps, nil, n, prepare(t, loadProg(t, "threadtime", k.entry)), prepare(t, loadProg(t, "threadtime", k.exit)))
		// Entry and exit read the timer 10 ns apart: every thread in
		// bucket floor(log2(10)) = 3.
		wantArray(t, maps, "tt_log2_ns", []uint64{0, 0, 0, n * g.size(), 0})
		wantArray(t, maps, "tt_total", []uint64{10 * n * g.size(), n * g.size()})
	}
}

func TestLaunchCount(t *testing.T) {
	// Every dimension given: the interpreter's 610..612 multiply them as
	// they are.
	g := grid{[3]uint64{4, 4, 1}, [3]uint64{16, 16, 1}}
	maps := interp.NewMaps()
	const n = 3
	launches(t, g, maps, nil, n, prepare(t, loadProg(t, "launchcount", "lc_entry")), nil)
	wantArray(t, maps, "lc_counts", []uint64{n, 16 * n, 16 * n})
}
