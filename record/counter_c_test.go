package record

import (
	"bytes"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// counterProducer writes a counter_set and a counter_sample record from
// include/gpuprobe_record.h's structs, as a C producer fills them.
const counterProducer = `
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpuprobe_record.h"

_Static_assert(GP_REC_COUNTER_SET == 18, "type");
_Static_assert(GP_COUNTER_MAX_NAMES_LEN == 2048, "names");

static uint32_t fnv(const char *s) {
	uint32_t h = 2166136261u;
	for (; *s; s++) { h ^= (unsigned char)*s; h *= 16777619u; }
	return h;
}

int main(void) {
	const char *names = "sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum.per_second";
	size_t nl = strlen(names), sz = sizeof(struct gp_rec_counter_set) + ((nl + 7) & ~(size_t)7);
	struct gp_rec_counter_set *s = calloc(1, sz);
	s->h.type = GP_REC_COUNTER_SET; s->h.version = GP_REC_VERSION; s->h.size = sz;
	s->interval_ns = 100000; s->device = 2; s->set_hash = fnv(names); s->count = 2; s->names_len = nl;
	for (int i = 0; i < 16; i++) s->uuid[i] = (uint8_t)(0x10 + i);
	memcpy(s->names, names, nl);
	fwrite(s, 1, sz, stdout);

	size_t csz = sizeof(struct gp_rec_counter_sample) + 2 * 8;
	struct gp_rec_counter_sample *c = calloc(1, csz);
	c->h.type = GP_REC_COUNTER_SAMPLE; c->h.version = GP_REC_VERSION; c->h.size = csz;
	c->start_ns = 7000; c->end_ns = 107000; c->device = 2; c->set_hash = fnv(names); c->values = 2;
	c->value[0] = 41.5; c->value[1] = 1.5e12;
	fwrite(c, 1, csz, stdout);
	return 0;
}
`

var counterNamesSample = []string{"sm__throughput.avg.pct_of_peak_sustained_elapsed", "dram__bytes_read.sum.per_second"}

func sampleCounterSet() *CounterSet {
	s := &CounterSet{IntervalNS: 100000, Device: 2, Names: counterNamesSample}
	for i := range s.UUID {
		s.UUID[i] = byte(0x10 + i)
	}
	return s
}

// TestCounterCHeaderMatches compiles the C producer and checks that its
// bytes are what the Go encoder writes for the same records.
func TestCounterCHeaderMatches(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Fatal("no C compiler: the C layout test needs gcc")
	}
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "counter.c"), filepath.Join(dir, "counter")
	if err := os.WriteFile(src, []byte(counterProducer), 0o600); err != nil {
		t.Fatal(err)
	}
	inc, _ := filepath.Abs("include")
	if out, err := exec.Command(cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-I", inc, "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	got, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := sampleCounterSet().Append(nil)
	want = (&CounterSample{StartNS: 7000, EndNS: 107000, Device: 2, SetHash: CounterSetHash(counterNamesSample),
		Values: []float64{41.5, 1.5e12}}).Append(want)
	if !bytes.Equal(got, want) {
		t.Fatalf("C and Go differ:\n C %x\nGo %x", got, want)
	}
}

func TestCounterSetRoundTrip(t *testing.T) {
	s := sampleCounterSet()
	b := s.Append(nil)
	if len(b) != CounterSetHeaderSize+80 || len(b)%8 != 0 {
		t.Fatalf("%d bytes, want %d", len(b), CounterSetHeaderSize+80)
	}
	var got CounterSet
	if err := got.Decode(b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&got, s) || got.Hash() != CounterSetHash(counterNamesSample) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, s)
	}
	if u := got.UUIDString(); u != "10111213-1415-1617-1819-1a1b1c1d1e1f" || !got.HasUUID() {
		t.Errorf("UUIDString = %q", u)
	}
	if MaxCounterNamesLen+CounterSetHeaderSize > MaxKernelNameSize {
		t.Errorf("the largest CounterSet (%d bytes) does not fit a names-ring slot (%d)", MaxCounterNamesLen+CounterSetHeaderSize, MaxKernelNameSize)
	}
}

func TestCounterSetDecodeErrors(t *testing.T) {
	good := sampleCounterSet().Append(nil)
	set := func(f func(b []byte)) []byte { b := append([]byte(nil), good...); f(b); return b }
	bad := func(name string) []byte { return (&CounterSet{Names: []string{name}}).Append(nil) }
	for _, c := range []struct {
		name, field, reason string
		b                   []byte
	}{
		{"not a set", "type", "is counter_sample, not counter_set", (&CounterSample{}).Append(nil)},
		{"count vs names", "count", "must be 1..64 and the number of names (2), got 3", set(func(b []byte) { put16(b, 40, 3) })},
		{"names_len vs size", "names_len", "must be 1..2048 and fit size 128, got 100", set(func(b []byte) { put16(b, 42, 100) })},
		{"hash", "set_hash", "is not the names' hash", set(func(b []byte) { put32(b, 36, 1) })},
		{"reserved", "reserved", "must be zero", set(func(b []byte) { put32(b, 44, 1) })},
		{"padding", "names", "padding must be zero", func() []byte { b := bad("abc"); b[len(b)-1] = 'x'; return b }()},
		{"empty name", "names", "must be 1..127 bytes", (&CounterSet{Names: []string{"a", ""}}).Append(nil)},
		{"name with a quote", "names", "is not one of [A-Za-z0-9_.]", bad(`sm"x`)},
		{"name with a newline", "names", "is not one of [A-Za-z0-9_.]", bad("sm\nx")},
	} {
		t.Run(c.name, func(t *testing.T) {
			var s CounterSet
			err := s.Decode(c.b)
			var de *DecodeError
			if !errors.As(err, &de) || de.Field != c.field || !strings.Contains(de.Reason, c.reason) {
				t.Fatalf("Decode = %v, want field %s: %s", err, c.field, c.reason)
			}
		})
	}
}

// FuzzCounterRecords: no input panics either decoder, and whatever
// decodes re-encodes to the same bytes.
func FuzzCounterRecords(f *testing.F) {
	f.Add(sampleCounterSet().Append(nil))
	f.Add((&CounterSample{StartNS: 1, EndNS: 2, Values: []float64{math.Pi}}).Append(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, d := range []decoder{&CounterSet{}, &CounterSample{}} {
			if d.Decode(b) != nil {
				continue
			}
			p, _ := ParsePrefix(b)
			if got := d.Append(nil); !bytes.Equal(got, b[:p.Size]) {
				t.Fatalf("%T re-encodes differently:\n%x\n%x", d, got, b[:p.Size])
			}
		}
	})
}
