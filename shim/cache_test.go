package shim

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin/fatbintest"
	"github.com/gpuprobe/gpuprobe/gpuprobe/patcher"
	"github.com/gpuprobe/gpuprobe/record"
)

// cacheRun is one run of the app's async scenario with the shim's cache
// of compiled patched images at dir.
type cacheRun struct {
	stdout, stderr string
	cache          []record.PatchCache // of the swapped module's Patch records
	jits           int                 // JIT calls of the MOCK driver
	probed         bool                // the last launch ran the patched kernel
}

// cacheEnv is what the cache tests share: the binaries, the PTX file the
// app loads, and a patch function that marks the patched image for the
// MOCK driver's JIT.
type cacheEnv struct {
	b     *built
	ptx   string
	patch func(*patcher.Patcher, *agentwire.PatchRequest, patcher.Binder) (*agentwire.Patched, error)
}

func newCacheEnv(t *testing.T) *cacheEnv {
	b := binaries(t)
	src := fatbintest.Source(t, filepath.Join("inject", "vectoradd.cu"))
	return &cacheEnv{b: b, ptx: fatbintest.Build(t, src, "vectoradd.sm_80.ptx", "-ptx", "-O3", "-arch", "sm_80"),
		patch: func(p *patcher.Patcher, r *agentwire.PatchRequest, bind patcher.Binder) (*agentwire.Patched, error) {
			a, err := p.Patch(r, bind)
			if a != nil {
				a.Image = append([]byte(jitMarker+"\n"), a.Image...)
			}
			return a, err
		}}
}

// run runs the app once against its own agent, with extra env.
func (ce *cacheEnv) run(t *testing.T, dir string, extra ...string) cacheRun {
	t.Helper()
	a := startPatchAgent(t, ce.patch)
	gate := filepath.Join(t.TempDir(), "gate")
	env := append(preloadAsync(ce.b, a.path), "GPUPROBE_TRACE=1", "MOCK_JIT_MATCH="+jitMarker, "MOCK_JIT_GATE="+gate,
		"GPUPROBE_CACHE_DIR="+dir)
	stdout, stderr, err := run(t, ce.b, append(env, extra...), ce.b.app, "dlsym", "async", ce.ptx, gate, "")
	if err != nil {
		t.Fatalf("app: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	st := a.waitGone(t, 1)[0].read(t)
	r := cacheRun{stdout: stdout, stderr: stderr, jits: strings.Count(stderr, "mock: jit target")}
	for _, p := range st.patches {
		if p.Outcome == record.PatchSwapped {
			r.cache = append(r.cache, p.Cache)
		}
	}
	if ls := st.launches; len(ls) > 0 {
		r.probed = ls[len(ls)-1].Flags&(record.LaunchUnprobed|record.LaunchPreswap) == 0
	}
	return r
}

// entries lists the uid's cache directory under dir: entries and others.
func entries(t *testing.T, dir string) (cubins, others []string) {
	t.Helper()
	es, err := os.ReadDir(filepath.Join(dir, strconv.Itoa(os.Geteuid())))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if strings.HasSuffix(e.Name(), ".cubin") && !strings.HasPrefix(e.Name(), ".") {
			cubins = append(cubins, e.Name())
		} else {
			others = append(others, e.Name())
		}
	}
	return cubins, others
}

func (r cacheRun) want(t *testing.T, what string, c record.PatchCache, jits int) {
	t.Helper()
	if len(r.cache) != 1 || r.cache[0] != c || r.jits != jits || !r.probed {
		t.Errorf("%s: cache %v, %d JIT calls, last launch probed %v; want %v, %d, true\nstderr:\n%s",
			what, r.cache, r.jits, r.probed, c, jits, r.stderr)
	}
}

// TestCacheHit: the first start compiles the patched image and stores it
// in a private directory of the uid's; the second takes it from there
// with no JIT call (the MOCK driver counts them).
func TestCacheHit(t *testing.T) {
	ce := newCacheEnv(t)
	dir := t.TempDir()
	ce.run(t, dir).want(t, "first start", record.PatchCacheMiss, 1)
	st, err := os.Stat(filepath.Join(dir, strconv.Itoa(os.Geteuid())))
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("uid directory: %v, mode %v; want 0700", err, st.Mode())
	}
	if cubins, others := entries(t, dir); len(cubins) != 1 || len(others) != 0 {
		t.Fatalf("cache holds %v and %v, want one entry", cubins, others)
	}
	r := ce.run(t, dir)
	r.want(t, "second start", record.PatchCacheHit, 0)
	if !strings.Contains(r.stderr, "cache: hit ") || !strings.Contains(r.stderr, "mock: cubin load") {
		t.Errorf("second start's trace lacks the hit and the cubin load:\n%s", r.stderr)
	}
}

