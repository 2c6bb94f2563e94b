package interp

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/bpfasm"
)

var ldmapRe = regexp.MustCompile(`^\s*ldmap\s+(%r\d+),\s*(\w+)\s*$`)

// program assembles src; a line `ldmap %rN, NAME` loads the handle of map
// NAME (an lddw with src = PseudoMapFD referencing NAME).
func program(t testing.TB, src string, maps ...*jit.Map) *jit.Program {
	t.Helper()
	lines := strings.Split(src, "\n")
	refs := map[int]string{}
	for i, l := range lines {
		if m := ldmapRe.FindStringSubmatch(l); m != nil {
			lines[i] = "lddw " + m[1] + ", 0"
			refs[i+1] = m[2]
		}
	}
	insns, err := bpfasm.Assemble(strings.Join(lines, "\n"))
	if err != nil {
		t.Fatalf("assemble: %v", err)
	}
	for i := range insns {
		if name, ok := refs[insns[i].Source().(bpfasm.Line).Num]; ok {
			insns[i].Src = asm.PseudoMapFD
			insns[i] = insns[i].WithReference(name)
		}
	}
	return &jit.Program{Name: "test", Insns: insns, Maps: maps}
}

func arrayMap(name string, typ jit.MapType, value, entries uint32) *jit.Map {
	return &jit.Map{Name: name, Type: typ, KeySize: 4, ValueSize: value, MaxEntries: entries}
}

// counterProg adds r6 (set by the caller's prelude) to counter[key 1].
const counterProg = `
stw [%r10-4], 1
ldmap %r1, counts
mov %r2, %r10
add %r2, -4
call 1
jeq %r0, 0, +3
ldxdw %r1, [%r0]
add %r1, r6val
stxdw [%r0], %r1
mov %r0, 0
exit`

func TestMapsArrayTypes(t *testing.T) {
	tests := []struct {
		typ   jit.MapType
		flags uint32
		read  func(m *Maps, e *Env) ([]byte, error)
	}{
		{jit.MapTypeGPUArray, 0, func(m *Maps, e *Env) ([]byte, error) { return m.Value("counts", 1) }},
		{jit.MapTypeArray, 0, func(m *Maps, e *Env) ([]byte, error) { return m.Value("counts", 1) }},
		// A kernel map shared with host programs: an ordinary array here.
		{jit.MapTypeArray, jit.MapFlagMmapable, func(m *Maps, e *Env) ([]byte, error) { return m.Value("counts", 1) }},
		{jit.MapTypePerThreadArray, 0, func(m *Maps, e *Env) ([]byte, error) { return m.ThreadValue("counts", e.GlobalThreadID(), 1) }},
		{jit.MapTypePerWarpArray, 0, func(m *Maps, e *Env) ([]byte, error) { return m.WarpValue("counts", e.GlobalWarpID(), 1) }},
		{jit.MapTypePerBlockArray, 0, func(m *Maps, e *Env) ([]byte, error) { return m.BlockValue("counts", e.GlobalBlockID(), 1) }},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d flags %#x", tt.typ, tt.flags), func(t *testing.T) {
			m := arrayMap("counts", tt.typ, 8, 4)
			m.Flags = tt.flags
			p := program(t, strings.ReplaceAll(counterProg, "r6val", "5"), m)
			maps := NewMaps()
			// Threads 0 and 1 of block 0, thread 0 of block 1 (a different
			// warp and block), and thread 40 of block 0 (the block's
			// second warp).
			envs := []*Env{
				{Maps: maps, BlockDim: [3]uint64{64, 1, 1}, GridDim: [3]uint64{2, 1, 1}},
				{Maps: maps, BlockDim: [3]uint64{64, 1, 1}, GridDim: [3]uint64{2, 1, 1}, ThreadIdx: [3]uint64{1}},
				{Maps: maps, BlockDim: [3]uint64{64, 1, 1}, GridDim: [3]uint64{2, 1, 1}, BlockIdx: [3]uint64{1}},
				{Maps: maps, BlockDim: [3]uint64{64, 1, 1}, GridDim: [3]uint64{2, 1, 1}, ThreadIdx: [3]uint64{40}},
			}
			for _, e := range envs {
				if r0, err := Run(p, nil, e); err != nil || r0 != 0 {
					t.Fatalf("Run = %d, %v", r0, err)
				}
			}
			want := map[jit.MapType][]uint64{
				jit.MapTypeGPUArray:       {20, 20, 20, 20},
				jit.MapTypeArray:          {20, 20, 20, 20},
				jit.MapTypePerThreadArray: {5, 5, 5, 5},
				jit.MapTypePerWarpArray:   {10, 10, 5, 5},
				jit.MapTypePerBlockArray:  {15, 15, 5, 15},
			}[tt.typ]
			for i, e := range envs {
				v, err := tt.read(maps, e)
				if err != nil {
					t.Fatal(err)
				}
				if got := le64(v); got != want[i] {
					t.Errorf("env %d (thread %d): value = %d, want %d", i, e.GlobalThreadID(), got, want[i])
				}
			}
		})
	}
}

