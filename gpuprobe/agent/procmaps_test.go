package agent

import (
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/internal/procread"
	"golang.org/x/sys/unix"
)

func TestMapsLineIs(t *testing.T) {
	ids := []fileID{{dev: unix.Mkdev(0, 1), ino: 5678}, {dev: unix.Mkdev(0xfd, 0x01), ino: 42}}
	tests := []struct {
		line string
		want bool
	}{
		{"7f1c2a000000-7f1c2a400000 rw-s 00000000 00:01 5678                       /memfd:gpuprobe-ring (deleted)", true},
		{"7f1c2a000000-7f1c2a400000 r-xp 00000000 fd:01 42   /usr/lib/libcuda.so.1", true},
		{"7f1c2a000000-7f1c2a400000 r-xp 00000000 fd:02 42   /usr/lib/libcuda.so.1", false},
		{"7f1c2a000000-7f1c2a400000 rw-s 00000000 00:01 5679 /memfd:other", false},
		{"7f1c2a000000-7f1c2a400000 rw-p 00000000 00:00 0 ", false},
		{"7f1c2a000000-7f1c2a400000 rw-s 00000000 00:01", false},
		{"7f1c2a000000-7f1c2a400000 rw-s 00000000 0001 5678", false},
		{"7f1c2a000000-7f1c2a400000 rw-s 00000000 00:zz 5678", false},
		{"7f1c2a000000-7f1c2a400000 rw-s 00000000 00:01 99999999999999999999999", false},
		{"", false},
	}
	for _, tc := range tests {
		if got := mapsLineIs([]byte(tc.line), ids); got != tc.want {
			t.Errorf("mapsLineIs(%q) = %v, want %v", tc.line, got, tc.want)
		}
	}
}

// linesReader yields n copies of line, then tail, without holding them,
// and counts the bytes it handed out.
type linesReader struct {
	line, tail []byte
	n, off     int
	read       int64
}

func (r *linesReader) Read(p []byte) (int, error) {
	total := 0
	for len(p) > 0 {
		cur := r.line
		if r.n == 0 {
			cur = r.tail
		}
		if r.off == len(cur) {
			if r.n == 0 {
				break
			}
			r.off, r.n = 0, r.n-1
			continue
		}
		c := copy(p, cur[r.off:])
		p, r.off, total = p[c:], r.off+c, total+c
	}
	r.read += int64(total)
	if total == 0 {
		return 0, io.EOF
	}
	return total, nil
}

// TestMapsMatchHuge: a 233 MiB maps file (a million mappings) is read
// line by line, at most procread.MaxMapsBytes of it, in memory that does
// not grow with it: a region mapped early is found having read only its
// line; one past the bound is not claimed found, and the read says it
// was cut.
func TestMapsMatchHuge(t *testing.T) {
	ids := []fileID{{dev: unix.Mkdev(0, 1), ino: 5678}}
	other := []byte("7f1c2a000000-7f1c2a001000 r--p 00000000 fd:01 1234567                    /usr/lib/x86_64-linux-gnu/libfoo.so\n")
	region := []byte("7f1c2b000000-7f1c2b400000 rw-s 00000000 00:01 5678                       /memfd:gpuprobe-ring (deleted)\n")
	n := (233 << 20) / len(other)

	r := &linesReader{line: region, tail: nil, n: 1}
	r.tail = []byte(strings.Repeat(string(other), 1000))
	found, sc, err := mapsMatch(r, ids)
	if err != nil || !found || !sc.Stopped || sc.Lines != 1 {
		t.Errorf("region on the first line: found %v, %+v, %v", found, sc, err)
	}
	if r.read > procread.MaxMapsLine {
		t.Errorf("region on the first line: read %d bytes", r.read)
	}

	r = &linesReader{line: other, tail: region, n: n}
	found, sc, err = mapsMatch(r, ids)
	if err != nil || found || !sc.Truncated || sc.Bytes != procread.MaxMapsBytes {
		t.Errorf("region past the bound: found %v, %+v, %v; want not found, truncated at %d", found, sc, err, procread.MaxMapsBytes)
	}
	if r.read > procread.MaxMapsBytes+procread.MaxMapsLine+1 {
		t.Errorf("read %d bytes of a %d-byte file, bound %d", r.read, n*len(other), procread.MaxMapsBytes)
	}

	r = &linesReader{line: other, tail: region, n: 1000}
	if found, _, err := mapsMatch(r, ids); !found || err != nil {
		t.Errorf("region after 1000 lines: found %v, %v", found, err)
	}

	allocs := testing.AllocsPerRun(2, func() {
		mapsMatch(&linesReader{line: other, tail: region, n: (16 << 20) / len(other)}, ids)
	})
	if allocs > 10 {
		t.Errorf("%.0f allocations to scan 16 MiB of maps: the scan must not grow with the file", allocs)
	}
}

// TestMapsAnySelf: this process's own maps, as the idle check reads
// them: a mapped memfd is found, and no longer once unmapped.
func TestMapsAnySelf(t *testing.T) {
	fd, err := unix.MemfdCreate("gpuprobe-maps-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Skipf("memfd_create: %v", err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, 4096); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	ids := []fileID{{dev: st.Dev, ino: st.Ino}}
	p := &peerProc{pid: int32(os.Getpid()), pidfd: -1}
	p.start, _ = p.startTime()
	if mapped, err := p.mapsAny(ids); err != nil || mapped {
		t.Fatalf("before mmap: %v, %v", mapped, err)
	}
	mem, err := unix.Mmap(fd, 0, 4096, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	if mapped, err := p.mapsAny(ids); err != nil || !mapped {
		t.Errorf("mapped: %v, %v", mapped, err)
	}
	unix.Munmap(mem)
	if mapped, err := p.mapsAny(ids); err != nil || mapped {
		t.Errorf("unmapped: %v, %v", mapped, err)
	}
	gone := &peerProc{pid: 1 << 30, pidfd: -1}
	if _, err := gone.mapsAny(ids); !errors.Is(err, errPeerGone) {
		t.Errorf("no such process: %v, want errPeerGone", err)
	}
}
