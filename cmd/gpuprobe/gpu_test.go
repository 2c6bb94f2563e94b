//go:build cgo

package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestMemCopies(t *testing.T) {
	tests := []struct {
		mem  []byte
		n    int
		want []byte
	}{
		{nil, 32, []byte{}},
		{[]byte{1, 2, 3}, 2, []byte{1, 2, 3, 0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 0, 0, 0}},
		{[]byte{1, 2, 3, 4, 5, 6, 7, 8}, 2, []byte{1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8}},
	}
	for _, tt := range tests {
		if got := memCopies(tt.mem, tt.n); !bytes.Equal(got, tt.want) {
			t.Errorf("memCopies(%v, %d) = %v, want %v", tt.mem, tt.n, got, tt.want)
		}
	}
}

func TestAgree(t *testing.T) {
	tests := []struct {
		in      []uint64
		want    uint64
		wantErr string
	}{
		{[]uint64{7, 7, 7}, 7, ""},
		{[]uint64{7, 7, 8}, 0, "result 2 = 0x8"},
		{nil, 0, "no results"},
	}
	for _, tt := range tests {
		got, err := agree(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("agree(%v) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("agree(%v) = %v, %v, want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestPtxArch(t *testing.T) {
	tests := []struct {
		major, minor int
		want         string
	}{{7, 0, "sm_70"}, {8, 6, "sm_86"}, {9, 0, "sm_90"}, {10, 0, "sm_90"}, {12, 0, "sm_90"}}
	for _, tt := range tests {
		if got := ptxArch(tt.major, tt.minor); got != tt.want {
			t.Errorf("ptxArch(%d, %d) = %s, want %s", tt.major, tt.minor, got, tt.want)
		}
	}
}

func TestGPURunnerWithoutGPU(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"conformance", "-gpu", "../../testdata/conformance/tests/add.data"}, &stdout, &stderr)
	if code == 0 {
		t.Skip("a GPU is present: the runner ran")
	}
	msg := stderr.String()
	if code != 1 || !strings.Contains(msg, "GPU runner: ") || !(strings.Contains(msg, "no CUDA device") || strings.Contains(msg, "no NVIDIA driver")) {
		t.Fatalf("exit %d, stderr %q: want exit 1 and a clear no-GPU error", code, msg)
	}
}
