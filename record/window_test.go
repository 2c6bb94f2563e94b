package record

import (
	"errors"
	"testing"
)

func TestNameHash(t *testing.T) {
	// FNV-1a 32 test vectors (draft-eastlake-fnv): "", "a", "foobar".
	for _, tc := range []struct {
		in   string
		want uint32
	}{{"", 0x811c9dc5}, {"a", 0xe40c292c}, {"foobar", 0xbf9cf968}} {
		if got := NameHash(tc.in); got != tc.want {
			t.Errorf("NameHash(%q) = %#x, want %#x", tc.in, got, tc.want)
		}
	}
}

func TestWindowNames(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{TypeWindow.String(), "window"}, {TypeWindowState.String(), "window_state"},
		{WindowsOn.String(), "on"}, {WindowsUnavailable.String(), "unavailable"},
		{WindowsSteppedAside.String(), "stepped_aside"}, {WindowsOff.String(), "off"},
		{WindowsState(9).String(), "state(9)"},
		{WindowsReasonNone.String(), "none"}, {WindowsReasonNoLibrary.String(), "no_library"},
		{WindowsReasonAPIError.String(), "api_error"}, {WindowsReasonProfiler.String(), "profiler"},
		{WindowsReasonInjection.String(), "injection"}, {WindowsReasonConfig.String(), "config"},
		{WindowsReasonRate.String(), "rate"}, {WindowsReasonSASS.String(), "sass"},
		{WindowsReason(8).String(), "reason(8)"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestWindowGraphExecNeedsGraph(t *testing.T) {
	b := (&Window{LaunchID: 5, StartNS: 1, EndNS: 2, Flags: WindowGraphExec}).Append(nil)
	var w Window
	err := w.Decode(b)
	var de *DecodeError
	if !errors.As(err, &de) || de.Offset != 44 {
		t.Fatalf("GRAPH_EXEC alone decoded with %v, want a flags error at offset 44", err)
	}
	b = (&Window{LaunchID: 5, StartNS: 1, EndNS: 2, Flags: WindowGraph | WindowGraphExec}).Append(nil)
	if err := w.Decode(b); err != nil || w.Flags != WindowGraph|WindowGraphExec {
		t.Fatalf("GRAPH|GRAPH_EXEC: %v, flags %v", err, w.Flags)
	}
}

// FuzzWindow decodes arbitrary bytes as Window and WindowState: whatever
// decodes keeps the documented invariants and re-encodes to its bytes.
func FuzzWindow(f *testing.F) {
	f.Add((&Window{LaunchID: 1, StartNS: 5, EndNS: 9, Flags: WindowGraph}).Append(nil))
	f.Add((&Window{StartNS: 5, EndNS: 5, Flags: WindowNoLaunch}).Append(nil))
	f.Add((&Window{LaunchID: 3, StartNS: 7, EndNS: 8, Flags: WindowDeviceLaunched}).Append(nil))
	f.Add((&Window{LaunchID: 4, Flags: WindowUntimed}).Append(nil))
	f.Add((&Window{LaunchID: 5, StartNS: 1, EndNS: 2, Flags: WindowGraph | WindowGraphExec}).Append(nil))
	f.Add((&WindowState{TimeNS: 1, State: WindowsSteppedAside, Reason: WindowsReasonProfiler}).Append(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		var w Window
		if err := w.Decode(b); err == nil {
			if w.EndNS < w.StartNS || w.Flags&^windowFlagsKnown != 0 || (w.Flags&WindowNoLaunch != 0 && w.LaunchID != 0) ||
				(w.Flags&WindowUntimed != 0 && w.StartNS|w.EndNS != 0) ||
				(w.Flags&WindowGraphExec != 0 && w.Flags&WindowGraph == 0) {
				t.Fatalf("decoded an invalid window %+v", w)
			}
			if got := w.Append(nil); string(got) != string(b[:WindowSize]) {
				t.Fatalf("window re-encodes differently:\n%x\n%x", got, b[:WindowSize])
			}
		}
		var s WindowState
		if err := s.Decode(b); err == nil {
			if s.State < WindowsOn || s.State > WindowsOff || s.Reason > windowsReasonLast {
				t.Fatalf("decoded an invalid state %+v", s)
			}
			if got := s.Append(nil); string(got) != string(b[:WindowStateSize]) {
				t.Fatalf("window_state re-encodes differently:\n%x\n%x", got, b[:WindowStateSize])
			}
		}
	})
}

// TestWindowUntimed: an UNTIMED window decodes only with both times 0;
// DEVICE_LAUNCHED keeps its launch id.
func TestWindowUntimed(t *testing.T) {
	for _, tc := range []struct {
		name string
		w    Window
		ok   bool
	}{
		{"untimed, no times", Window{LaunchID: 4, Flags: WindowUntimed}, true},
		{"untimed with a start", Window{LaunchID: 4, StartNS: 1, EndNS: 2, Flags: WindowUntimed}, false},
		{"device launched", Window{LaunchID: 3, StartNS: 7, EndNS: 8, Flags: WindowDeviceLaunched}, true},
		{"device launched, no launch", Window{StartNS: 7, EndNS: 8, Flags: WindowDeviceLaunched | WindowNoLaunch}, true},
	} {
		var got Window
		err := got.Decode(tc.w.Append(nil))
		if (err == nil) != tc.ok || (err == nil && got != tc.w) {
			t.Errorf("%s: decode %+v, %v; want ok %v", tc.name, got, err, tc.ok)
		}
	}
}
