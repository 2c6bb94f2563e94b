package jit_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/interp"
	"github.com/gpuprobe/gpuprobe/jit/ptx"
	"github.com/gpuprobe/gpuprobe/jit/verifier"
)

// TestBlockagg runs testdata/bpf/blockagg.c's entry and exit programs over
// whole launches in the interpreter, warp by warp: one record per launch
// with every block and thread counted and the earliest and latest block
// ends. The second launch reuses the per-block words the first left
// behind (shared memory is not zeroed on a GPU), which the entry program's
// claim must reset.
func TestBlockagg(t *testing.T) {
	progs, err := jit.LoadELF(bpfObject(t, "blockagg"))
	if err != nil {
		t.Fatal(err)
	}
	if len(progs) != 2 || progs[0].Maps[0] != progs[1].Maps[0] {
		t.Fatalf("want blockagg_enter and blockagg_exit sharing one *Map for block_exits, got %v", progNames(progs))
	}
	for _, p := range progs {
		if _, err := verifier.Verify(p, verifier.Options{}); err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
	}
	enter, exit := prepare(t, progs[0]), prepare(t, progs[1])

	type warp struct{ block, warp uint64 }
	tests := []struct {
		name     string
		grid     [3]uint64
		block    uint64                 // threads per block (x); the last warp has fewer lanes if not a multiple of 32
		order    func(ws []warp) []warp // the order warps exit in
		launches int
	}{
		{name: "3x2 grid of 64, blocks in order", grid: [3]uint64{3, 2, 1}, block: 64, launches: 2,
			order: func(ws []warp) []warp { return ws }},
		{name: "2x1x2 grid of 48, warps interleaved in reverse", grid: [3]uint64{2, 1, 2}, block: 48, launches: 2,
			order: func(ws []warp) []warp {
				// Second warps of every block first, last block first.
				var out []warp
				for w := 1; w >= 0; w-- {
					for i := len(ws) - 1; i >= 0; i-- {
						if ws[i].warp == uint64(w) {
							out = append(out, ws[i])
						}
					}
				}
				return out
			}},
		{name: "one block of one warp", grid: [3]uint64{1, 1, 1}, block: 32, launches: 3,
			order: func(ws []warp) []warp { return ws }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			maps := interp.NewMaps()
			blocks := tt.grid[0] * tt.grid[1] * tt.grid[2]
			warpsPerBlock := (tt.block + 31) / 32
			var ws []warp
			for b := range blocks {
				for w := range warpsPerBlock {
					ws = append(ws, warp{b, w})
				}
			}
			env := func(wp warp, launch uint64, now *uint64) []interp.Lane {
				bx := wp.block % tt.grid[0]
				by := wp.block / tt.grid[0] % tt.grid[1]
				bz := wp.block / (tt.grid[0] * tt.grid[1])
				base := &interp.Env{BlockIdx: [3]uint64{bx, by, bz}, ThreadIdx: [3]uint64{wp.warp * 32},
					BlockDim: [3]uint64{tt.block, 1, 1}, GridDim: tt.grid, WarpID: wp.warp, LaunchID: launch, Maps: maps,
					Timer: func() uint64 { return *now }}
				if base.GlobalBlockID() != wp.block {
					t.Fatalf("block %d has linear id %d", wp.block, base.GlobalBlockID())
				}
				return interp.WarpLanes(base, nil, int(min(32, tt.block-wp.warp*32)))
			}
			for launch := range uint64(tt.launches) {
				var now uint64
				for _, wp := range ws {
					r0s, err := enter.RunWarp(env(wp, launch+7, &now))
					if err != nil {
						t.Fatal(err)
					}
					for i, r0 := range r0s {
						if r0 != 0 {
							t.Fatalf("enter: block %d warp %d lane %d: r0 %d", wp.block, wp.warp, i, r0)
						}
					}
				}
				// Exits: the k-th warp to exit does so at 1000*(launch+1) + 10*k.
				ends := map[uint64]uint64{} // block -> time its last warp exited
				done := map[uint64]uint64{} // block -> warps exited
				order := tt.order(ws)
				for k, wp := range order {
					now = 1000*(launch+1) + 10*uint64(k)
					r0s, err := exit.RunWarp(env(wp, launch+7, &now))
					if err != nil {
						t.Fatal(err)
					}
					done[wp.block]++
					want := uint64(0)
					if done[wp.block] == warpsPerBlock {
						ends[wp.block] = now
						want = 1
						if k == len(order)-1 {
							want = 2
						}
					}
					if r0s[0] != want {
						t.Errorf("launch %d: exit of block %d warp %d (%d-th): leader r0 %d, want %d", launch, wp.block, wp.warp, k, r0s[0], want)
					}
				}
				recs, _, err := maps.Records("launches")
				if err != nil {
					t.Fatal(err)
				}
				if len(recs) != int(launch)+1 {
					t.Fatalf("after launch %d: %d records, want %d", launch, len(recs), launch+1)
				}
				first, last := ^uint64(0), uint64(0)
				for _, e := range ends {
					first, last = min(first, e), max(last, e)
				}
				r := recs[launch]
				for f, w := range []uint64{blocks, blocks * tt.block, first, last} {
					if got := u64At(r, 8*f); got != w {
						t.Errorf("launch %d record field %d = %d, want %d", launch, f, got, w)
					}
				}
				cell, err := maps.Value("launch_cell", 0)
				if err != nil {
					t.Fatal(err)
				}
				for f := range 4 {
					if got := u64At(cell, 8*f); got != 0 {
						t.Errorf("launch %d: launch_cell field %d = %d after the record, want 0 (reset)", launch, f, got)
					}
				}
				tags := map[uint64]bool{}
				for b := range blocks {
					v, err := maps.BlockValue("block_exits", b, 0)
					w := mustValue(t, v, err)
					if w&0xffffffff != tt.block {
						t.Errorf("launch %d block %d: %d threads counted, want %d", launch, b, w&0xffffffff, tt.block)
					}
					tags[w>>32] = true
				}
				if len(tags) != int(blocks) {
					t.Errorf("launch %d: %d distinct block tags for %d blocks", launch, len(tags), blocks)
				}
			}
		})
	}
}

