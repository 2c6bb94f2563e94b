package progmaps

import (
	"encoding/binary"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/shm"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// buildIdioms compiles testdata/bpf/idioms.c (an object written as
// bpftime's GPU examples are) with clang into a temp dir.
func buildIdioms(t testing.TB) string {
	root := repoRoot(t)
	out := filepath.Join(t.TempDir(), "idioms.o")
	cmd := exec.Command("clang", "-target", "bpf", "-O2", "-g", "-Wall", "-Werror", "-mcpu=v3", "-I", filepath.Join(root, "jit", "include"),
		"-c", filepath.Join(root, "testdata", "bpf", "idioms.c"), "-o", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("clang idioms.c: %v\n%s", err, b)
	}
	return out
}

// exitRecord is struct exit_small of idioms.c, cut to n bytes.
func exitRecord(n int) []byte {
	b := make([]byte, 32)
	put64(b, 0, 1000)
	binary.LittleEndian.PutUint32(b[8:], 5)  // lane
	binary.LittleEndian.PutUint32(b[12:], 2) // block
	put64(b, 16, 77)                         // sm (payload[0] of exit_big)
	binary.LittleEndian.PutUint32(b[24:], 3) // warp
	binary.LittleEndian.PutUint32(b[28:], 9) // flags
	return b[:n]
}

// TestShortRingRecords: a ring that declares a 1024-byte value gets
// 32-byte records (bpftime's examples write what they fill in); they are
// decoded by the bytes written, with the declared type or the one
// programs[i]::record_types names.
func TestShortRingRecords(t *testing.T) {
	obj := buildIdioms(t)
	tests := []struct {
		name   string
		types  map[string]string
		sizes  []int
		attrs  []string // attributes of the first event, sorted
		short  uint64
		cut    uint64
		logged int
	}{
		{"declared type", nil, []int{32, 32}, []string{"block", "lane", "payload"}, 2, 0, 0},
		{"record_types", map[string]string{"exits": "exit_small"}, []int{32, 32}, []string{"block", "flags", "lane", "sm", "warp"}, 0, 0, 0},
		{"cut field", map[string]string{"exits": "exit_small"}, []int{30, 30, 32}, []string{"block", "lane", "sm", "warp"}, 2, 2, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defs, err := loadFiles([]config.ProgramConfig{{Path: obj, RecordTypes: tt.types}}, Options{MaxThreads: 64})
			if err != nil {
				t.Fatal(err)
			}
			in, err := NewInstance(defs, 42, 7, "app", time.Now())
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			ring := in.Ring("exits")
			for _, n := range tt.sizes {
				if r := ring.Produce(0, exitRecord(n)); r != shm.Published {
					t.Fatal(r)
				}
			}
			core, logs := observer.New(zap.DebugLevel)
			c := NewCollector(CollectorOptions{Logger: zap.New(core)})
			c.ReadRings(in, time.Now(), 0)
			cs := c.Counters()
			if cs.Records != uint64(len(tt.sizes)) || cs.Invalid != 0 || cs.Short != tt.short ||
				cs.Cut != tt.cut || cs.EventsBuilt != uint64(len(tt.sizes)) {
				t.Fatalf("counters %+v", cs)
			}
			if n := logs.FilterMessageSnippet("end inside a field").Len(); n != tt.logged {
				t.Errorf("%d cut-record logs, want %d", n, tt.logged)
			}
			ev := spanList(c.TakeTraces())[0].Events().At(0)
			var got []string
			payload := 0
			for k := range ev.Attributes().All() {
				if k == AttrClockMapped {
					continue // no calibration here
				}
				if strings.HasPrefix(k, "payload[") {
					payload++ // bytes 16..32 of exit_big: payload[0] and [1]
				}
				got = append(got, strings.SplitN(k, "[", 2)[0])
			}
			if payload != 0 && payload != 2 {
				t.Errorf("%d payload elements, want the 2 the record holds", payload)
			}
			slices.Sort(got)
			got = slices.Compact(got)
			if strings.Join(got, ",") != strings.Join(tt.attrs, ",") {
				t.Errorf("attributes %v, want %v", got, tt.attrs)
			}
			if v, _ := ev.Attributes().Get("lane"); v.Int() != 5 {
				t.Errorf("lane = %v", v.AsRaw())
			}
		})
	}
}

