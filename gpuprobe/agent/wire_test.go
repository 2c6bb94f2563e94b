package agent

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/shm"
)

func TestWireRoundTrip(t *testing.T) {
	hellos := []Hello{{}, {PID: 77, Flags: 3, Name: "python3"}, {Name: strings.Repeat("n", MaxNameLen)}}
	for _, h := range hellos {
		b, err := MarshalHello(h)
		if err != nil {
			t.Fatal(err)
		}
		ft, p, err := readFrame(bytes.NewReader(b))
		if err != nil || ft != FrameHello {
			t.Fatal(ft, err)
		}
		if got, err := UnmarshalHello(p); err != nil || got != h {
			t.Fatalf("hello %+v -> %+v, %v", h, got, err)
		}
	}
	w := Welcome{Session: 9, Regions: []RegionInfo{
		{Role: RoleLaunchRing, Kind: shm.KindRing, RegionSize: 8192, ID: 1, Name: "launches"},
		{Role: RoleMap, Kind: shm.KindPerThreadArray, RegionSize: 1 << 20, ID: 2, Name: strings.Repeat("m", MaxRegionName)},
	}}
	b, err := MarshalWelcome(w)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != FrameHeader+8+2*DescriptorSize {
		t.Fatalf("WELCOME is %d bytes", len(b))
	}
	// The documented byte layout: descriptor 1's region_size at payload 8+64+8.
	if v := binary.LittleEndian.Uint64(b[FrameHeader+8+DescriptorSize+8:]); v != 1<<20 {
		t.Fatalf("region_size field holds %d", v)
	}
	ft, p, err := readFrame(bytes.NewReader(b))
	if err != nil || ft != FrameWelcome {
		t.Fatal(ft, err)
	}
	if got, err := UnmarshalWelcome(p); err != nil || !reflect.DeepEqual(got, w) {
		t.Fatalf("welcome %+v -> %+v, %v", w, got, err)
	}
	ft, p, err = readFrame(bytes.NewReader(MarshalError(CodeTooMany, "busy")))
	if err != nil || ft != FrameError || UnmarshalError(p).Error() != "agent: too many connections: busy" {
		t.Fatalf("error frame: %v %v", ft, err)
	}
}

func TestWireRejects(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"long name", func() error { _, err := MarshalHello(Hello{Name: strings.Repeat("x", MaxNameLen+1)}); return err }(), "exceeds 256"},
		{"too many regions", func() error { _, err := MarshalWelcome(Welcome{Regions: make([]RegionInfo, MaxRegions+1)}); return err }(), "exceed 32"},
		{"long region name", func() error {
			_, err := MarshalWelcome(Welcome{Regions: []RegionInfo{{Name: strings.Repeat("x", 41)}}})
			return err
		}(), "exceeds 40"},
		{"welcome count lies", func() error { _, err := UnmarshalWelcome([]byte{0, 0, 0, 0, 2, 0, 0, 0}); return err }(), "does not hold 2"},
		{"welcome count huge", func() error { _, err := UnmarshalWelcome([]byte{0, 0, 0, 0, 99, 0, 0, 0}); return err }(), "exceeds 32"},
		{"descriptor flags", func() error {
			p := make([]byte, 8+DescriptorSize)
			p[4], p[8+6] = 1, 1
			_, err := UnmarshalWelcome(p)
			return err
		}(), "payload offset 14"},
		{"error length lies", UnmarshalError([]byte{1, 0, 0, 0, 9, 0, 0, 0, 'a'}), "msg_len 9"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
				t.Fatalf("error %v, want one mentioning %q", tc.err, tc.want)
			}
		})
	}
}

// FuzzFrames: no byte sequence makes the decoders panic, and what decodes
// re-encodes to the same bytes.
func FuzzFrames(f *testing.F) {
	h, _ := MarshalHello(Hello{PID: 1, Name: "a"})
	w, _ := MarshalWelcome(Welcome{Session: 1, Regions: []RegionInfo{{Role: 1, Kind: 1, RegionSize: 4096, Name: "r"}}})
	f.Add(h)
	f.Add(w)
	f.Add(MarshalError(CodeServer, "x"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ft, p, err := readFrame(bytes.NewReader(b))
		if err != nil {
			return
		}
		switch ft {
		case FrameHello:
			if h, err := UnmarshalHello(p); err == nil {
				if re, _ := MarshalHello(h); !bytes.Equal(re[FrameHeader:], p) {
					t.Fatalf("hello re-encodes differently")
				}
			}
		case FrameWelcome:
			if w, err := UnmarshalWelcome(p); err == nil {
				if _, err := MarshalWelcome(w); err != nil {
					t.Fatalf("decoded welcome does not re-encode: %v", err)
				}
			}
		case FrameError:
			UnmarshalError(p)
		}
	})
}
