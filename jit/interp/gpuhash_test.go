package interp

import (
	"encoding/binary"
	"testing"

	"github.com/gpuprobe/gpuprobe/jit"
)

func gpuHashMap(entries uint32) *jit.Map {
	return &jit.Map{Name: "gh", Type: jit.MapTypeGPUHash, KeySize: 4, ValueSize: 8, MaxEntries: entries}
}

func u64b(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

// hashOp is one map operation and the result it must give.
type hashOp struct {
	op    byte // 'u'pdate, 'l'ookup (want: value, or -1 for absent), 'd'elete
	key   uint32
	val   uint64
	flags uint64
	want  int64
}

func TestGPUHashOps(t *testing.T) {
	tests := []struct {
		name    string
		entries uint32
		ops     []hashOp
	}{
		{"insert lookup", 4, []hashOp{{'u', 1, 10, flagAny, 0}, {'l', 1, 0, 0, 10}, {'l', 2, 0, 0, -1}}},
		{"overwrite", 4, []hashOp{{'u', 1, 10, flagAny, 0}, {'u', 1, 11, flagAny, 0}, {'l', 1, 0, 0, 11}}},
		{"noexist", 4, []hashOp{{'u', 1, 10, flagNoExist, 0}, {'u', 1, 11, flagNoExist, -errEEXIST}, {'l', 1, 0, 0, 10}}},
		{"exist", 4, []hashOp{{'u', 1, 10, flagExist, -errENOENT}, {'l', 1, 0, 0, -1}, {'u', 1, 10, flagAny, 0}, {'u', 1, 12, flagExist, 0}, {'l', 1, 0, 0, 12}}},
		{"bad flags", 4, []hashOp{{'u', 1, 10, 3, -errEINVAL}, {'l', 1, 0, 0, -1}}},
		{"delete", 4, []hashOp{{'u', 1, 10, flagAny, 0}, {'d', 1, 0, 0, 0}, {'l', 1, 0, 0, -1}, {'d', 1, 0, 0, -errENOENT}, {'d', 9, 0, 0, -errENOENT}}},
		{"revive tombstone", 4, []hashOp{{'u', 1, 10, flagAny, 0}, {'d', 1, 0, 0, 0}, {'u', 1, 5, flagExist, -errENOENT}, {'u', 1, 7, flagNoExist, 0}, {'l', 1, 0, 0, 7}}},
		{"max_entries", 2, []hashOp{{'u', 1, 1, flagAny, 0}, {'u', 2, 2, flagAny, 0}, {'u', 3, 3, flagAny, -errE2BIG}, {'u', 2, 4, flagAny, 0},
			{'d', 1, 0, 0, 0}, {'u', 3, 3, flagAny, 0}, {'l', 3, 0, 0, 3}, {'l', 2, 0, 0, 4}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewMaps()
			s, err := m.declare(gpuHashMap(tt.entries))
			if err != nil {
				t.Fatal(err)
			}
			for k, op := range tt.ops {
				if got := runHashOp(m, s, op); got != op.want {
					t.Fatalf("op %d %c key %d: got %d, want %d", k, op.op, op.key, got, op.want)
				}
			}
		})
	}
}

func runHashOp(m *Maps, s *mapState, op hashOp) int64 {
	key := key32(op.key)
	switch op.op {
	case 'u':
		return m.update(s, key, u64b(op.val), op.flags, nil)
	case 'd':
		return m.remove(s, key)
	}
	addr := m.lookup(s, key, nil)
	if addr == 0 {
		return -1
	}
	return int64(binary.LittleEndian.Uint64(m.valueAt(s, addr)))
}

// TestGPUHashCollisions fills a table with keys of one home slot: each
// goes to the next free slot, the probe limit refuses the rest and counts
// them, and deleting one of the chain keeps the others reachable.
func TestGPUHashCollisions(t *testing.T) {
	def := gpuHashMap(jit.HashMaxEntries / 4)
	l := jit.GPUHashLayout(def)
	home := func(k uint32) uint32 { return jit.HashKey(key32(k)) & (l.Slots - 1) }
	var keys []uint32
	for k := uint32(0); len(keys) < jit.HashProbeLimit+3; k++ {
		if home(k) == home(0) {
			keys = append(keys, k)
		}
	}
	m := NewMaps()
	s, err := m.declare(def)
	if err != nil {
		t.Fatal(err)
	}
	for n, k := range keys {
		want := int64(0)
		if n >= jit.HashProbeLimit {
			want = -errE2BIG
		}
		if got := m.update(s, key32(k), u64b(uint64(k)), flagAny, nil); got != want {
			t.Fatalf("insert %d (key %d): %d, want %d", n, k, got, want)
		}
	}
	if _, full, _ := m.GPUHashTable("gh"); full != 3 {
		t.Fatalf("full = %d, want 3", full)
	}
	if got := m.remove(s, key32(keys[5])); got != 0 {
		t.Fatalf("delete: %d", got)
	}
	for n, k := range keys[:jit.HashProbeLimit] {
		want := int64(k)
		if n == 5 {
			want = -1
		}
		if got := runHashOp(m, s, hashOp{op: 'l', key: k}); got != want {
			t.Fatalf("lookup %d (key %d): %d, want %d", n, k, got, want)
		}
	}
	// The tombstone belongs to keys[5]: another key of the same home slot
	// still finds no room.
	if got := m.update(s, key32(keys[jit.HashProbeLimit]), u64b(1), flagAny, nil); got != -errE2BIG {
		t.Fatalf("insert into a tombstone of another key: %d, want -E2BIG", got)
	}
}

// TestGPUHashProgram runs the helpers through a program: insert key 7
// with BPF_NOEXIST, look it up and add 1 through the pointer.
func TestGPUHashProgram(t *testing.T) {
	def := gpuHashMap(8)
	maps := NewMaps()
	src := `stw [%r10-4], 7
stdw [%r10-16], 41
ldmap %r1, gh
mov %r2, %r10
add %r2, -4
mov %r3, %r10
add %r3, -16
mov %r4, 1
call 2
ldmap %r1, gh
mov %r2, %r10
add %r2, -4
call 1
jne %r0, 0, +2
mov %r0, 99
exit
ldxdw %r1, [%r0]
add %r1, 1
stxdw [%r0], %r1
mov %r0, 0
exit`
	for run, want := range []uint64{42, 43} {
		if r0, err := Run(program(t, src, def), nil, &Env{Maps: maps}); err != nil || r0 != 0 {
			t.Fatalf("run %d: r0 %d, %v", run, r0, err)
		}
		v, ok, err := maps.HashValue("gh", key32(7))
		if err != nil || !ok || le64(v) != want {
			t.Fatalf("run %d: HashValue = %v %v %v, want %d", run, v, ok, err, want)
		}
	}
}

// TestGPUHashWarpInsert: the 32 lanes of a warp insert one key with
// BPF_NOEXIST: one succeeds, 31 see -EEXIST, and the map holds one entry
// that every lane counted itself into.
func TestGPUHashWarpInsert(t *testing.T) {
	def := gpuHashMap(4)
	src := `stw [%r10-4], 3
stdw [%r10-16], 0
ldmap %r1, gh
mov %r2, %r10
add %r2, -4
mov %r3, %r10
add %r3, -16
mov %r4, 1
call 2
mov %r6, %r0
ldmap %r1, gh
mov %r2, %r10
add %r2, -4
call 1
jeq %r0, 0, +2
mov %r1, 1
lock add [%r0+0], %r1
mov %r0, %r6
exit`
	maps := NewMaps()
	got, err := RunWarp(program(t, src, def), WarpLanes(&Env{Maps: maps}, nil, 32))
	if err != nil {
		t.Fatal(err)
	}
	n := map[int64]int{}
	for _, r0 := range got {
		n[int64(r0)]++
	}
	if n[0] != 1 || n[-errEEXIST] != 31 {
		t.Fatalf("results %v, want one 0 and 31 -EEXIST", n)
	}
	v, ok, err := maps.HashValue("gh", key32(3))
	if err != nil || !ok || le64(v) != 32 {
		t.Fatalf("HashValue = %v %v %v, want 32", v, ok, err)
	}
	if table, _, _ := maps.GPUHashTable("gh"); binary.LittleEndian.Uint32(table[jit.HashCountAt:]) != 1 {
		t.Fatal("count is not 1")
	}
}
