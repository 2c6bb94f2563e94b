package agentwire

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/shm"
)

func TestWireRoundTrip(t *testing.T) {
	hellos := []Hello{{}, {PID: 77, Flags: 3, Name: "python3"}, {Name: strings.Repeat("n", MaxNameLen)},
		{PID: 5, Flags: HelloReconnect, Name: "app", Lost: 1 << 40, Sessions: 2},
		{PID: 6, Flags: HelloResource, Name: "python3", ServiceName: "trainer", ResAttrs: "k8s.pod.name=p%2C1,a=b"},
		{PID: 7, Flags: HelloReconnect | HelloResource, Name: "app", Lost: 3, Sessions: 1,
			ServiceName: strings.Repeat("s", MaxServiceName), ResAttrs: strings.Repeat("a", MaxResAttrs)},
		{Flags: HelloResource, Omitted: OmittedServiceName | OmittedResAttrs}}
	for _, h := range hellos {
		b, err := MarshalHello(h)
		if err != nil {
			t.Fatal(err)
		}
		ft, p, err := ReadFrame(bytes.NewReader(b))
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
		{Role: RoleKernelMap, Kind: shm.KindArray, Flags: FlagNoHeader, RegionSize: 4096, Name: "launch_clock"},
		{Role: RoleClock, Kind: shm.KindArray, RegionSize: 4096, ID: 3, Name: "clock"},
	}, Settings: Settings{Flags: SettingWindows | SettingSASS, DeviceMaxPerSecond: 70000, FlushPeriod: 250 * time.Millisecond, StacksPerSecond: 50}}
	b, err := MarshalWelcome(w)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != FrameHeader+8+4*DescriptorSize+SettingsSize {
		t.Fatalf("WELCOME is %d bytes", len(b))
	}
	// The settings follow the descriptors, a field each: flags, the flush
	// period in µs, device_max_per_second in full (over 16 bits here),
	// stacks_per_second.
	st := b[len(b)-SettingsSize:]
	le := binary.LittleEndian
	if f, us, rate, r := le.Uint32(st), le.Uint32(st[4:]), le.Uint32(st[8:]), le.Uint32(st[12:]); f != 3 || us != 250000 || rate != 70000 || r != 50 {
		t.Fatalf("settings %#x %d %d %d, want 0x3 250000 70000 50", f, us, rate, r)
	}
	// A WELCOME without settings (an older collector) asks for nothing.
	if got, err := UnmarshalWelcome(b[FrameHeader : len(b)-SettingsSize]); err != nil || got.Settings != (Settings{}) || len(got.Regions) != 4 {
		t.Fatalf("welcome without settings: %+v, %v", got, err)
	}
	// Anything else after the descriptors is refused.
	if _, err := UnmarshalWelcome(b[FrameHeader : len(b)-4]); err == nil {
		t.Fatal("a WELCOME with 4 bytes of settings was accepted")
	}
	// The documented byte layout: version 5 at frame offset 4; descriptor
	// 1's region_size at payload 8+64+8; descriptor 2's role at payload
	// 8+128 and its flags (bit 0: no header) at 8+128+6.
	if v := le.Uint16(b[4:]); v != 5 {
		t.Fatalf("frame version %d, want 5", v)
	}
	if v := le.Uint64(b[FrameHeader+8+DescriptorSize+8:]); v != 1<<20 {
		t.Fatalf("region_size field holds %d", v)
	}
	if r, f := le.Uint32(b[FrameHeader+8+2*DescriptorSize:]), le.Uint16(b[FrameHeader+8+2*DescriptorSize+6:]); r != 5 || f != 1 {
		t.Fatalf("kernel map descriptor: role %d flags %d, want 5 and 1", r, f)
	}
	ft, p, err := ReadFrame(bytes.NewReader(b))
	if err != nil || ft != FrameWelcome {
		t.Fatal(ft, err)
	}
	if got, err := UnmarshalWelcome(p); err != nil || !reflect.DeepEqual(got, w) {
		t.Fatalf("welcome %+v -> %+v, %v", w, got, err)
	}
	ft, p, err = ReadFrame(bytes.NewReader(MarshalError(CodeTooMany, "busy")))
	if err != nil || ft != FrameError || UnmarshalError(p).Error() != "agent: too many connections: busy" {
		t.Fatalf("error frame: %v %v", ft, err)
	}
}

