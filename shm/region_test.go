package shm

import (
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// rawRegion writes b into a fresh unsealed memfd of size bytes and returns it.
func rawRegion(t *testing.T, b []byte, size int64) *os.File {
	t.Helper()
	fd, err := unix.MemfdCreate("raw", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "raw")
	t.Cleanup(func() { f.Close() })
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	n := int64(len(b))
	if n > size {
		n = size
	}
	if _, err := f.WriteAt(b[:n], 0); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestCreateAndMapEveryKind(t *testing.T) {
	tests := []struct {
		name         string
		spec         Spec
		wantStride   uint32
		wantDataSize uint64
	}{
		{"ring", Spec{Kind: KindRing, ValueSize: 64, MaxEntries: 8}, 64, 8 * 72},
		{"array", Spec{Kind: KindArray, ValueSize: 12, MaxEntries: 10}, 16, 160},
		{"per-thread", Spec{Kind: KindPerThreadArray, ValueSize: 8, MaxEntries: 3, Lanes: 1024}, 8, 3 * 1024 * 8},
		{"per-warp", Spec{Kind: KindPerWarpArray, ValueSize: 20, MaxEntries: 2, Lanes: 32}, 24, 2 * 32 * 24},
		{"mailbox", Spec{Kind: KindMailbox, MaxEntries: 4}, MailboxSlotSize, 4 * MailboxSlotSize},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Create(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			h := r.Header()
			if h.Stride != tc.wantStride || h.DataSize != tc.wantDataSize {
				t.Fatalf("stride %d data %d, want %d %d", h.Stride, h.DataSize, tc.wantStride, tc.wantDataSize)
			}
			if h.RegionSize%PageSize != 0 || h.RegionSize < DataOffset+h.DataSize {
				t.Fatalf("region size %d", h.RegionSize)
			}
			m, err := Map(int(r.File().Fd()), tc.spec.Kind)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if m.Header() != h {
				t.Fatalf("mapped header %+v, created %+v", m.Header(), h)
			}
			// The two mappings share memory.
			r.Data()[0] = 0xAB
			if m.Data()[0] != 0xAB {
				t.Fatal("second mapping does not see the first one's write")
			}
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}
			if err := m.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
		})
	}
}

