package translate

import (
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/record"
)

// TestKernelNameLater: a later name record of a handle replaces the name
// it has, except a cut copy of that name; each cut record is counted.
func TestKernelNameLater(t *testing.T) {
	const whole = "_ZN2at6native6kernelEv"
	name := func(n string, cut bool) rec { return shim(&record.KernelName{Function: 0xf, Name: n, Truncated: cut}) }
	launch := shim(&record.Launch{LaunchID: 1, Function: 0xf, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}})
	for _, tc := range []struct {
		what    string
		recs    []rec
		mangled string
		cut     uint64
	}{
		{"the handle reused for another kernel", []rec{name("_Z1av", false), name(whole, false)}, whole, 0},
		{"whole after a cut copy (names ring full)", []rec{name(whole[:12], true), name(whole, false)}, whole, 1},
		{"a cut copy after the whole name", []rec{name(whole, false), name(whole[:12], true)}, whole, 1},
		{"the same cut name twice", []rec{name(whole[:12], true), name(whole[:12], true)}, whole[:12] + TruncatedMarker, 2},
		{"a name after a launch named by its handle", []rec{launch, name(whole, false)}, whole, 0},
		{"the same name again", []rec{name(whole, false), name(whole, false)}, whole, 0},
	} {
		t.Run(tc.what, func(t *testing.T) {
			tr := newTr(Options{Demangle: func(s string) string { return "d:" + s }})
			handleAll(t, tr, time.Now(), tc.recs...)
			k := tr.clients.clientOf(1).kernels.byFn[0xf]
			if k == nil || k.mangled != tc.mangled {
				t.Fatalf("kernel %+v, want mangled %q", k, tc.mangled)
			}
			if want := "d:" + tc.mangled; !k.cut() && k.name != want {
				t.Errorf("name %q, want %q", k.name, want)
			}
			if n := tr.Counters().NamesTruncated; n != tc.cut {
				t.Errorf("%d truncated names counted, want %d", n, tc.cut)
			}
		})
	}
}

func (k *kernel) cut() bool {
	return len(k.mangled) >= len(TruncatedMarker) && k.mangled[len(k.mangled)-len(TruncatedMarker):] == TruncatedMarker
}
