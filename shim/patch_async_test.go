package shim

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin/fatbintest"
	"github.com/gpuprobe/gpuprobe/gpuprobe/patcher"
	"github.com/gpuprobe/gpuprobe/record"
)

// jitMarker tags the patched PTX the test agent sends, so that the MOCK
// driver's JIT (MOCK_JIT_MATCH) knows the patch thread's load from the
// application's.
const jitMarker = "// gpuprobe-test: patched image"

// TestPatchAsync runs the app's async scenario (shim/testdata/app.c) with
// the shim's default, asynchronous patching, against a real patcher and
// the MOCK driver's slow JIT: the module loads as it is, the first launch
// runs the original kernel flagged PRESWAP, and the patched kernel takes
// over once compiled; a failed JIT leaves the kernel unpatched (windows
// only); an unload while the JIT runs drops the swap.
func TestPatchAsync(t *testing.T) {
	b := binaries(t)
	src := fatbintest.Source(t, filepath.Join("inject", "vectoradd.cu"))
	ptxFile := fatbintest.Build(t, src, "vectoradd.sm_80.ptx", "-ptx", "-O3", "-arch", "sm_80")
	patch := func(p *patcher.Patcher, r *agentwire.PatchRequest, bind patcher.Binder) (*agentwire.Patched, error) {
		a, err := p.Patch(r, bind)
		if a != nil {
			a.Image = append([]byte(jitMarker+"\n"), a.Image...)
		}
		return a, err
	}
	swappedRe := regexp.MustCompile(`app: async swapped=1 launches=(\d+) id=(\d+)`)
	tests := []struct {
		name, how string
		env       []string
		stdout    []string // lines the app prints, in order
		trace     []string // in the shim's trace (the app's own first module has no PTX: not patched)
		lastProbe bool     // the last launch ran the patched kernel
		outcomes  string   // of the Patch records, in order
	}{
		{"slow JIT", "", nil, []string{"app: async first swapped=0", "app: async swapped=1", "app: unloaded"},
			[]string{"loaded as it is", "swapped in", "1 swapped, 1 not patched, 0 failed, 0 dropped"}, true, "unpatched swapped"},
		{"failed JIT", "fail", []string{"MOCK_JIT_FAIL=1"},
			[]string{"app: async first swapped=0", "app: async after-fail launches=50 swapped=0", "app: unloaded"},
			[]string{"mock: jit target r=218", "asynchronous patch failed", "0 swapped, 1 not patched, 1 failed, 0 dropped"}, false, "unpatched failed"},
		{"unload in flight", "unload", nil,
			[]string{"app: async first swapped=0", "app: unloaded early", "app: async second swapped=1", "app: unloaded"},
			[]string{"the swap is dropped", "1 swapped, 1 not patched, 0 failed, 1 dropped"}, true, "unpatched dropped swapped"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := startPatchAgent(t, patch)
			gate := filepath.Join(t.TempDir(), "gate")
			env := append(preloadAsync(b, a.path), "GPUPROBE_TRACE=1", "MOCK_JIT_MATCH="+jitMarker, "MOCK_JIT_GATE="+gate)
			env = append(env, tc.env...)
			stdout, stderr, err := run(t, b, env, b.app, "dlsym", "async", ptxFile, gate, tc.how)
			if err != nil {
				t.Fatalf("app: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
			}
			at := 0
			for _, w := range tc.stdout {
				i := strings.Index(stdout[at:], w)
				if i < 0 {
					t.Fatalf("stdout lacks %q after byte %d:\n%s\nstderr:\n%s", w, at, stdout, stderr)
				}
				at += i + len(w)
			}
			for _, w := range tc.trace {
				if !strings.Contains(stderr, w) {
					t.Errorf("trace lacks %q:\n%s", w, stderr)
				}
			}
			st := a.waitGone(t, 1)[0].read(t)
			ls := st.launches
			if len(ls) < 2 {
				t.Fatalf("%d launch records", len(ls))
			}
			// The first launch ran before the patched image was ready:
			// the original kernel, windows only, and its record says so.
			if f := ls[0].Flags; f&record.LaunchPreswap == 0 || f&record.LaunchUnprobed == 0 {
				t.Errorf("first launch flags %#x: want preswap and unprobed", f)
			}
			last := ls[len(ls)-1]
			if tc.lastProbe {
				if last.Flags&(record.LaunchPreswap|record.LaunchUnprobed) != 0 {
					t.Errorf("last launch flags %#x: want probed, not preswap", last.Flags)
				}
			} else if last.Flags&record.LaunchPreswap != 0 || last.Flags&record.LaunchUnprobed == 0 {
				t.Errorf("last launch after the failed JIT: flags %#x, want unprobed without preswap", last.Flags)
			}
			// Preswap launches come first, then none: the swap is one-way.
			seen := false
			for i, l := range ls {
				pre := l.Flags&record.LaunchPreswap != 0
				if pre && seen {
					t.Errorf("launch %d is preswap after a launch that was not", i)
				}
				seen = seen || !pre
			}
			var outs []string
			for _, p := range st.patches {
				outs = append(outs, p.Outcome.String())
				if p.Outcome == record.PatchSwapped && (p.Kernels == 0 || p.CompileNS == 0 || p.RequestNS == 0) {
					t.Errorf("swapped module's Patch record %+v: want kernels and both times", p)
				}
			}
			if got := strings.Join(outs, " "); got != tc.outcomes {
				t.Errorf("Patch records' outcomes %q, want %q", got, tc.outcomes)
			}
			if m := swappedRe.FindStringSubmatch(stdout); m != nil {
				// The patched kernel got this launch's own id.
				if want := fmt.Sprint(last.LaunchID); m[2] != want {
					t.Errorf("the patched kernel got launch id %s, its record has %s", m[2], want)
				}
			}
			if tc.how == "unload" && strings.Count(stderr, "mock: unload ") < 3 {
				// The app's two modules and the dropped patched one.
				t.Errorf("want 3 module unloads (the dropped patched module among them):\n%s", stderr)
			}
		})
	}
}