func le64(b []byte) uint64 {
	var v uint64
	for i := len(b) - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

func TestMapHelpersErrors(t *testing.T) {
	hash := &jit.Map{Name: "h", Type: jit.MapTypeHash, KeySize: 4, ValueSize: 8, MaxEntries: 2}
	arr := arrayMap("a", jit.MapTypeGPUArray, 8, 4)
	// update(map, key=r7, value=42, flags=r8) -> r0
	upd := func(m, key, flags string) string {
		return fmt.Sprintf(`stw [%%r10-4], %s
stdw [%%r10-16], 42
ldmap %%r1, %s
mov %%r2, %%r10
add %%r2, -4
mov %%r3, %%r10
add %%r3, -16
mov %%r4, %s
call 2
`, key, m, flags)
	}
	del := func(m, key string) string {
		return fmt.Sprintf("stw [%%r10-4], %s\nldmap %%r1, %s\nmov %%r2, %%r10\nadd %%r2, -4\ncall 3\n", key, m)
	}
	tests := []struct {
		name, src string
		want      int64
	}{
		{"hash insert", upd("h", "1", "0") + "exit", 0},
		{"hash noexist on new", upd("h", "1", "1") + "exit", 0},
		{"hash noexist on existing", upd("h", "1", "0") + upd("h", "1", "1") + "exit", -17},
		{"hash exist on missing", upd("h", "1", "2") + "exit", -2},
		{"hash full", upd("h", "1", "0") + upd("h", "2", "0") + upd("h", "3", "0") + "exit", -7},
		{"hash bad flags", upd("h", "1", "4") + "exit", -22},
		{"hash delete", upd("h", "1", "0") + del("h", "1") + "exit", 0},
		{"hash delete missing", del("h", "9") + "exit", -2},
		{"array update", upd("a", "3", "0") + "exit", 0},
		{"array update beyond", upd("a", "4", "0") + "exit", -7},
		{"array noexist", upd("a", "0", "1") + "exit", -17},
		{"array delete", del("a", "0") + "exit", -22},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r0, err := Run(program(t, tt.src, hash, arr), nil, &Env{})
			if err != nil {
				t.Fatal(err)
			}
			if int64(r0) != tt.want {
				t.Fatalf("r0 = %d, want %d", int64(r0), tt.want)
			}
		})
	}
}

