package record

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestKernelNameAppendFit(t *testing.T) {
	long := "_ZN7cutlass6KernelINS_4gemm6kernel4GemmIfEEEEvNT_6ParamsE" + strings.Repeat("x", 200)
	tests := []struct {
		name      string
		in        string
		maxSize   int
		wantLen   int
		truncated bool
	}{
		{"fits", "_Z3addPf", 112, 8, false},
		{"exactly fits", strings.Repeat("a", 80), 112, 80, false},
		{"cut to the slot", long, 112, 80, true},
		{"odd limit", long, 117, 80, true},
		{"utf-8 boundary", strings.Repeat("a", 79) + "é" + "zz", 112, 79, true},
		{"tiny slot", long, 8, 1, true},
		{"names ring", long, MaxKernelNameSize, len(long), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := (&KernelName{Function: 1, Name: tc.in}).AppendFit(nil, tc.maxSize)
			if len(b) > max(tc.maxSize&^7, 40) {
				t.Fatalf("record of %d bytes exceeds %d", len(b), tc.maxSize)
			}
			var k KernelName
			if err := k.Decode(b); err != nil {
				t.Fatal(err)
			}
			if len(k.Name) != tc.wantLen || k.Truncated != tc.truncated || !utf8.ValidString(k.Name) || !strings.HasPrefix(tc.in, k.Name) {
				t.Fatalf("name %q (%d bytes) truncated=%v, want %d bytes truncated=%v", k.Name, len(k.Name), k.Truncated, tc.wantLen, tc.truncated)
			}
		})
	}
}
