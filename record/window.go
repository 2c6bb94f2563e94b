package record

import (
	"fmt"
	"hash/fnv"
)

// Sizes of the window records.
const (
	WindowSize      = 48
	WindowStateSize = 32
)

// WindowFlags are the flags of a Window record.
type WindowFlags uint32

// Window flags.
const (
	// WindowGraph: the kernel ran as a node of a graph launch. LaunchID is
	// that graph launch's first node record; the node is the one whose
	// kernel name hashes to NameHash, in node order.
	WindowGraph WindowFlags = 1
	// WindowNoLaunch: the shim found no launch of the correlation id
	// (LaunchID is 0).
	WindowNoLaunch WindowFlags = 2
	// WindowDeviceLaunched: the kernel was launched by another kernel
	// (dynamic parallelism: CUPTI's CDP kernel record). LaunchID is the
	// host launch it descends from when the shim knows its correlation id,
	// else 0 with NO_LAUNCH; it is never that launch's own window.
	WindowDeviceLaunched WindowFlags = 4
	// WindowUntimed: the driver ran the kernel but gave it no timestamps
	// (CUPTI's 0 start and end); StartNS and EndNS are 0. The launch it
	// names has no window, for that reason.
	WindowUntimed WindowFlags = 8
	// WindowGraphExec: the window of a whole graph launch (CUPTI's graph
	// trace), always with WindowGraph: LaunchID is the launch's first
	// node record and NameHash is 0. Its nodes get no window of their own.
	WindowGraphExec WindowFlags = 16

	windowFlagsKnown = WindowGraph | WindowNoLaunch | WindowDeviceLaunched | WindowUntimed | WindowGraphExec
)

// Window is one kernel's exact device window as the driver timed it
// (CUPTI kernel activity, any kernel: SASS or PTX, patched or not),
// written by the shim's activity thread some time after the kernel ran
// (type 12, 48 bytes):
//
//	offset  0  prefix {u16 type = 12, u16 version = 1, u32 size = 48}
//	offset  8  u64 launch_id    the Launch it belongs to; 0 with NO_LAUNCH
//	offset 16  u64 start_ns     host CLOCK_MONOTONIC, the kernel began executing
//	offset 24  u64 end_ns       host CLOCK_MONOTONIC, the kernel finished
//	offset 32  u32 device       CUDA device ordinal
//	offset 36  u32 name_hash    FNV-1a 32 of the mangled kernel name (NameHash)
//	offset 40  u32 correlation  the driver's correlation id of the launch
//	offset 44  u32 flags        WindowFlags: bit 0 GRAPH, bit 1 NO_LAUNCH,
//	                            bit 2 DEVICE_LAUNCHED, bit 3 UNTIMED,
//	                            bit 4 GRAPH_EXEC (with GRAPH)
//
// start_ns ≤ end_ns (both 0 with UNTIMED); NO_LAUNCH has launch_id 0;
// other flag bits are zero.
// Unlike Exec, the times are the host's clock (the shim hands CUPTI its
// clock), so no calibration maps them.
type Window struct {
	LaunchID    uint64
	StartNS     uint64
	EndNS       uint64
	Device      uint32
	NameHash    uint32
	Correlation uint32
	Flags       WindowFlags
}

// Decode fills w from the record in b.
func (w *Window) Decode(b []byte) error {
	if err := check(b, TypeWindow, WindowSize); err != nil {
		return err
	}
	*w = Window{
		LaunchID:    le64(b, 8),
		StartNS:     le64(b, 16),
		EndNS:       le64(b, 24),
		Device:      le32(b, 32),
		NameHash:    le32(b, 36),
		Correlation: le32(b, 40),
		Flags:       WindowFlags(le32(b, 44)),
	}
	if extra := w.Flags &^ windowFlagsKnown; extra != 0 {
		return &DecodeError{Type: TypeWindow, Field: "flags", Offset: 44, Reason: fmt.Sprintf("unknown flags %#x", uint32(extra))}
	}
	if w.Flags&WindowNoLaunch != 0 && w.LaunchID != 0 {
		return &DecodeError{Type: TypeWindow, Field: "launch_id", Offset: 8, Reason: fmt.Sprintf("must be 0 with NO_LAUNCH, got %d", w.LaunchID)}
	}
	if w.Flags&WindowGraphExec != 0 && w.Flags&WindowGraph == 0 {
		return &DecodeError{Type: TypeWindow, Field: "flags", Offset: 44, Reason: "GRAPH_EXEC without GRAPH"}
	}
	if w.Flags&WindowUntimed != 0 && (w.StartNS != 0 || w.EndNS != 0) {
		return &DecodeError{Type: TypeWindow, Field: "start_ns", Offset: 16, Reason: fmt.Sprintf("must be 0 with UNTIMED, got %d..%d", w.StartNS, w.EndNS)}
	}
	return notBefore(TypeWindow, "end_ns", 24, w.EndNS, "start_ns", w.StartNS)
}

