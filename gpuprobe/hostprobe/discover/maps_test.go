package discover

import (
	"strings"
	"testing"
)

func TestParseMapsLine(t *testing.T) {
	tests := []struct {
		name    string
		line    string
		want    Mapping
		exec    bool
		file    bool
		wantErr string
	}{
		{
			name: "library text",
			line: "7f3a1c000000-7f3a1c021000 r-xp 00002000 08:01 1234567                    /usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06",
			want: Mapping{Start: 0x7f3a1c000000, End: 0x7f3a1c021000, Perms: "r-xp", Offset: 0x2000, DevMajor: 8, DevMinor: 1, Inode: 1234567, Path: "/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06"},
			exec: true, file: true,
		},
		{
			name: "path with spaces",
			line: "1000-2000 r-xp 00000000 fd:00 42   /opt/my app/lib/libcudart.so.13",
			want: Mapping{Start: 0x1000, End: 0x2000, Perms: "r-xp", DevMajor: 0xfd, Inode: 42, Path: "/opt/my app/lib/libcudart.so.13"},
			exec: true, file: true,
		},
		{
			name: "deleted",
			line: "1000-2000 r-xp 00000000 08:01 42 /tmp/libcuda.so.1 (deleted)",
			want: Mapping{Start: 0x1000, End: 0x2000, Perms: "r-xp", DevMajor: 8, DevMinor: 1, Inode: 42, Path: "/tmp/libcuda.so.1", Deleted: true},
			exec: true,
		},
		{
			name: "escaped newline",
			line: `1000-2000 r-xp 00000000 08:01 42 /tmp/a\012b/libcuda.so.1`,
			want: Mapping{Start: 0x1000, End: 0x2000, Perms: "r-xp", DevMajor: 8, DevMinor: 1, Inode: 42, Path: "/tmp/a\nb/libcuda.so.1"},
			exec: true, file: true,
		},
		{
			name: "anonymous",
			line: "7ffd1000-7ffd2000 rw-p 00000000 00:00 0",
			want: Mapping{Start: 0x7ffd1000, End: 0x7ffd2000, Perms: "rw-p"},
		},
		{
			name: "vdso",
			line: "7ffd1000-7ffd2000 r-xp 00000000 00:00 0                          [vdso]",
			want: Mapping{Start: 0x7ffd1000, End: 0x7ffd2000, Perms: "r-xp", Path: "[vdso]"},
			exec: true,
		},
		{
			name: "large device numbers",
			line: "1000-2000 r--s 00000000 103:1a2 9 /dev/shm/x",
			want: Mapping{Start: 0x1000, End: 0x2000, Perms: "r--s", DevMajor: 0x103, DevMinor: 0x1a2, Inode: 9, Path: "/dev/shm/x"},
			file: true,
		},
		{name: "empty", line: "", wantErr: "missing the address field"},
		{name: "address only", line: "1000-2000", wantErr: "missing the perms field"},
		{name: "no dash", line: "10002000 r-xp 0 08:01 1 /a", wantErr: `address "10002000": want <start>-<end>`},
		{name: "start not hex", line: "zz-2000 r-xp 0 08:01 1 /a", wantErr: `address start "zz": not hexadecimal`},
		{name: "end not hex", line: "1000-qq r-xp 0 08:01 1 /a", wantErr: `address end "qq": not hexadecimal`},
		{name: "end before start", line: "2000-1000 r-xp 0 08:01 1 /a", wantErr: "end before start"},
		{name: "bad perms", line: "1000-2000 rwz 0 08:01 1 /a", wantErr: `perms "rwz": want four characters`},
		{name: "bad perms letter", line: "1000-2000 r-xq 0 08:01 1 /a", wantErr: `perms "r-xq"`},
		{name: "bad offset", line: "1000-2000 r-xp 0x1g 08:01 1 /a", wantErr: `offset "0x1g": not hexadecimal`},
		{name: "dev without colon", line: "1000-2000 r-xp 0 0801 1 /a", wantErr: `dev "0801": want <major>:<minor>`},
		{name: "dev not hex", line: "1000-2000 r-xp 0 0g:01 1 /a", wantErr: `dev "0g:01": not hexadecimal`},
		{name: "no inode", line: "1000-2000 r-xp 0 08:01", wantErr: "missing the inode field"},
		{name: "inode not decimal", line: "1000-2000 r-xp 0 08:01 ab /a", wantErr: `inode "ab": not a decimal number`},
		{name: "binary junk", line: "\x00\xff\xfe-\x01 \x02", wantErr: "address start"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := ParseMapsLine(tt.line)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m != tt.want {
				t.Errorf("got %+v\nwant %+v", m, tt.want)
			}
			if m.Exec() != tt.exec || m.File() != tt.file {
				t.Errorf("Exec %v File %v, want %v %v", m.Exec(), m.File(), tt.exec, tt.file)
			}
		})
	}
}

