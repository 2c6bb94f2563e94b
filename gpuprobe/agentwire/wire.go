package agentwire

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"github.com/gpuprobe/gpuprobe/shm"
)

// Protocol constants (see the package comment).
const (
	Magic          = 0x41425047 // "GPBA" little-endian
	Version        = 5          // protocol version (2: descriptor flags, headerless regions; 3: PATCHED's device_max_per_second; 4: 16-byte WELCOME settings; 5: their stacks_per_second)
	FrameHeader    = 12         // bytes of a frame header
	MaxPayload     = 65536      // largest frame payload
	MaxNameLen     = 256        // largest process name in HELLO
	MaxRegions     = 32         // most regions in one WELCOME
	DescriptorSize = 64         // bytes of one region descriptor
	MaxRegionName  = 40         // bytes of a descriptor's name field
	MaxErrorMsg    = 1024       // longest ERROR message
	MaxServiceName = 256        // longest OTEL_SERVICE_NAME in HELLO's resource extension
	MaxResAttrs    = 4096       // longest OTEL_RESOURCE_ATTRIBUTES in HELLO's resource extension
)

// FrameType is the type of a frame.
type FrameType uint16

// Frame types.
const (
	FrameHello   FrameType = 1 // client → server: who is connecting
	FrameWelcome FrameType = 2 // server → client: the regions, with their memfds
	FrameError   FrameType = 3 // server → client: why the connection is refused
	FramePatch   FrameType = 4 // client → server: a code image to patch
	FramePatched FrameType = 5 // server → client: the patched image and how to bind it
	FrameNoPatch FrameType = 6 // server → client: the image is not patched, and why
)

// ErrorCode classifies an ERROR frame.
type ErrorCode uint32

// Error codes.
const (
	CodeProtocol         ErrorCode = 1 // malformed frame or handshake
	CodePermissionDenied ErrorCode = 2 // peer credentials not allowed
	CodeServer           ErrorCode = 3 // the server could not set up the session
	CodeVersion          ErrorCode = 4 // unsupported protocol version
	CodeTooMany          ErrorCode = 5 // too many connections
)

// String names the code.
func (c ErrorCode) String() string {
	switch c {
	case CodeProtocol:
		return "protocol error"
	case CodePermissionDenied:
		return "permission denied"
	case CodeServer:
		return "server error"
	case CodeVersion:
		return "unsupported version"
	case CodeTooMany:
		return "too many connections"
	}
	return fmt.Sprintf("ErrorCode(%d)", uint32(c))
}

// Role says what a region handed to a client is for.
type Role uint32

// Region roles; owners may define more.
const (
	RoleLaunchRing Role = 1 // the shim writes launch records here
	RoleMailbox    Role = 2 // GPU host-call mailbox
	RoleMap        Role = 3 // a GPU map of a program (Name = map name)
	RoleNameRing   Role = 4 // the shim writes kernel-name records here (large slots)
	RoleKernelMap  Role = 5 // a BPF_F_MMAPABLE BPF array shared by host and GPU programs (Name = map name; no header)
	RoleClock      Role = 6 // an array of one i64: CLOCK_MONOTONIC − %globaltimer, for bpf_ktime_get_ns on the GPU
)

// DescFlags are the flags of a WELCOME region descriptor.
type DescFlags uint16

// Descriptor flags.
const (
	// FlagNoHeader: the region has no shm header (a kernel map's fd): map
	// region_size bytes of it as they are.
	FlagNoHeader DescFlags = 1
	knownFlags             = FlagNoHeader
)

// HelloReconnect (HELLO flags bit 0): the client had sessions before this
// one; the reconnect extension follows the name.
const HelloReconnect uint32 = 1

// HelloResource (HELLO flags bit 1): the resource extension follows the
// name (and the reconnect extension, if any).
const HelloResource uint32 = 2

// Omitted bits of the resource extension: a variable the client left out
// because it was longer than the protocol allows.
const (
	OmittedServiceName uint32 = 1 // OTEL_SERVICE_NAME over MaxServiceName bytes
	OmittedResAttrs    uint32 = 2 // OTEL_RESOURCE_ATTRIBUTES over MaxResAttrs bytes
	knownOmitted              = OmittedServiceName | OmittedResAttrs
)

// helloExt is the size of the reconnect extension; resExt the fixed part
// of the resource extension.
const (
	helloExt = 16
	resExt   = 16
)

