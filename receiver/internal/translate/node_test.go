package translate

import (
	"reflect"
	"testing"
)

// TestCountersAdd: Add sums every count, in the nested structs and
// arrays too (a field it missed would stay zero here).
func TestCountersAdd(t *testing.T) {
	var a, b, want Counters
	fill := func(c *Counters, v uint64) {
		var walk func(reflect.Value)
		walk = func(x reflect.Value) {
			switch x.Kind() {
			case reflect.Uint64:
				x.SetUint(v)
			case reflect.Struct:
				for i := range x.NumField() {
					walk(x.Field(i))
				}
			case reflect.Array:
				for i := range x.Len() {
					walk(x.Index(i))
				}
			}
		}
		walk(reflect.ValueOf(c).Elem())
	}
	fill(&a, 2)
	fill(&b, 5)
	fill(&want, 7)
	a.Add(b)
	if a != want {
		t.Errorf("Add: %+v, want %+v", a, want)
	}
}

// TestCountersWords: Counters is uint64 words only, so Add takes its
// array path; a type with anything else is refused.
func TestCountersWords(t *testing.T) {
	if countersWords == 0 || uintptr(countersWords)*8 != reflect.TypeFor[Counters]().Size() {
		t.Fatalf("countersWords = %d for a %d-byte Counters: a field that is not a uint64?", countersWords, reflect.TypeFor[Counters]().Size())
	}
	type mixed struct {
		A uint64
		B uint32
	}
	if n := uint64Words(reflect.TypeFor[mixed]()); n != 0 {
		t.Errorf("uint64Words(mixed) = %d, want 0", n)
	}
	if n := uint64Words(reflect.TypeFor[struct{ A [3]uint64 }]()); n != 3 {
		t.Errorf("uint64Words([3]uint64) = %d, want 3", n)
	}
}

func BenchmarkCountersAdd(b *testing.B) {
	var c, o Counters
	o.RecordsRead = 1
	b.Run("words", func(b *testing.B) {
		for range b.N {
			c.Add(o)
		}
	})
	b.Run("reflect", func(b *testing.B) {
		for range b.N {
			addUints(reflect.ValueOf(&c).Elem(), reflect.ValueOf(o))
		}
	})
}
