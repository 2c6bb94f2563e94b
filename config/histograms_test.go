package config

import (
	"math"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/confmap"
)

func TestHistograms(t *testing.T) {
	tests := []struct {
		name    string
		raw     map[string]any // the histograms section
		want    []float64      // DurationBounds
		wantErr string
	}{
		{name: "default exponential", raw: nil, want: nil},
		{name: "explicit, default buckets", raw: map[string]any{"kind": "explicit"}, want: DefaultDurationBuckets},
		{name: "explicit, own buckets", raw: map[string]any{"kind": "explicit", "buckets": []any{0.001, 0.01, 1}},
			want: []float64{0.001, 0.01, 1}},
		{name: "unknown kind", raw: map[string]any{"kind": "native"},
			wantErr: `histograms::kind: must be "exponential" or "explicit", got "native"`},
		{name: "buckets with exponential", raw: map[string]any{"buckets": []any{1}},
			wantErr: `histograms::buckets: only with histograms::kind "explicit"`},
		{name: "not increasing", raw: map[string]any{"kind": "explicit", "buckets": []any{0.1, 0.1}},
			wantErr: "histograms::buckets: must increase, got 0.1 after 0.1 at [1]"},
		{name: "zero", raw: map[string]any{"kind": "explicit", "buckets": []any{0, 1}},
			wantErr: "histograms::buckets: must be positive finite seconds, got 0 at [0]"},
		{name: "infinite", raw: map[string]any{"kind": "explicit", "buckets": []any{1, math.Inf(1)}},
			wantErr: "histograms::buckets: must be positive finite seconds, got +Inf at [1]"},
		{name: "too many", raw: map[string]any{"kind": "explicit", "buckets": manyBounds(maxBuckets + 1)},
			wantErr: "histograms::buckets: must list at most 64 bounds, got 65"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			c.Agent.Socket = "/tmp/gpuprobe-test.sock"
			raw := map[string]any{}
			if tt.raw != nil {
				raw["histograms"] = tt.raw
			}
			if err := c.Unmarshal(confmap.NewFromStringMap(raw)); err != nil {
				t.Fatal(err)
			}
			err := c.Validate()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Histograms.DurationBounds(); !slices.Equal(got, tt.want) || (got == nil) != (tt.want == nil) {
				t.Fatalf("DurationBounds = %v, want %v", got, tt.want)
			}
		})
	}
}

func manyBounds(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = float64(i + 1)
	}
	return out
}