// TestHelloResourceLayout: the resource extension sits where doc.go says,
// after the reconnect extension, and a HELLO without flags bit 1 (an older
// shim's) is the 12 bytes + name it always was.
func TestHelloResourceLayout(t *testing.T) {
	le := binary.LittleEndian
	old := le.AppendUint32(nil, 9)
	old = le.AppendUint32(old, 0)
	old = le.AppendUint32(old, 3)
	old = append(old, "app"...)
	h, err := UnmarshalHello(old)
	if err != nil || h != (Hello{PID: 9, Name: "app"}) {
		t.Fatalf("older shim's HELLO: %+v, %v", h, err)
	}
	b, err := MarshalHello(Hello{PID: 9, Flags: HelloReconnect | HelloResource, Name: "app", Lost: 4, Sessions: 1,
		ServiceName: "svc", ResAttrs: "a=b", Omitted: OmittedResAttrs})
	if err != nil {
		t.Fatal(err)
	}
	p := b[FrameHeader:]
	off := 12 + 3 + 16 // name, reconnect extension
	if len(p) != off+16+3+3 {
		t.Fatalf("payload of %d bytes, want %d", len(p), off+16+6)
	}
	if sn, an, om := le.Uint32(p[off:]), le.Uint32(p[off+4:]), le.Uint32(p[off+8:]); sn != 3 || an != 3 || om != OmittedResAttrs {
		t.Fatalf("service_len %d attrs_len %d omitted %d", sn, an, om)
	}
	if got := string(p[off+16:]); got != "svca=b" {
		t.Fatalf("strings %q", got)
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
		{"flush period not in µs", func() error {
			_, err := MarshalWelcome(Welcome{Settings: Settings{Flags: SettingWindows, FlushPeriod: 1500 * time.Nanosecond}})
			return err
		}(), "flush period: 1.5µs is not a whole number of microseconds"},
		{"flush period over u32 µs", func() error {
			_, err := MarshalWelcome(Welcome{Settings: Settings{FlushPeriod: MaxMicros + time.Microsecond}})
			return err
		}(), "is not a whole number of microseconds from 0"},
		{"unknown setting flag", func() error { _, err := MarshalWelcome(Welcome{Settings: Settings{Flags: 32}}); return err }(), "settings flags 0x20"},
		{"long region name", func() error {
			_, err := MarshalWelcome(Welcome{Regions: []RegionInfo{{Name: strings.Repeat("x", 41)}}})
			return err
		}(), "exceeds 40"},
		{"welcome count lies", func() error { _, err := UnmarshalWelcome([]byte{0, 0, 0, 0, 2, 0, 0, 0}); return err }(), "does not hold 2"},
		{"welcome count huge", func() error { _, err := UnmarshalWelcome([]byte{0, 0, 0, 0, 99, 0, 0, 0}); return err }(), "exceeds 32"},
		{"unknown descriptor flags", func() error {
			p := make([]byte, 8+DescriptorSize)
			p[4], p[8+6] = 1, 2
			_, err := UnmarshalWelcome(p)
			return err
		}(), "descriptor 0 flags 0x2 at payload offset 14"},
		{"marshal unknown flags", func() error {
			_, err := MarshalWelcome(Welcome{Regions: []RegionInfo{{Name: "k", Flags: 4}}})
			return err
		}(), `region 0 ("k") flags 0x4`},
		{"version 1 frame", func() error {
			b := MarshalError(CodeServer, "x")
			b[4] = 1
			_, _, err := ReadFrame(bytes.NewReader(b))
			return err
		}(), "protocol version 1 at offset 4, this side speaks 5"},
		{"error length lies", UnmarshalError([]byte{1, 0, 0, 0, 9, 0, 0, 0, 'a'}), "msg_len 9"},
		{"long service name", func() error {
			_, err := MarshalHello(Hello{Flags: HelloResource, ServiceName: strings.Repeat("s", MaxServiceName+1)})
			return err
		}(), "OTEL_SERVICE_NAME of 257 bytes exceeds 256"},
		{"hello service_len huge", helloRes(257, 0, 0, 0, 0), "service_len 257 at payload offset 12 exceeds 256"},
		{"hello attrs_len huge", helloRes(0, 4097, 0, 0, 0), "attrs_len 4097 at payload offset 16 exceeds 4096"},
		{"hello omitted unknown", helloRes(0, 0, 4, 0, 0), "omitted 0x4 at payload offset 20"},
		{"hello resource reserved", helloRes(0, 0, 0, 1, 0), "reserved 0x1 at payload offset 24"},
		{"hello resource lengths lie", helloRes(2, 2, 0, 0, 3), "service_len 2 + attrs_len 2 at payload offset 12, but 3 bytes follow"},
		{"hello resource cut", func() error { _, err := UnmarshalHello([]byte{0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1}); return err }(),
			"(+16 extension bytes), but 1 bytes follow"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
				t.Fatalf("error %v, want one mentioning %q", tc.err, tc.want)
			}
		})
	}
}

// helloRes decodes a HELLO with no name and a resource extension of the
// given fields followed by n bytes.
func helloRes(sn, an, omitted, reserved uint32, n int) error {
	le := binary.LittleEndian
	p := le.AppendUint32(nil, 0)
	p = le.AppendUint32(p, HelloResource)
	p = le.AppendUint32(p, 0)
	for _, v := range []uint32{sn, an, omitted, reserved} {
		p = le.AppendUint32(p, v)
	}
	_, err := UnmarshalHello(append(p, make([]byte, n)...))
	return err
}

// FuzzFrames: no byte sequence makes the decoders panic, and what decodes
// re-encodes to the same bytes.
func FuzzFrames(f *testing.F) {
	h, _ := MarshalHello(Hello{PID: 1, Name: "a"})
	hr, _ := MarshalHello(Hello{PID: 1, Flags: HelloReconnect | HelloResource, Name: "a", ServiceName: "s", ResAttrs: "k=v"})
	f.Add(hr)
	w, _ := MarshalWelcome(Welcome{Session: 1, Regions: []RegionInfo{{Role: 1, Kind: 1, RegionSize: 4096, Name: "r"}}})
	f.Add(h)
	f.Add(w)
	f.Add(MarshalError(CodeServer, "x"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ft, p, err := ReadFrame(bytes.NewReader(b))
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
