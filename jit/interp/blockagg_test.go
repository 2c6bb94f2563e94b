package interp

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/jit"
)

// Per-block arrays (1601) and the helpers 607..609.

// minMaxSrc stores init at the pointer (the per-block value "blk" at off,
// or the stack), calls helper id with v, and returns the value there plus
// the helper's r0 (which must be 0).
func minMaxSrc(where string, off int, id jit.HelperID, init, v uint64) string {
	ptr := "mov %r6, %r10\nadd %r6, -8"
	if where == "blk" {
		ptr = fmt.Sprintf("stw [%%r10-4], 0\nldmap %%r1, blk\nmov %%r2, %%r10\nadd %%r2, -4\ncall 1\njne %%r0, 0, +2\nmov %%r0, 99\nexit\nmov %%r6, %%r0\nadd %%r6, %d", off)
	}
	return fmt.Sprintf(`%s
lddw %%r1, %#x
stxdw [%%r6], %%r1
mov %%r1, %%r6
lddw %%r2, %#x
call %d
ldxdw %%r1, [%%r6]
add %%r0, %%r1
exit`, ptr, init, v, id)
}

func TestAtomicMinMax(t *testing.T) {
	const big = 0xffff_ffff_ffff_fff0 // above 2^63: compared unsigned
	tests := []struct {
		name  string
		src   string
		want  uint64
		fault string // substring of the run-time error, "" = none
	}{
		{"max raises", minMaxSrc("blk", 0, jit.HelperAtomicMaxU64, 10, 15), 15, ""},
		{"max keeps", minMaxSrc("blk", 8, jit.HelperAtomicMaxU64, 20, 15), 20, ""},
		{"max unsigned", minMaxSrc("blk", 0, jit.HelperAtomicMaxU64, 7, big), big, ""},
		{"min lowers", minMaxSrc("blk", 8, jit.HelperAtomicMinU64, 20, 15), 15, ""},
		{"min keeps", minMaxSrc("blk", 0, jit.HelperAtomicMinU64, 10, 15), 10, ""},
		{"min unsigned", minMaxSrc("blk", 0, jit.HelperAtomicMinU64, 7, big), 7, ""},
		{"max on the stack", minMaxSrc("stack", 0, jit.HelperAtomicMaxU64, 1, 2), 2, ""},
		{"min on the stack", minMaxSrc("stack", 0, jit.HelperAtomicMinU64, big, 2), 2, ""},
		{"max past the value", "stw [%r10-4], 0\nldmap %r1, blk\nmov %r2, %r10\nadd %r2, -4\ncall 1\nmov %r1, %r0\nadd %r1, 12\nmov %r2, 1\ncall 607\nexit",
			0, "atomic_max_u64: pointer r1: write of 8 bytes at map value offset 12 is beyond the value"},
		{"min through NULL", "mov %r1, 0\nmov %r2, 1\ncall 608\nexit", 0, "atomic_min_u64: pointer r1"},
		{"fence", "mov %r0, 9\ncall 609\nexit", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := program(t, tt.src, arrayMap("blk", jit.MapTypePerBlockArray, 16, 1))
			r0, err := Run(p, nil, &Env{})
			if tt.fault != "" {
				if err == nil || !strings.Contains(err.Error(), tt.fault) {
					t.Fatalf("err %v, want %q", err, tt.fault)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r0 != tt.want {
				t.Fatalf("r0 = %#x, want %#x", r0, tt.want)
			}
		})
	}
}

// blockCountSrc: every thread adds 1 to blk[0] (an atomic add) and raises
// blk[1] to its linear thread index in the block + 1 (tid.x + 4 × tid.y,
// for blocks 4 wide) with atomic_max_u64; r0 = blk[0] afterwards.
const blockCountSrc = `
stw [%r10-4], 0
ldmap %r1, blk
mov %r2, %r10
add %r2, -4
call 1
jne %r0, 0, +2
mov %r0, 99
exit
mov %r6, %r0
mov %r1, 1
lock add [%r6], %r1
mov %r1, %r10
add %r1, -16
mov %r2, %r10
add %r2, -24
mov %r3, %r10
add %r3, -32
call 505
ldxdw %r1, [%r10-16]
ldxdw %r2, [%r10-24]
lsh %r2, 2
add %r2, %r1
add %r2, 1
mov %r1, %r6
add %r1, 8
call 607
ldxdw %r0, [%r6]
exit`

// TestPerBlockValues runs every thread of a 2×3 grid of 4×2 blocks: the
// threads of one block share its values, blocks have their own.
func TestPerBlockValues(t *testing.T) {
	p := program(t, blockCountSrc, arrayMap("blk", jit.MapTypePerBlockArray, 8, 2))
	m, err := Prepare(p)
	if err != nil {
		t.Fatal(err)
	}
	maps := NewMaps()
	grid, block := [3]uint64{2, 3, 1}, [3]uint64{4, 2, 1}
	// Blocks interleaved: the n-th thread of every block runs before the
	// (n+1)-th of any, so a shared count would grow with the grid.
	for ty := range block[1] {
		for tx := range block[0] {
			for by := range grid[1] {
				for bx := range grid[0] {
					env := &Env{BlockIdx: [3]uint64{bx, by}, ThreadIdx: [3]uint64{tx, ty}, BlockDim: block, GridDim: grid, Maps: maps}
					r0, err := m.Run(nil, env)
					if err != nil {
						t.Fatal(err)
					}
					if want := ty*block[0] + tx + 1; r0 != want {
						t.Fatalf("block %v thread %v: count %d, want %d", env.BlockIdx, env.ThreadIdx, r0, want)
					}
				}
			}
		}
	}
	tests := []struct {
		block       uint64
		count, high uint64
	}{
		{0, 8, 8}, {1, 8, 8}, {2, 8, 8}, {5, 8, 8},
		{6, 0, 0}, // not in the grid: never touched, reads zeros
	}
	for _, tt := range tests {
		for key, want := range []uint64{tt.count, tt.high} {
			v, err := maps.BlockValue("blk", tt.block, uint32(key))
			if err != nil {
				t.Fatal(err)
			}
			if got := binary.LittleEndian.Uint64(v); got != want {
				t.Errorf("block %d key %d = %d, want %d", tt.block, key, got, want)
			}
		}
	}
	if _, err := maps.BlockValue("blk", 0, 2); err == nil {
		t.Error("BlockValue beyond max_entries: no error")
	}
	if _, err := maps.WarpValue("blk", 0, 0); err == nil {
		t.Error("WarpValue of a per-block map: no error")
	}
	if err := maps.Update("blk", make([]byte, 4), make([]byte, 8)); err == nil || !strings.Contains(err.Error(), "written by programs only") {
		t.Errorf("host update of a per-block map: %v, want an error", err)
	}
}

func TestGlobalBlockID(t *testing.T) {
	tests := []struct {
		idx, grid [3]uint64
		want      uint64
	}{
		{[3]uint64{0, 0, 0}, [3]uint64{}, 0},
		{[3]uint64{3, 0, 0}, [3]uint64{4, 1, 1}, 3},
		{[3]uint64{1, 2, 0}, [3]uint64{4, 3, 1}, 9},
		{[3]uint64{1, 2, 1}, [3]uint64{4, 3, 2}, 21},
		{[3]uint64{0, 1, 0}, [3]uint64{0, 2, 0}, 1}, // zero dimensions count as 1
	}
	for _, tt := range tests {
		e := &Env{BlockIdx: tt.idx, GridDim: tt.grid, ThreadIdx: [3]uint64{5}, BlockDim: [3]uint64{64}}
		if got := e.GlobalBlockID(); got != tt.want {
			t.Errorf("GlobalBlockID(%v in %v) = %d, want %d", tt.idx, tt.grid, got, tt.want)
		}
		if got := e.GlobalThreadID(); got != tt.want*64+5 {
			t.Errorf("GlobalThreadID(%v in %v) = %d, want %d", tt.idx, tt.grid, got, tt.want*64+5)
		}
	}
}