// TestOverrideErrors: record_types and map_values are checked against the
// object's maps and BTF, each error naming its config key.
func TestOverrideErrors(t *testing.T) {
	obj := buildIdioms(t)
	tests := []struct {
		name string
		pc   config.ProgramConfig
		want string
	}{
		{"struct not in BTF", config.ProgramConfig{RecordTypes: map[string]string{"exits": "foo"}},
			`programs[0]::record_types::exits: struct "foo" not in the object's BTF`},
		{"record type of an array", config.ProgramConfig{RecordTypes: map[string]string{"settings": "exit_small"}},
			`programs[0]::record_types::settings: map "settings" has type 1503; only GPU ring buffers (1527) take a record type`},
		{"record type of an unknown map", config.ProgramConfig{RecordTypes: map[string]string{"nope": "exit_small"}},
			`programs[0]::record_types::nope: no GPU map "nope" in the attached programs`},
		{"the declared type itself", config.ProgramConfig{RecordTypes: map[string]string{"exits": "exit_big"}}, ""},
		{"key out of range", config.ProgramConfig{MapValues: map[string]map[string]any{"settings": {"4": 1}}},
			`programs[0]::map_values::settings::4: key 4 out of range: map "settings" has max_entries 4`},
		{"value too large", config.ProgramConfig{MapValues: map[string]map[string]any{"narrow": {"0": uint64(1 << 32)}}},
			`programs[0]::map_values::narrow::0: value needs 5 bytes; map "narrow"'s value is 4 bytes`},
		{"too many words", config.ProgramConfig{MapValues: map[string]map[string]any{"settings": {"0": []any{1, 2, 3}}}},
			`programs[0]::map_values::settings::0: value needs 17 bytes; map "settings"'s value is 16 bytes`},
		{"ring seeded", config.ProgramConfig{MapValues: map[string]map[string]any{"exits": {"0": 1}}},
			`programs[0]::map_values::exits::0: map "exits" is a ring buffer (1527); only arrays (1502, 1503, 1600) take initial values`},
		{"unknown map", config.ProgramConfig{MapValues: map[string]map[string]any{"nope": {"0": 1}}},
			`programs[0]::map_values::nope::0: no GPU map "nope" in the attached programs`},
		{"bad word", config.ProgramConfig{MapValues: map[string]map[string]any{"settings": {"0": -1}}},
			`programs[0]::map_values::settings::0: must be an unsigned 64-bit number`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.pc.Path = obj
			_, err := loadFiles([]config.ProgramConfig{tt.pc}, Options{MaxThreads: 64})
			if tt.want == "" {
				if err != nil {
					t.Fatal(err) // the declared type itself always fits
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("error %v, want one starting %q", err, tt.want)
			}
		})
	}
}

// TestSeededArrays: programs[i]::map_values are in every application's
// regions from the start, in every lane of per-thread arrays, and the rest
// of the map stays zero.
func TestSeededArrays(t *testing.T) {
	obj := buildIdioms(t)
	pc := config.ProgramConfig{Path: obj, MapValues: map[string]map[string]any{
		"settings": {"0": []any{1, 0xff}, "3": 7},
		"per_lane": {"1": uint64(1<<64 - 1)},
		"narrow":   {"0x1": "0xdeadbeef"},
	}}
	defs, err := loadFiles([]config.ProgramConfig{pc}, Options{MaxThreads: 64})
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range []uint32{42, 43} {
		in, err := NewInstance(defs, pid, 7, "app", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		want := []struct {
			m         string
			key, lane uint64
			v         []byte
		}{
			{"settings", 0, 0, le(1, 0xff)},
			{"settings", 1, 0, le(0, 0)},
			{"settings", 3, 0, le(7, 0)},
			{"per_lane", 0, 5, le(0)},
			{"per_lane", 1, 0, le(1<<64 - 1)},
			{"per_lane", 1, 63, le(1<<64 - 1)},
			{"narrow", 1, 0, le(0xdeadbeef)[:4]},
			{"narrow", 0, 0, le(0)[:4]},
		}
		for _, w := range want {
			v, err := in.Array(w.m).Value(w.key, w.lane)
			if err != nil {
				t.Fatal(err)
			}
			if string(v) != string(w.v) {
				t.Errorf("pid %d: %s[%d] lane %d = %x, want %x", pid, w.m, w.key, w.lane, v, w.v)
			}
		}
		in.Close()
	}
}

// le lays out words little-endian.
func le(words ...uint64) []byte {
	b := make([]byte, 8*len(words))
	for i, w := range words {
		binary.LittleEndian.PutUint64(b[8*i:], w)
	}
	return b
}
