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