// Hello is what a client says about itself.
type Hello struct {
	PID   uint32 // the client's pid
	Flags uint32 // client feature bits
	Name  string // process name
	// With Flags&HelloReconnect: records the client produced that no
	// collector read (lost), and how many sessions it had before.
	Lost     uint64
	Sessions uint32
	// With Flags&HelloResource: the application's OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES as it found them, undecoded (the client's
	// word: see docs/security.md), and which of them it left out as too
	// long (Omitted* bits).
	ServiceName string
	ResAttrs    string
	Omitted     uint32
}

// RegionInfo describes one region of a WELCOME.
type RegionInfo struct {
	Role       Role      // what the region is for
	Kind       shm.Kind  // shm region kind (headerless regions: the layout, e.g. shm.KindArray)
	Flags      DescFlags // FlagNoHeader for a headerless region
	RegionSize uint64    // bytes to map
	ID         uint32    // the region header's id
	Name       string    // e.g. the map name (<= 40 bytes)
}

// Welcome is the server's answer to a HELLO (the descriptors travel beside
// it).
type Welcome struct {
	Session  uint32       // server-assigned session id
	Regions  []RegionInfo // one per descriptor, in order
	Settings Settings     // what the client should record
}

// Settings are the collector's wishes a WELCOME carries after its
// descriptors (SettingsSize bytes: u32 flags, u32 flush period in µs, u32
// device_max_per_second, u32 stacks_per_second; a WELCOME without them
// asks for nothing optional).
type Settings struct {
	Flags SettingFlags // optional recording the collector asks for
	// FlushPeriod is how often device windows and SASS records are handed
	// over (poll_interval); whole µs up to MaxMicros, 0: the client's default.
	FlushPeriod time.Duration
	// DeviceMaxPerSecond is sampling::device_max_per_second, for the SASS
	// route (with SettingSASS): 0, no limit.
	DeviceMaxPerSecond uint32
	// StacksPerSecond is sampling::stacks_per_second: launches a second of
	// each process that carry their thread's stack (0: none).
	StacksPerSecond uint32
}

// SettingFlags are the bits of Settings.Flags.
type SettingFlags uint32

// Setting flags.
const (
	// SettingWindows asks the client for exact device windows of every
	// kernel (CUPTI activity; record types window and window_state).
	SettingWindows SettingFlags = 1
	// SettingSASS asks the client for the SASS route's probes in kernels
	// that have no PTX (Compute Sanitizer; Exec records from the shim).
	SettingSASS SettingFlags = 2
	// SettingSASSPrograms, with SettingSASS, says the collector has GPU
	// programs for the SASS route: the client asks for their patch module
	// (PATCH with APISASS) before it patches its first kernel.
	SettingSASSPrograms SettingFlags = 4
	// SettingSASSFilter, with SettingSASS, says the collector filters the
	// route's kernels (kernels::include/exclude, sampling::device_one_in):
	// the client asks (PATCH with APISASSKernels) before it probes a
	// kernel the first time, and probes only those the answer names.
	SettingSASSFilter SettingFlags = 8
	// SettingGraphWhole, with SettingWindows, asks for one window per graph
	// launch (CUPTI's graph trace) rather than one per kernel node.
	SettingGraphWhole SettingFlags = 16

	knownSettings = SettingWindows | SettingSASS | SettingSASSPrograms | SettingSASSFilter | SettingGraphWhole
)

// SettingsSize is the size of the settings block of a WELCOME.
const SettingsSize = 16

// MaxMicros is the longest period a µs field of the protocol carries (u32).
const MaxMicros = time.Duration(1<<32-1) * time.Microsecond

// Micros converts a period to the protocol's unit, whole microseconds in
// a u32; a negative, fractional or longer period is an error, not rounded.
func Micros(d time.Duration) (uint32, error) {
	if d < 0 || d > MaxMicros || d%time.Microsecond != 0 {
		return 0, fmt.Errorf("%s is not a whole number of microseconds from 0 to %s", d, MaxMicros)
	}
	return uint32(d / time.Microsecond), nil
}

// ProtocolError is an ERROR frame received from the server, or a malformed
// frame detected locally.
type ProtocolError struct {
	Code    ErrorCode // what kind of failure
	Message string    // details
}

// Error implements error.
func (e *ProtocolError) Error() string {
	return fmt.Sprintf("agent: %v: %s", e.Code, e.Message)
}

