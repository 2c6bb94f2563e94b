package shim

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/record"
)

// sassFilterAgent is a collector at path that filters the SASS route's
// kernels: its WELCOME says so, and it answers each kernel query naming
// the kernels whose name contains allow, with device_one_in oneIn; the
// names it was asked about go to asked.
func sassFilterAgent(t *testing.T, path, allow string, oneIn uint32, asked chan<- string) *testAgent {
	t.Helper()
	opts := sassOn(0)
	opts.Settings.Flags |= agentwire.SettingSASSFilter
	return startAgentPatch(t, path, 256, 1024, nameSlots, opts,
		func(_ *agent.Peer, req *agentwire.PatchRequest) (*agentwire.Patched, error) {
			names, err := agentwire.ParseKernelQuery(req.Image)
			if req.API != agentwire.APISASSKernels || err != nil {
				return nil, &agentwire.NoPatch{Code: agentwire.NoPatchError, Message: fmt.Sprintf("want a kernel query, got API %d (%v)", req.API, err)}
			}
			a := &agentwire.Patched{DeviceOneIn: oneIn}
			for i, n := range names {
				asked <- n
				if strings.Contains(n, allow) {
					a.Kernels = append(a.Kernels, agentwire.PatchedKernel{Name: n, ParamIndex: uint32(i)})
				}
			}
			return a, nil
		})
}

// TestSASSFilter: with the collector filtering (kernels::include/exclude,
// device_one_in), the shim asks once per kernel, probes only the kernels
// the answer names (in the launches device_one_in keeps, by the same hash
// as the PTX route), and a kept-out launch inside a patched module's burst
// leaves the module patched rather than toggling it.
func TestSASSFilter(t *testing.T) {
	const rounds = 20
	for _, oneIn := range []uint32{1, 3} {
		t.Run(fmt.Sprintf("device_one_in %d", oneIn), func(t *testing.T) {
			asked := make(chan string, 64)
			a := sassFilterAgent(t, filepath.Join(t.TempDir(), "agent.sock"), "gemm", oneIn, asked)
			st, counts := runSASSWith(t, a, b0(t).appDirect, "direct", "slowmix", fmt.Sprint(rounds), "GPUPROBE_TRACE=1")
			close(asked)
			var names []string
			for n := range asked {
				names = append(names, n)
			}
			if strings.Join(names, " ") != "_Z6vecAddPfS_S_i _Z4gemmPKfS0_Pfi" && strings.Join(names, " ") != "_Z4gemmPKfS0_Pfi _Z6vecAddPfS_S_i" {
				t.Errorf("kernels asked about %q, want vecAdd and gemm once each", names)
			}
			if len(st.launches) != 2*rounds {
				t.Fatalf("%d launch records, want %d", len(st.launches), 2*rounds)
			}
			flagged, kept, answered := 0, 0, false
			for i, l := range st.launches {
				sass := l.Flags&record.LaunchSASS != 0
				gemm := i%2 == 1
				keep := gemm && (oneIn <= 1 || sampleKeep(l.LaunchID, uint64(oneIn)))
				if sass && !keep {
					t.Errorf("launch %d (id %d, gemm %v): probed, want not (filter or device_one_in)", i, l.LaunchID, gemm)
				}
				// The first launches come before the answer; after
				// it, every launch the filter keeps is probed.
				if keep && answered && !sass {
					t.Errorf("launch %d (id %d): a gemm launch device_one_in keeps, after the answer, not probed", i, l.LaunchID)
				}
				answered = answered || sass
				if keep {
					kept++
				}
				if sass {
					flagged++
				}
			}
			t.Logf("%d of %d gemm launches probed (%d kept by device_one_in); MOCK Sanitizer: %s", flagged, rounds, kept, counts)
			if flagged < kept/2 || len(st.execs) != flagged {
				t.Errorf("%d gemm launches probed (%d Exec records) of %d device_one_in keeps", flagged, len(st.execs), kept)
			}
			var patches int
			fmt.Sscanf(counts[strings.Index(counts, "patches="):], "patches=%d", &patches)
			if patches == 0 || 3*patches > flagged+2 {
				t.Errorf("MOCK Sanitizer counts %q: %d patches for %d probed launches, want a few bursts' worth", counts, patches, flagged)
			}
		})
	}
}

// TestSASSFilterReconnect: a collector that filters otherwise after a
// restart gets every kernel asked about again; the first one's verdicts
// (gemm only) no longer hold, the second's (vecAdd only) do.
func TestSASSFilterReconnect(t *testing.T) {
	b := binaries(t)
	path := filepath.Join(t.TempDir(), "agent.sock")
	asked1, asked2 := make(chan string, 64), make(chan string, 64)
	a1 := sassFilterAgent(t, path, "gemm", 1, asked1)
	app := exec.Command(b.appDirect, "direct", "slowmix", "200")
	app.Env = append(os.Environ(), "LD_LIBRARY_PATH="+b.dir, "GPUPROBE_SASS=1", "GPUPROBE_SANITIZER="+b.sanitizer)
	app.Env = append(app.Env, preload(b, path)...)
	a2, _ := restartWith(t, app, a1, func() *testAgent { return sassFilterAgent(t, path, "vecAdd", 1, asked2) })
	st := a2.waitGone(t, 1)[0].read(t)
	a1.mu.Lock()
	s1 := a1.sessions[0] // closed with its server: its records are all in
	a1.mu.Unlock()
	first := s1.read(t)
	close(asked1)
	close(asked2)
	if len(asked1) != 2 || len(asked2) != 2 {
		t.Errorf("kernels asked about: %d by the first collector, %d by the second; want 2 each", len(asked1), len(asked2))
	}
	probed := func(st *stream, gemm bool) (n int) {
		for i, l := range st.launches {
			// Launch records alternate vecAdd, gemm from the session's start.
			if l.Flags&record.LaunchSASS != 0 && (i%2 == 1) == gemm {
				n++
			}
		}
		return n
	}
	if g, v := probed(first, true), probed(first, false); g == 0 || v != 0 {
		t.Errorf("first session: %d gemm and %d vecAdd launches probed; want some gemm, no vecAdd", g, v)
	}
	if g, v := probed(st, true), probed(st, false); g != 0 || v == 0 {
		t.Errorf("second session: %d gemm and %d vecAdd launches probed; want no gemm, some vecAdd", g, v)
	}
}