func TestParseProcStat(t *testing.T) {
	// Fields 3..23 after the command: state, ppid, ..., starttime (22), vsize (23).
	tail := " S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 424242 987654 99 18446744073709551615"
	tests := []struct {
		name      string
		stat      string
		start, vs uint64
		wantErr   string
	}{
		{"plain", "123 (sleep)" + tail, 424242, 987654, ""},
		{"command with spaces and parens", "123 (a) b (c))" + tail, 424242, 987654, ""},
		{"no parenthesis", "123 sleep S 1 2", 0, 0, "no ')' closing the command name"},
		{"too short", "123 (sleep) S 1 2 3", 0, 0, "4 fields after the command name, want at least 21"},
		{"starttime not a number", "1 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 -5 9", 0, 0, `field 22 (starttime) "-5"`},
		{"vsize not a number", "1 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 5 x", 0, 0, `field 23 (vsize) "x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := parseProcStat([]byte(tt.stat))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if st.startTime != tt.start || st.vsize != tt.vs {
				t.Errorf("got %+v, want start %d vsize %d", st, tt.start, tt.vs)
			}
		})
	}
}

func TestKindOfName(t *testing.T) {
	tests := []struct {
		name string
		want Kind
	}{
		{"libcuda.so", KindDriver},
		{"libcuda.so.1", KindDriver},
		{"/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06", KindDriver},
		{"libcudart.so", KindRuntime},
		{"libcudart.so.13", KindRuntime},
		{"/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12", KindRuntime},
		{"libcuda.so.", KindUnknown},
		{"libcudadebugger.so.1", KindUnknown},
		{"libcudart_static.a", KindUnknown},
		{"libcuda.so1", KindUnknown},
		{"mylibcuda.so.1", KindUnknown},
		{"libcuda.sox", KindUnknown},
	}
	for _, tt := range tests {
		if got := KindOfName(tt.name); got != tt.want {
			t.Errorf("KindOfName(%q) = %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestMkdev(t *testing.T) {
	// Values from stat(1) on Linux: 8:1 is 2049, 259:3 is 66307.
	tests := []struct {
		major, minor uint32
		want         uint64
	}{{8, 1, 2049}, {259, 3, 66307}, {0, 0x123456, 0x123400056}, {0x1000, 0, 0x100000000000}}
	for _, tt := range tests {
		if got := mkdev(tt.major, tt.minor); got != tt.want {
			t.Errorf("mkdev(%d, %d) = %#x, want %#x", tt.major, tt.minor, got, tt.want)
		}
	}
}

func TestIsShimPath(t *testing.T) {
	for _, tc := range []struct {
		path string
		want bool
	}{
		{"/opt/gpuprobe/lib/libgpuprobe.so", true},
		{"/work/bin/libgpuprobe-selftime.so", true},
		{"libgpuprobe.so", true},
		{"/usr/lib/libgpuprobe.so.1", false},
		{"/usr/lib/libgpuprobe-.txt", false},
		{"/usr/lib/x86_64-linux-gnu/libcuda.so.1", false},
		{"/tmp/libgpuprobe.so/libc.so.6", false},
		{"", false},
	} {
		if got := IsShimPath(tc.path); got != tc.want {
			t.Errorf("IsShimPath(%q) = %v, want %v", tc.path, got, tc.want)
		}
	}
}