func AppendFrame(b []byte, t FrameType, payload []byte) []byte {
	le := binary.LittleEndian
	b = le.AppendUint32(b, Magic)
	b = le.AppendUint16(b, Version)
	b = le.AppendUint16(b, uint16(t))
	b = le.AppendUint32(b, uint32(len(payload)))
	return append(b, payload...)
}

// ParseFrameHeader checks a 12-byte frame header and returns its type and
// payload length.
func ParseFrameHeader(h []byte) (FrameType, uint32, error) {
	le := binary.LittleEndian
	if m := le.Uint32(h); m != Magic {
		return 0, 0, &ProtocolError{CodeProtocol, fmt.Sprintf("frame magic %#08x at offset 0, want %#08x (\"GPBA\")", m, Magic)}
	}
	if v := le.Uint16(h[4:]); v != Version {
		return 0, 0, &ProtocolError{CodeVersion, fmt.Sprintf("protocol version %d at offset 4, this side speaks %d", v, Version)}
	}
	t := FrameType(le.Uint16(h[6:]))
	if t < FrameHello || t > FrameNoPatch {
		return 0, 0, &ProtocolError{CodeProtocol, fmt.Sprintf("unknown frame type %d at offset 6", t)}
	}
	n := le.Uint32(h[8:])
	if n > MaxPayload {
		return 0, 0, &ProtocolError{CodeProtocol, fmt.Sprintf("frame length %d at offset 8 exceeds %d", n, MaxPayload)}
	}
	return t, n, nil
}

// ReadFrame reads one frame from r.
func ReadFrame(r io.Reader) (FrameType, []byte, error) {
	var h [FrameHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, fmt.Errorf("agent: reading frame header: %w", err)
	}
	t, n, err := ParseFrameHeader(h[:])
	if err != nil {
		return 0, nil, err
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return 0, nil, fmt.Errorf("agent: reading %d-byte frame payload: %w", n, err)
	}
	return t, p, nil
}

// MarshalHello encodes a HELLO frame.
func MarshalHello(h Hello) ([]byte, error) {
	if len(h.Name) > MaxNameLen {
		return nil, fmt.Errorf("agent: process name of %d bytes exceeds %d", len(h.Name), MaxNameLen)
	}
	le := binary.LittleEndian
	p := le.AppendUint32(nil, h.PID)
	p = le.AppendUint32(p, h.Flags)
	p = le.AppendUint32(p, uint32(len(h.Name)))
	p = append(p, h.Name...)
	if h.Flags&HelloReconnect != 0 {
		p = le.AppendUint64(p, h.Lost)
		p = le.AppendUint32(p, h.Sessions)
		p = le.AppendUint32(p, 0)
	}
	if h.Flags&HelloResource != 0 {
		switch {
		case len(h.ServiceName) > MaxServiceName:
			return nil, fmt.Errorf("agent: OTEL_SERVICE_NAME of %d bytes exceeds %d", len(h.ServiceName), MaxServiceName)
		case len(h.ResAttrs) > MaxResAttrs:
			return nil, fmt.Errorf("agent: OTEL_RESOURCE_ATTRIBUTES of %d bytes exceeds %d", len(h.ResAttrs), MaxResAttrs)
		case h.Omitted&^knownOmitted != 0:
			return nil, fmt.Errorf("agent: omitted bits %#x: only %#x are defined", h.Omitted, knownOmitted)
		}
		p = le.AppendUint32(p, uint32(len(h.ServiceName)))
		p = le.AppendUint32(p, uint32(len(h.ResAttrs)))
		p = le.AppendUint32(p, h.Omitted)
		p = le.AppendUint32(p, 0)
		p = append(p, h.ServiceName...)
		p = append(p, h.ResAttrs...)
	}
	return AppendFrame(nil, FrameHello, p), nil
}

