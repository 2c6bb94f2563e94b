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

func TestKernelNameSanitized(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		want      string
		truncated bool
	}{
		{"valid", "_Z3addPf", "_Z3addPf", false},
		{"invalid byte", "_Z3a\xffdPf", "_Z3a\uFFFDdPf", false},
		{"truncated sequence", "k\xe2\x82", "k\uFFFD", false},
		{"overlong encoding", "\xc0\xaf", "\uFFFD", false},
		{"grows past the bound", strings.Repeat("a\xff", MaxKernelNameLen/2), "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var k KernelName
			if err := k.Decode((&KernelName{Function: 1, Name: tc.in}).Append(nil)); err != nil {
				t.Fatal(err)
			}
			if !utf8.ValidString(k.Name) || len(k.Name) > MaxKernelNameLen || k.Truncated != tc.truncated {
				t.Fatalf("name %q (%d bytes, valid %v) truncated=%v", k.Name, len(k.Name), utf8.ValidString(k.Name), k.Truncated)
			}
			if tc.want != "" && k.Name != tc.want {
				t.Fatalf("name %q, want %q", k.Name, tc.want)
			}
		})
	}
}

func TestDeviceNameSanitized(t *testing.T) {
	var d Device
	if err := d.Decode((&Device{Name: "NVIDIA \xff\xfeH100"}).Append(nil)); err != nil {
		t.Fatal(err)
	}
	if d.Name != "NVIDIA \uFFFDH100" {
		t.Fatalf("name %q", d.Name)
	}
}