func TestCreateRejectsBadSpecs(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		want string
	}{
		{"zero entries", Spec{Kind: KindArray, ValueSize: 8}, "max entries"},
		{"ring slot not multiple of 8", Spec{Kind: KindRing, ValueSize: 60, MaxEntries: 4}, "slot size 60"},
		{"ring slot too small", Spec{Kind: KindRing, ValueSize: 16, MaxEntries: 4}, "slot size 16"},
		{"ring not power of two", Spec{Kind: KindRing, ValueSize: 64, MaxEntries: 6}, "power of two"},
		{"array zero value", Spec{Kind: KindArray, MaxEntries: 6}, "value size"},
		{"per-thread no lanes", Spec{Kind: KindPerThreadArray, ValueSize: 8, MaxEntries: 6}, "lanes"},
		{"array with lanes", Spec{Kind: KindArray, ValueSize: 8, MaxEntries: 6, Lanes: 4}, "1 lane"},
		{"unknown kind", Spec{Kind: 9, ValueSize: 8, MaxEntries: 6}, "unknown region kind"},
		{"too large", Spec{Kind: KindPerThreadArray, ValueSize: 1 << 20, MaxEntries: 1 << 20, Lanes: 1 << 20}, "exceeds"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Create(tc.spec)
			if err == nil {
				r.Close()
				t.Fatal("Create succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

func TestMapRejectsBadHeaders(t *testing.T) {
	good, err := Create(Spec{Kind: KindRing, ValueSize: 64, MaxEntries: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	size := int64(good.Header().RegionSize)
	le := binary.LittleEndian
	tests := []struct {
		name   string
		mutate func(b []byte)
		size   int64
		want   Kind
		field  string
		offset int
	}{
		{"magic", func(b []byte) { copy(b, "ELF\x7f") }, size, 0, "magic", 0},
		{"version", func(b []byte) { le.PutUint16(b[4:], 2) }, size, 0, "version", 4},
		{"unknown kind", func(b []byte) { le.PutUint16(b[6:], 42) }, size, 0, "kind", 6},
		{"wrong kind", func(b []byte) {}, size, KindMailbox, "kind", 6},
		{"header size", func(b []byte) { le.PutUint32(b[8:], 32) }, size, 0, "header_size", 8},
		{"flags", func(b []byte) { le.PutUint32(b[12:], 1) }, size, 0, "flags", 12},
		{"reserved", func(b []byte) { le.PutUint32(b[60:], 1) }, size, 0, "reserved", 60},
		{"data offset", func(b []byte) { le.PutUint64(b[24:], 64) }, size, 0, "data_offset", 24},
		{"truncated file", func(b []byte) {}, 2048, 0, "region_size", 48},
		{"shorter than header", func(b []byte) {}, 100, 0, "region_size", 48},
		{"empty file", func(b []byte) {}, 0, 0, "region_size", 48},
		{"region size not page multiple", func(b []byte) { le.PutUint64(b[48:], 5000) }, size, 0, "region_size", 48},
		{"data size beyond region", func(b []byte) { le.PutUint64(b[16:], 1<<30) }, size, 0, "data_size", 16},
		{"data size disagrees", func(b []byte) { le.PutUint64(b[16:], 64*72-8) }, size, 0, "data_size", 16},
		{"stride disagrees", func(b []byte) { le.PutUint32(b[40:], 72) }, size, 0, "stride", 40},
		{"lanes on a ring", func(b []byte) { le.PutUint32(b[44:], 2) }, size, 0, "lanes", 44},
		{"slot count not power of two", func(b []byte) { le.PutUint32(b[36:], 15) }, size, 0, "max_entries", 36},
		{"slot size not multiple of 8", func(b []byte) { le.PutUint32(b[32:], 63) }, size, 0, "value_size", 32},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := append([]byte(nil), good.Bytes()[:DataOffset]...)
			tc.mutate(b)
			f := rawRegion(t, b, tc.size)
			r, err := Map(int(f.Fd()), tc.want)
			if err == nil {
				r.Close()
				t.Fatal("Map accepted a bad header")
			}
			var he *HeaderError
			if !errors.As(err, &he) {
				t.Fatalf("error %v is not a *HeaderError", err)
			}
			if he.Field != tc.field || he.Offset != tc.offset {
				t.Fatalf("error names field %s at %d, want %s at %d (%v)", he.Field, he.Offset, tc.field, tc.offset, err)
			}
			if !strings.Contains(err.Error(), "offset") {
				t.Fatalf("error %q does not name the offset", err)
			}
		})
	}
}

func TestRegionIsSealed(t *testing.T) {
	r, err := Create(Spec{Kind: KindArray, ValueSize: 8, MaxEntries: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.File().Truncate(0); err == nil {
		t.Fatal("a peer could shrink the region")
	}
}

// FuzzParseHeader: any bytes either fail with a *HeaderError or give a header
// whose data area fits the region and matches its kind's layout.
func FuzzParseHeader(f *testing.F) {
	for _, s := range []Spec{
		{Kind: KindRing, ValueSize: 64, MaxEntries: 8},
		{Kind: KindPerThreadArray, ValueSize: 8, MaxEntries: 3, Lanes: 100},
		{Kind: KindMailbox, MaxEntries: 2},
	} {
		h, err := s.header()
		if err != nil {
			f.Fatal(err)
		}
		b := make([]byte, HeaderSize)
		h.encode(b)
		f.Add(b, int64(h.RegionSize))
	}
	f.Fuzz(func(t *testing.T, b []byte, size int64) {
		h, err := ParseHeader(b, size, 0)
		if err != nil {
			var he *HeaderError
			if !errors.As(err, &he) || fieldOffset[he.Field] != he.Offset {
				t.Fatalf("error %v does not name a header field correctly", err)
			}
			return
		}
		if h.DataOffset+h.DataSize > h.RegionSize || uint64(size) < h.RegionSize {
			t.Fatalf("accepted header %+v does not fit a %d-byte region", h, size)
		}
		want, err := Spec{Kind: h.Kind, ValueSize: h.ValueSize, MaxEntries: h.MaxEntries, Lanes: h.Lanes}.header()
		if err != nil || want.DataSize != h.DataSize || want.Stride != h.Stride {
			t.Fatalf("accepted header %+v disagrees with its layout %+v (%v)", h, want, err)
		}
	})
}