// UnmarshalHello decodes a HELLO payload.
func UnmarshalHello(p []byte) (Hello, error) {
	le := binary.LittleEndian
	if len(p) < 12 {
		return Hello{}, &ProtocolError{CodeProtocol, fmt.Sprintf("HELLO payload of %d bytes, want at least 12", len(p))}
	}
	h := Hello{PID: le.Uint32(p), Flags: le.Uint32(p[4:])}
	n := le.Uint32(p[8:])
	if n > MaxNameLen {
		return h, &ProtocolError{CodeProtocol, fmt.Sprintf("HELLO name_len %d at payload offset 8 exceeds %d", n, MaxNameLen)}
	}
	ext := 0
	if h.Flags&HelloReconnect != 0 {
		ext = helloExt
	}
	if h.Flags&HelloResource != 0 {
		ext += resExt
	}
	if int(n)+ext > len(p)-12 || (h.Flags&HelloResource == 0 && int(n)+ext != len(p)-12) {
		return h, &ProtocolError{CodeProtocol, fmt.Sprintf("HELLO name_len %d at payload offset 8 (+%d extension bytes), but %d bytes follow", n, ext, len(p)-12)}
	}
	h.Name = string(p[12 : 12+n])
	off := 12 + n
	if h.Flags&HelloReconnect != 0 {
		h.Lost, h.Sessions = le.Uint64(p[off:]), le.Uint32(p[off+8:])
		if r := le.Uint32(p[off+12:]); r != 0 {
			return h, &ProtocolError{CodeProtocol, fmt.Sprintf("HELLO reconnect extension reserved %#x at payload offset %d, want 0", r, off+12)}
		}
		off += helloExt
	}
	if h.Flags&HelloResource != 0 {
		if err := h.unmarshalResource(p, off); err != nil {
			return h, err
		}
	}
	return h, nil
}

// unmarshalResource decodes the resource extension at payload offset off
// (its fixed part is there: UnmarshalHello checked).
func (h *Hello) unmarshalResource(p []byte, off uint32) error {
	le := binary.LittleEndian
	sn, an := le.Uint32(p[off:]), le.Uint32(p[off+4:])
	h.Omitted = le.Uint32(p[off+8:])
	switch r := le.Uint32(p[off+12:]); {
	case sn > MaxServiceName:
		return &ProtocolError{CodeProtocol, fmt.Sprintf("HELLO service_len %d at payload offset %d exceeds %d", sn, off, MaxServiceName)}
	case an > MaxResAttrs:
		return &ProtocolError{CodeProtocol, fmt.Sprintf("HELLO attrs_len %d at payload offset %d exceeds %d", an, off+4, MaxResAttrs)}
	case h.Omitted&^knownOmitted != 0:
		return &ProtocolError{CodeProtocol, fmt.Sprintf("HELLO omitted %#x at payload offset %d: only %#x are defined", h.Omitted, off+8, knownOmitted)}
	case r != 0:
		return &ProtocolError{CodeProtocol, fmt.Sprintf("HELLO resource extension reserved %#x at payload offset %d, want 0", r, off+12)}
	case uint64(off)+resExt+uint64(sn)+uint64(an) != uint64(len(p)):
		return &ProtocolError{CodeProtocol, fmt.Sprintf("HELLO service_len %d + attrs_len %d at payload offset %d, but %d bytes follow", sn, an, off, len(p)-int(off)-resExt)}
	}
	off += resExt
	h.ServiceName = string(p[off : off+sn])
	h.ResAttrs = string(p[off+sn : off+sn+an])
	return nil
}

// MarshalWelcome encodes a WELCOME frame.
func MarshalWelcome(w Welcome) ([]byte, error) {
	if len(w.Regions) > MaxRegions {
		return nil, fmt.Errorf("agent: %d regions exceed %d", len(w.Regions), MaxRegions)
	}
	le := binary.LittleEndian
	p := le.AppendUint32(nil, w.Session)
	p = le.AppendUint32(p, uint32(len(w.Regions)))
	for i, r := range w.Regions {
		if len(r.Name) > MaxRegionName {
			return nil, fmt.Errorf("agent: region %d name %q exceeds %d bytes", i, r.Name, MaxRegionName)
		}
		if r.Flags&^knownFlags != 0 {
			return nil, fmt.Errorf("agent: region %d (%q) flags %#x: only %#x are defined", i, r.Name, r.Flags, knownFlags)
		}
		var d [DescriptorSize]byte
		le.PutUint32(d[0:], uint32(r.Role))
		le.PutUint16(d[4:], uint16(r.Kind))
		le.PutUint16(d[6:], uint16(r.Flags))
		le.PutUint64(d[8:], r.RegionSize)
		le.PutUint32(d[16:], r.ID)
		copy(d[24:], r.Name)
		p = append(p, d[:]...)
	}
	st := w.Settings
	if st.Flags&^knownSettings != 0 {
		return nil, fmt.Errorf("agent: settings flags %#x: only %#x are defined", st.Flags, knownSettings)
	}
	us, err := Micros(st.FlushPeriod)
	if err != nil {
		return nil, fmt.Errorf("agent: settings flush period: %w", err)
	}
	p = le.AppendUint32(p, uint32(st.Flags))
	p = le.AppendUint32(p, us)
	p = le.AppendUint32(p, st.DeviceMaxPerSecond)
	p = le.AppendUint32(p, st.StacksPerSecond)
	return AppendFrame(nil, FrameWelcome, p), nil
}