func TestHashObservableAndDangling(t *testing.T) {
	hash := &jit.Map{Name: "h", Type: jit.MapTypeHash, KeySize: 4, ValueSize: 8, MaxEntries: 8}
	maps := NewMaps()
	if err := maps.Declare(hash); err != nil {
		t.Fatal(err)
	}
	if err := maps.Update("h", []byte{7, 0, 0, 0}, []byte{1, 0, 0, 0, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	// Look key 7 up, add 10, delete it, then write through the old pointer.
	src := `stw [%r10-4], 7
ldmap %r1, h
mov %r2, %r10
add %r2, -4
call 1
jne %r0, 0, +1
exit
mov %r6, %r0
ldxdw %r1, [%r6]
add %r1, 10
stxdw [%r6], %r1
ldmap %r1, h
mov %r2, %r10
add %r2, -4
call 3
stdw [%r6], 1
exit`
	_, err := Run(program(t, src, hash), nil, &Env{Maps: maps})
	if err == nil || !strings.Contains(err.Error(), "deleted") {
		t.Fatalf("write after delete: %v, want a deleted-element fault", err)
	}
	if _, ok, _ := maps.HashValue("h", []byte{7, 0, 0, 0}); ok {
		t.Fatal("key 7 still present after delete")
	}
	// Without the delete the value is observable.
	src2 := strings.Replace(src, "call 3\nstdw [%r6], 1", "mov %r0, 0", 1)
	if _, err := Run(program(t, src2, hash), nil, &Env{Maps: maps}); err != nil {
		t.Fatal(err)
	}
	maps.Update("h", []byte{7, 0, 0, 0}, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	if _, err := Run(program(t, src2, hash), nil, &Env{Maps: maps}); err != nil {
		t.Fatal(err)
	}
	v, ok, err := maps.HashValue("h", []byte{7, 0, 0, 0})
	if err != nil || !ok || le64(v) != 11 {
		t.Fatalf("HashValue = %v %v %v, want 11", v, ok, err)
	}
}

func TestRingBuffer(t *testing.T) {
	ring := &jit.Map{Name: "events", Type: jit.MapTypeGPURingbuf, MaxEntries: 40}
	// Output a 12-byte record (cost 8 + 16 = 24): the second does not fit.
	src := `stdw [%r10-16], 0x11223344
stw [%r10-8], 0x55
mov %r6, %r1
mov %r1, %r6
ldmap %r2, events
mov %r3, 0
mov %r4, %r10
add %r4, -16
mov %r5, 12
call 25
mov %r7, %r0
mov %r1, %r6
ldmap %r2, events
mov %r3, 0
mov %r4, %r10
add %r4, -16
mov %r5, 12
call 25
lsh %r0, 8
or %r0, %r7
exit`
	maps := NewMaps()
	r0, err := Run(program(t, src, ring), nil, &Env{Maps: maps})
	if err != nil {
		t.Fatal(err)
	}
	if int64(r0)>>8 != -28 || r0&0xff != 0 {
		t.Fatalf("returns: first %d, second %d; want 0 and -28", r0&0xff, int64(r0)>>8)
	}
	recs, dropped, err := maps.Records("events")
	if err != nil || len(recs) != 1 || dropped != 1 {
		t.Fatalf("Records = %d records, %d dropped, %v", len(recs), dropped, err)
	}
	if want := []byte{0x44, 0x33, 0x22, 0x11, 0, 0, 0, 0, 0x55, 0, 0, 0}; string(recs[0]) != string(want) {
		t.Fatalf("record = % x, want % x", recs[0], want)
	}
	if got, _ := maps.Drain("events"); len(got) != 1 {
		t.Fatalf("Drain = %d records", len(got))
	}
	if recs, _, _ := maps.Records("events"); len(recs) != 0 {
		t.Fatalf("records after drain: %d", len(recs))
	}
}

func TestIDHelpers(t *testing.T) {
	env := &Env{
		ThreadIdx: [3]uint64{3, 4, 5}, BlockIdx: [3]uint64{6, 7, 8}, BlockDim: [3]uint64{32, 2, 1},
		GridDim: [3]uint64{9, 10, 11}, LaneID: 3, WarpID: 12, SMID: 13, PidTgid: 0x1234_0000_5678,
		LaunchID: 99, Timer: func() uint64 { return 123456 },
	}
	three := func(id int) string {
		return fmt.Sprintf(`mov %%r1, %%r10
add %%r1, -24
mov %%r2, %%r10
add %%r2, -16
mov %%r3, %%r10
add %%r3, -8
call %d
ldxdw %%r0, [%%r10-24]
ldxdw %%r1, [%%r10-16]
lsh %%r1, 16
or %%r0, %%r1
ldxdw %%r1, [%%r10-8]
lsh %%r1, 32
or %%r0, %%r1
exit`, id)
	}
	tests := []struct {
		name string
		src  string
		want uint64
	}{
		{"pid_tgid", "call 14\nexit", 0x1234_0000_5678},
		{"globaltimer", "call 502\nexit", 123456},
		{"block_idx", three(503), 6 | 7<<16 | 8<<32},
		{"block_dim", three(504), 32 | 2<<16 | 1<<32},
		{"thread_idx", three(505), 3 | 4<<16 | 5<<32},
		{"grid_dim", three(508), 9 | 10<<16 | 11<<32},
		{"membar", "mov %r0, 5\ncall 506\nexit", 0},
		{"exit helper", "mov %r0, 5\ncall 507\nmov %r0, 9\nexit", 0},
		{"smid", "call 509\nexit", 13},
		{"warpid", "call 510\nexit", 12},
		{"laneid", "call 511\nexit", 3},
		{"launch id", "call 606\nexit", 99},
		{"block linear id", "call 610\nexit", (8*10+7)*9 + 6},
		{"grid blocks", "call 611\nexit", 9 * 10 * 11},
		{"block threads", "call 612\nexit", 32 * 2 * 1},
		{"callx", "mov %r2, 511\ncall %r2\nexit", 3},
		{"single-lane warp sum", "mov %r1, 7\ncall 601\nexit", 7},
		{"single-lane leader", "call 600\nexit", 1},
		{"single-lane mask", "call 605\nexit", 1 << 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r0, err := Run(program(t, tt.src), nil, env)
			if err != nil {
				t.Fatal(err)
			}
			if r0 != tt.want {
				t.Fatalf("r0 = %#x, want %#x", r0, tt.want)
			}
		})
	}
	// An Env that leaves dimensions zero launches one block of one
	// thread in them, as GlobalBlockID counts.
	zero := &Env{BlockIdx: [3]uint64{2, 1}, GridDim: [3]uint64{4, 3}, BlockDim: [3]uint64{0, 8}}
	for _, tt := range []struct {
		src  string
		want uint64
	}{{"call 610\nexit", 1*4 + 2}, {"call 611\nexit", 4 * 3}, {"call 612\nexit", 8}} {
		if r0, err := Run(program(t, tt.src), nil, zero); err != nil || r0 != tt.want {
			t.Errorf("%q with zero dimensions: r0 = %d, %v; want %d", tt.src, r0, err, tt.want)
		}
	}
}

// TestKtime: bpf_ktime_get_ns (5) is Env.HostClock, or Env.Timer without
// one (as the PTX without a clock region); Env.Helpers[5] (the conformance
// runner's "unwind") overrides it.
func TestKtime(t *testing.T) {
	timer := func() uint64 { return 1000 }
	tests := []struct {
		name string
		env  *Env
		want uint64
	}{
		{"host clock", &Env{Timer: timer, HostClock: func() uint64 { return 77_000 }}, 77_000},
		{"no host clock: the timer", &Env{Timer: timer}, 1000},
		{"overridden", &Env{Timer: timer, HostClock: func() uint64 { return 77_000 }, Helpers: map[int32]HelperFunc{
			5: func(c *HelperCall) (uint64, error) { return c.Args[0], nil }}}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r0, err := Run(program(t, "mov %r1, 3\ncall 5\nexit"), nil, tt.env)
			if err != nil || r0 != tt.want {
				t.Fatalf("r0 = %d, %v; want %d", r0, err, tt.want)
			}
		})
	}
	before := uint64(time.Now().UnixNano())
	r0, err := Run(program(t, "call 5\nexit"), nil, &Env{})
	if err != nil || r0 < before {
		t.Fatalf("default clock: r0 = %d, %v; want the host's Unix ns (>= %d)", r0, err, before)
	}
}

// cstr stores s (NUL-terminated, up to 15 bytes) at r10-16 with stb.
func cstr(s string) string {
	var b strings.Builder
	for i := 0; i < 16; i++ {
		c := 0
		if i < len(s) {
			c = int(s[i])
		}
		fmt.Fprintf(&b, "stb [%%r10-%d], %d\n", 16-i, c)
	}
	return b.String()
}

func TestPrintkAndPuts(t *testing.T) {
	printk := func(f string, args ...string) string {
		src := cstr(f) + "mov %r1, %r10\nadd %r1, -16\nmov %r2, 16\n"
		for i, a := range args {
			src += fmt.Sprintf("lddw %%r%d, %s\n", 3+i, a)
		}
		return src + "call 6\nexit"
	}
	tests := []struct {
		name, src, out string
		r0             int64
	}{
		{"d", printk("v=%d\n", "-1"), "v=-1\n", 5},
		{"u32", printk("%u", "-1"), "4294967295", 10},
		{"llu", printk("%llu", "-1"), "18446744073709551615", 20},
		{"lld", printk("%lld", "-5"), "-5", 2},
		{"x", printk("%x %X", "255", "0xab"), "ff AB", 5},
		{"width", printk("[%5d|%-3u]", "42", "7"), "[   42|7  ]", 11},
		{"zero pad", printk("%08lx", "0xbeef"), "0000beef", 8},
		{"c and %%", printk("%c%%", "65"), "A%", 2},
		{"bad conversion", printk("%q", "1"), "", -22},
		{"four args", printk("%d%d%d%d", "1", "2", "3"), "", -22},
		{"puts", cstr("hello") + "mov %r1, %r10\nadd %r1, -16\ncall 501\nexit", "hello\n", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			r0, err := Run(program(t, tt.src), nil, &Env{Out: &out})
			if err != nil {
				t.Fatal(err)
			}
			if out.String() != tt.out || int64(r0) != tt.r0 {
				t.Fatalf("output %q r0 %d, want %q r0 %d", out.String(), int64(r0), tt.out, tt.r0)
			}
		})
	}
	// %s does not read through its pointer (trace_printk reads only its
	// format): it renders as the collector does, "(gpu 0x…)".
	src := "stdw [%r10-32], 0\nstw [%r10-32], 0x73250a\nstb [%r10-29], 0\n" +
		"mov %r1, %r10\nadd %r1, -32\nmov %r2, 4\nmov %r3, 0x1234\ncall 6\nexit"
	// fmt bytes: 0a 25 73 00 -> "\n%s"
	var out strings.Builder
	if _, err := Run(program(t, src), nil, &Env{Out: &out}); err != nil {
		t.Fatal(err)
	}
	if out.String() != "\n(gpu 0x1234)" {
		t.Fatalf("%%s output %q", out.String())
	}
}