// TestBlockaggSharedVariable: blockagg's two programs compiled under their
// own prefixes declare the same .shared variable, once per module.
func TestBlockaggSharedVariable(t *testing.T) {
	progs, err := jit.LoadELF(bpfObject(t, "blockagg"))
	if err != nil {
		t.Fatal(err)
	}
	var fs []*ptx.Func
	for _, p := range progs {
		f, err := ptx.Compile(p, ptx.Options{Prefix: "gpuprobe_" + p.Name})
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		fs = append(fs, f)
	}
	for _, f := range fs {
		if len(f.Shared) != 1 || f.Shared[0].Map != "block_exits" || f.Shared[0].Size != 8 {
			t.Errorf("%s: Shared = %+v, want block_exits (8 bytes)", f.Name, f.Shared)
		}
		for _, g := range f.Globals {
			if g.Map == "block_exits" {
				t.Errorf("%s: global %s bound for the per-block map", f.Name, g.Name)
			}
		}
	}
	if len(fs) != 2 || len(fs[0].Shared) != 1 || len(fs[1].Shared) != 1 {
		t.FailNow()
	}
	if fs[0].Shared[0].Name != fs[1].Shared[0].Name {
		t.Errorf(".shared names differ: %s, %s", fs[0].Shared[0].Name, fs[1].Shared[0].Name)
	}
	if n := strings.Count(ptx.TestModule(fs...), ".shared "); n != 1 {
		t.Errorf("the module of both programs declares %d .shared variables, want 1", n)
	}
}

// TestLoadELFPerBlockLimits: the loader rejects per-block arrays that do
// not fit the 1 KiB of shared memory they may take, naming the map.
func TestLoadELFPerBlockLimits(t *testing.T) {
	hdr, err := filepath.Abs(filepath.Join(includeDir, "gpuprobe.h"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		key     string
		value   string
		entries int
		wantErr string // "" = loads
	}{
		{"1 KiB", "u32", "u64", 128, ""},
		{"12-byte values take 16", "u32", "struct { u32 a[3]; }", 64, ""},
		{"one entry over", "u32", "u64", 129, `map "blk" (type 1601): 129 entries of 8 bytes (8 with 8-byte alignment) take 1032 bytes of shared memory per block, more than the 1024`},
		{"aligned size over", "u32", "struct { u32 a[3]; }", 65, `map "blk" (type 1601): 65 entries of 12 bytes (16 with 8-byte alignment) take 1040 bytes`},
		{"key not a u32", "u64", "u64", 1, `map "blk" (type 1601): key size 8, want 4`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			src := fmt.Sprintf(`#include %q
struct {
	__uint(type, BPF_MAP_TYPE_PERGPUBLOCK_ARRAY_MAP);
	__uint(max_entries, %d);
	__type(key, %s);
	__type(value, %s);
} blk SEC(".maps");

SEC("kretprobe/_Z6kernelv")
int probe(void *ctx)
{
	%s k = 0;
	void *v = bpf_map_lookup_elem(&blk, &k);
	return v != 0;
}

char LICENSE[] SEC("license") = "GPL";
`, hdr, tt.entries, tt.key, tt.value, tt.key)
			c := filepath.Join(dir, "blk.c")
			if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			obj := filepath.Join(dir, "blk.o")
			if err := compileBPF(c, obj); err != nil {
				t.Fatal(err)
			}
			progs, err := jit.LoadELF(obj)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("rejected: %v", err)
			case tt.wantErr == "" && (len(progs) != 1 || progs[0].Maps[0].Type != jit.MapTypePerBlockArray):
				t.Fatalf("loaded %v", progNames(progs))
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("err %v, want %q", err, tt.wantErr)
			}
		})
	}
}
