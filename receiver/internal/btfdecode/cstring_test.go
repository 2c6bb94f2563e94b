package btfdecode

import (
	"testing"
	"unicode/utf8"
)

func TestCStringValidUTF8(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"NUL-terminated", []byte("gemm\x00junk"), "gemm"},
		{"full array", []byte("gemm"), "gemm"},
		{"invalid bytes", []byte("ge\xffmm\x00"), "ge\uFFFDmm"},
		{"a run of invalid bytes", []byte("\xff\xfe"), "\uFFFD"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := cString(tc.in)
			if !utf8.ValidString(got) || len(got) > 3*len(tc.in) {
				t.Fatalf("cString = %q", got)
			}
			if got != tc.want {
				t.Fatalf("cString = %q, want %q", got, tc.want)
			}
		})
	}
}