// TestHostCallTextBound: puts and trace_printk read at most the ABI
// table's MaxLen bytes of text, as the compiled code copies into the
// mailbox; an unterminated string that ends at the frame's top faults.
func TestHostCallTextBound(t *testing.T) {
	fill := "lddw %r1, 0x6161616161616161\n"
	for k := 8; k <= 256; k += 8 {
		fill += fmt.Sprintf("stxdw [%%r10-%d], %%r1\n", k)
	}
	sig, _ := jit.HelperSignature(jit.HelperPuts)
	text := strings.Repeat("a", int(sig.MaxLen))
	for _, tt := range []struct{ name, src, out string }{
		{"puts", fill + "mov %r1, %r10\nadd %r1, -256\ncall 501\nexit", text + "\n"},
		{"trace_printk", fill + "mov %r1, %r10\nadd %r1, -256\nmov %r2, 250\ncall 6\nexit", text},
	} {
		var out strings.Builder
		if _, err := Run(program(t, tt.src), nil, &Env{Out: &out}); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if out.String() != tt.out {
			t.Fatalf("%s: output %d bytes, want %d", tt.name, out.Len(), len(tt.out))
		}
	}
	_, err := Run(program(t, "lddw %r1, 0x6161616161616161\nstxdw [%r10-8], %r1\nmov %r1, %r10\nadd %r1, -8\ncall 501\nexit"), nil, &Env{})
	if err == nil || !strings.Contains(err.Error(), "outside the 512-byte stack frame") {
		t.Fatalf("unterminated 8-byte string: %v, want a fault past the frame", err)
	}
}