// UnmarshalWelcome decodes a WELCOME payload.
func UnmarshalWelcome(p []byte) (Welcome, error) {
	le := binary.LittleEndian
	var w Welcome
	if len(p) < 8 {
		return w, &ProtocolError{CodeProtocol, fmt.Sprintf("WELCOME payload of %d bytes, want at least 8", len(p))}
	}
	w.Session = le.Uint32(p)
	n := le.Uint32(p[4:])
	if n > MaxRegions {
		return w, &ProtocolError{CodeProtocol, fmt.Sprintf("WELCOME count %d at payload offset 4 exceeds %d", n, MaxRegions)}
	}
	end := 8 + uint64(n)*DescriptorSize
	if uint64(len(p)) != end && uint64(len(p)) != end+SettingsSize {
		return w, &ProtocolError{CodeProtocol, fmt.Sprintf("WELCOME of %d bytes does not hold %d descriptors (and settings)", len(p), n)}
	}
	if uint64(len(p)) == end+SettingsSize {
		s := p[end:]
		if f := SettingFlags(le.Uint32(s)); f&^knownSettings != 0 {
			return w, &ProtocolError{CodeProtocol, fmt.Sprintf("settings flags %#x at payload offset %d: only %#x are defined", f, end, knownSettings)}
		}
		w.Settings = Settings{Flags: SettingFlags(le.Uint32(s)), FlushPeriod: time.Duration(le.Uint32(s[4:])) * time.Microsecond,
			DeviceMaxPerSecond: le.Uint32(s[8:]), StacksPerSecond: le.Uint32(s[12:])}
	}
	for i := uint32(0); i < n; i++ {
		d := p[8+i*DescriptorSize : 8+(i+1)*DescriptorSize]
		off := 8 + i*DescriptorSize
		f := DescFlags(le.Uint16(d[6:]))
		if f&^knownFlags != 0 {
			return w, &ProtocolError{CodeProtocol, fmt.Sprintf("descriptor %d flags %#x at payload offset %d: only %#x are defined", i, f, off+6, knownFlags)}
		}
		if r := le.Uint32(d[20:]); r != 0 {
			return w, &ProtocolError{CodeProtocol, fmt.Sprintf("descriptor %d reserved %#x at payload offset %d, want 0", i, r, off+20)}
		}
		name := d[24:]
		if j := bytes.IndexByte(name, 0); j >= 0 {
			name = name[:j]
		}
		w.Regions = append(w.Regions, RegionInfo{Role: Role(le.Uint32(d)), Kind: shm.Kind(le.Uint16(d[4:])), Flags: f,
			RegionSize: le.Uint64(d[8:]), ID: le.Uint32(d[16:]), Name: string(name)})
	}
	return w, nil
}

// MarshalError encodes an ERROR frame (the message is cut to MaxErrorMsg).
func MarshalError(code ErrorCode, msg string) []byte {
	if len(msg) > MaxErrorMsg {
		msg = msg[:MaxErrorMsg]
	}
	le := binary.LittleEndian
	p := le.AppendUint32(nil, uint32(code))
	p = le.AppendUint32(p, uint32(len(msg)))
	p = append(p, msg...)
	return AppendFrame(nil, FrameError, p)
}

// UnmarshalError decodes an ERROR payload into a *ProtocolError.
func UnmarshalError(p []byte) error {
	le := binary.LittleEndian
	if len(p) < 8 {
		return &ProtocolError{CodeProtocol, fmt.Sprintf("ERROR payload of %d bytes, want at least 8", len(p))}
	}
	n := le.Uint32(p[4:])
	if n > MaxErrorMsg || int(n) != len(p)-8 {
		return &ProtocolError{CodeProtocol, fmt.Sprintf("ERROR msg_len %d at payload offset 4 with %d bytes following", n, len(p)-8)}
	}
	return &ProtocolError{Code: ErrorCode(le.Uint32(p)), Message: string(p[8:])}
}