// TestCacheCorrupt: an entry whose cubin no longer matches its hash is
// rejected, removed, compiled again (counted corrupt) and stored whole.
func TestCacheCorrupt(t *testing.T) {
	ce := newCacheEnv(t)
	for _, tc := range []struct {
		name  string
		spoil func([]byte) []byte
	}{
		{"flipped byte", func(b []byte) []byte { b[len(b)-2] ^= 0x20; return b }},
		{"cut short", func(b []byte) []byte { return b[:len(b)/2] }},
		{"bad magic", func(b []byte) []byte { b[0] = 'X'; return b }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ce.run(t, dir).want(t, "first start", record.PatchCacheMiss, 1)
			cubins, _ := entries(t, dir)
			if len(cubins) != 1 {
				t.Fatalf("entries %v", cubins)
			}
			path := filepath.Join(dir, strconv.Itoa(os.Geteuid()), cubins[0])
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, tc.spoil(append([]byte(nil), b...)), 0o600); err != nil {
				t.Fatal(err)
			}
			r := ce.run(t, dir)
			r.want(t, "corrupt entry", record.PatchCacheCorrupt, 1)
			if !strings.Contains(r.stderr, "failed its check") {
				t.Errorf("trace lacks the rejection:\n%s", r.stderr)
			}
			if again, err := os.ReadFile(path); err != nil || string(again) != string(b) {
				t.Errorf("the entry was not stored again whole (%v)", err)
			}
			ce.run(t, dir).want(t, "after the corrupt entry", record.PatchCacheHit, 0)
		})
	}
}

// TestCacheFillAtOnce: two processes compile the same patched image at
// once (the MOCK driver holds each JIT until both are in theirs) and
// store it: both succeed, one whole entry is left, no temporary file, and
// a third start hits it.
func TestCacheFillAtOnce(t *testing.T) {
	ce := newCacheEnv(t)
	dir, ready := t.TempDir(), t.TempDir()
	var wg sync.WaitGroup
	runs := make([]cacheRun, 2)
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runs[i] = ce.run(t, dir, "MOCK_JIT_READY="+ready, "MOCK_JIT_PEERS=2")
		}()
	}
	wg.Wait()
	for i, r := range runs {
		r.want(t, "process "+strconv.Itoa(i), record.PatchCacheMiss, 1)
	}
	if cubins, others := entries(t, dir); len(cubins) != 1 || len(others) != 0 {
		t.Fatalf("cache holds %v and %v, want one entry", cubins, others)
	}
	ce.run(t, dir).want(t, "third start", record.PatchCacheHit, 0)
}

// TestCacheRefusesOthersDirectory: a uid directory this uid does not own
// privately (here: opened to the group) is not used; patching goes on
// through the driver's JIT.
func TestCacheRefusesOthersDirectory(t *testing.T) {
	ce := newCacheEnv(t)
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, strconv.Itoa(os.Geteuid())), 0o770); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, strconv.Itoa(os.Geteuid())), 0o770); err != nil {
		t.Fatal(err)
	}
	r := ce.run(t, dir)
	r.want(t, "open directory", record.PatchCacheOff, 1)
	if !strings.Contains(r.stderr, "not a private directory") {
		t.Errorf("trace lacks the refusal:\n%s", r.stderr)
	}
	if cubins, _ := entries(t, dir); len(cubins) != 0 {
		t.Errorf("stored %v in a directory it refused", cubins)
	}
}

// TestCacheBound: a store holds the uid's directory under
// GPUPROBE_CACHE_MAX_MB by removing the least recently used entries
// (here an old 2 MiB one), and removes a dead writer's temporary file.
func TestCacheBound(t *testing.T) {
	ce := newCacheEnv(t)
	dir := t.TempDir()
	own := filepath.Join(dir, strconv.Itoa(os.Geteuid()))
	if err := os.Mkdir(own, 0o700); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Hour)
	for name, size := range map[string]int{"0000.cubin": 2 << 20, ".tmp.1.1.0": 10} {
		p := filepath.Join(own, name)
		if err := os.WriteFile(p, make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	ce.run(t, dir, "GPUPROBE_CACHE_MAX_MB=1").want(t, "bounded", record.PatchCacheMiss, 1)
	cubins, others := entries(t, dir)
	if len(cubins) != 1 || cubins[0] == "0000.cubin" || len(others) != 0 {
		t.Errorf("cache holds %v and %v: want only the new entry", cubins, others)
	}
}
