package otelid

import "testing"

func TestIDsValidAndDistinct(t *testing.T) {
	tests := []struct {
		name string
		next func() (id string, empty bool)
	}{
		{"trace", func() (string, bool) { id := NewTraceID(); return id.String(), id.IsEmpty() }},
		{"span", func() (string, bool) { id := NewSpanID(); return id.String(), id.IsEmpty() }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seen := map[string]bool{}
			for range 1000 {
				id, empty := tc.next()
				if empty {
					t.Fatalf("empty %s id", tc.name)
				}
				if seen[id] {
					t.Fatalf("%s id %s repeated", tc.name, id)
				}
				seen[id] = true
			}
		})
	}
}

func BenchmarkNewSpanID(b *testing.B) {
	for range b.N {
		_ = NewSpanID()
	}
}