func TestEnvHelpers(t *testing.T) {
	env := &Env{Helpers: map[int32]HelperFunc{
		1: func(c *HelperCall) (uint64, error) { // overrides map_lookup_elem
			b, err := c.Read(c.Args[0], 8)
			if err != nil {
				return 0, err
			}
			b[0]++
			return le64(b), c.Write(c.Args[0], b)
		},
		700: func(c *HelperCall) (uint64, error) {
			c.Exit = true
			return 77, nil
		},
		701: func(c *HelperCall) (uint64, error) { return 0, fmt.Errorf("boom") },
	}}
	r0, err := Run(program(t, "stdw [%r10-8], 41\nmov %r1, %r10\nadd %r1, -8\ncall 1\nldxdw %r0, [%r10-8]\nexit"), nil, env)
	if err != nil || r0 != 42 {
		t.Fatalf("override: r0 %d, %v", r0, err)
	}
	if r0, err := Run(program(t, "call 700\nmov %r0, 1\nexit"), nil, env); err != nil || r0 != 77 {
		t.Fatalf("exit helper: r0 %d, %v", r0, err)
	}
	if _, err := Run(program(t, "call 701\nexit"), nil, env); err == nil || !strings.Contains(err.Error(), "insn 0 (line 1: call 701): helper 701: boom") {
		t.Fatalf("failing helper: %v", err)
	}
}
