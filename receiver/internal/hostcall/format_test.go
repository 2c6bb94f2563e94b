package hostcall

import (
	"strings"
	"testing"
)

func TestFormat(t *testing.T) {
	tests := []struct {
		f       string
		args    []uint64
		want    string
		wantErr string
	}{
		{"tid %d val %u\n", []uint64{7, 1<<32 + 5}, "tid 7 val 5\n", ""},
		{"%ld %lu", []uint64{^uint64(0), 1 << 40}, "-1 1099511627776", ""},
		{"%x %#X %o", []uint64{255, 255, 8}, "ff 0XFF 10", ""},
		{"%c %p", []uint64{'A', 0xdead}, "A 0xdead", ""},
		{"[%5d|%-4d|%05d]", []uint64{42, 7, 3}, "[   42|7   |00003]", ""},
		{"%.3u", []uint64{9}, "009", ""},
		{"100%% %s", []uint64{0x7f00}, "100% (gpu 0x7f00)", ""},
		{"%d %d %d %d", []uint64{1, 2, 3, 4}, "", "more than 3 conversions"},
		{"%99999999d", []uint64{1}, "", "width or precision over 64"},
		{"%.100d", []uint64{1}, "", "width or precision over 64"},
		{"%q", []uint64{1}, "", "unsupported conversion %q"},
		{"tail %l", []uint64{1}, "", "ends inside a conversion at byte 5"},
	}
	for _, tc := range tests {
		got, err := Format(tc.f, tc.args)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Format(%q) = %q, %v; want error %q", tc.f, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Format(%q) = %q, %v; want %q", tc.f, got, err, tc.want)
		}
	}
	long, err := Format(strings.Repeat("%64d", 3)+strings.Repeat("x", 600), []uint64{1, 2, 3})
	if err != nil || len(long) != MaxMessageSize {
		t.Errorf("long message: %d bytes, %v; want %d", len(long), err, MaxMessageSize)
	}
}