// Append appends the encoded record to b.
func (w *Window) Append(b []byte) []byte {
	b, r := grow(b, WindowSize)
	putPrefix(r, TypeWindow, WindowSize)
	put64(r, 8, w.LaunchID)
	put64(r, 16, w.StartNS)
	put64(r, 24, w.EndNS)
	put32(r, 32, w.Device)
	put32(r, 36, w.NameHash)
	put32(r, 40, w.Correlation)
	put32(r, 44, uint32(w.Flags))
	return b
}

// NameHash is the FNV-1a 32-bit hash of a mangled kernel name, as the
// shim puts it in Window.NameHash.
func NameHash(mangled string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(mangled))
	return h.Sum32()
}

// WindowsState says whether device windows are recorded.
type WindowsState uint32

// Window states.
const (
	WindowsOn           WindowsState = 1 // device windows are being recorded
	WindowsUnavailable  WindowsState = 2 // no usable CUPTI: the reason says why
	WindowsSteppedAside WindowsState = 3 // the application's profiler has CUPTI
	WindowsOff          WindowsState = 4 // turned off (configuration, exit)
)

// String names the state ("on", "unavailable", "stepped_aside", "off").
func (s WindowsState) String() string {
	switch s {
	case WindowsOn:
		return "on"
	case WindowsUnavailable:
		return "unavailable"
	case WindowsSteppedAside:
		return "stepped_aside"
	case WindowsOff:
		return "off"
	}
	return fmt.Sprintf("state(%d)", uint32(s))
}

// WindowsReason says why windows are in their state.
type WindowsReason uint32

// Window state reasons.
const (
	WindowsReasonNone      WindowsReason = 0
	WindowsReasonNoLibrary WindowsReason = 1 // libcupti could not be loaded
	WindowsReasonAPIError  WindowsReason = 2 // a CUPTI call failed (Detail: its CUptiResult)
	WindowsReasonProfiler  WindowsReason = 3 // the application called CUPTI itself
	WindowsReasonInjection WindowsReason = 4 // a profiler injected itself (CUDA_INJECTION64_PATH)
	WindowsReasonConfig    WindowsReason = 5 // the collector's configuration turned them off
	WindowsReasonRate      WindowsReason = 6 // the process launches more than the windows' budget allows
	WindowsReasonSASS      WindowsReason = 7 // the process opted in to the SASS route, whose Sanitizer API holds CUPTI's one subscriber

	windowsReasonLast = WindowsReasonSASS
)

// Bounds of the values Decode accepts, for tables indexed by them.
const (
	WindowsStateMax  = WindowsOff        // the largest valid WindowsState
	WindowsReasonMax = windowsReasonLast // the largest valid WindowsReason
)

var windowsReasonNames = [...]string{"none", "no_library", "api_error", "profiler", "injection", "config", "rate", "sass"}

// String names the reason ("none", "no_library", "api_error", "profiler",
// "injection", "config").
func (r WindowsReason) String() string {
	if r <= windowsReasonLast {
		return windowsReasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint32(r))
}

// WindowState says that device windows turned on or off, and how many
// were lost; the shim writes one at each change and at each activity
// buffer (type 13, 32 bytes):
//
//	offset  0  prefix {u16 type = 13, u16 version = 1, u32 size = 32}
//	offset  8  u64 time_ns   host CLOCK_MONOTONIC of the change
//	offset 16  u32 state     WindowsState, 1..4
//	offset 20  u32 reason    WindowsReason, 0..6
//	offset 24  u32 detail    e.g. the CUptiResult of a failed call
//	offset 28  u32 dropped   windows lost since the previous state record
type WindowState struct {
	TimeNS  uint64
	State   WindowsState
	Reason  WindowsReason
	Detail  uint32
	Dropped uint32
}

// Decode fills s from the record in b.
func (s *WindowState) Decode(b []byte) error {
	if err := check(b, TypeWindowState, WindowStateSize); err != nil {
		return err
	}
	*s = WindowState{
		TimeNS:  le64(b, 8),
		State:   WindowsState(le32(b, 16)),
		Reason:  WindowsReason(le32(b, 20)),
		Detail:  le32(b, 24),
		Dropped: le32(b, 28),
	}
	if s.State < WindowsOn || s.State > WindowsStateMax {
		return &DecodeError{Type: TypeWindowState, Field: "state", Offset: 16, Reason: fmt.Sprintf("unknown state %d", uint32(s.State))}
	}
	if s.Reason > windowsReasonLast {
		return &DecodeError{Type: TypeWindowState, Field: "reason", Offset: 20, Reason: fmt.Sprintf("unknown reason %d", uint32(s.Reason))}
	}
	return nil
}

// Append appends the encoded record to b.
func (s *WindowState) Append(b []byte) []byte {
	b, r := grow(b, WindowStateSize)
	putPrefix(r, TypeWindowState, WindowStateSize)
	put64(r, 8, s.TimeNS)
	put32(r, 16, uint32(s.State))
	put32(r, 20, uint32(s.Reason))
	put32(r, 24, s.Detail)
	put32(r, 28, s.Dropped)
	return b
}
