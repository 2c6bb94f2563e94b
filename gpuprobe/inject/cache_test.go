package inject

import (
	"bytes"
	"testing"

	"github.com/gpuprobe/gpuprobe/jit"
)

// TestCache checks hits, misses, keys that differ by each input, and the
// LRU bounds.
func TestCache(t *testing.T) {
	exits := readTestdata(t, "exits.ptx")
	vec := samplePTX(t, "vectoradd", "sm_90")
	kp := kernelPhases(t)
	in, err := NewInjector(2, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name   string
		src    []byte
		progs  []*jit.Program
		opts   Options
		cached bool
	}{
		{"first", exits, kp, Options{}, false},
		{"same again", exits, kp, Options{}, true},
		{"reloaded programs, same content", exits, kernelPhases(t), Options{}, true},
		{"other options", exits, kp, Options{LaunchID: LaunchIDGlobal}, false},
		{"other module evicts the oldest", vec, kp, Options{}, false},
		{"first is gone", exits, kp, Options{}, false},
		{"most recent stays", vec, kp, Options{}, true},
		{"retargeted programs", vec, retarget(kp, "vectorAdd*"), Options{}, false},
	}
	var first []byte
	for _, s := range steps {
		out, rep, err := in.Inject(s.src, s.progs, s.opts)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if rep.Cached != s.cached {
			t.Errorf("%s: Cached = %v, want %v", s.name, rep.Cached, s.cached)
		}
		direct, _, err := Inject(s.src, s.progs, s.opts)
		if err != nil || !bytes.Equal(out, direct) {
			t.Errorf("%s: cached result differs from Inject's (%v)", s.name, err)
		}
		if first == nil {
			first = out
			out[0] ^= 0xff // the caller's copy: must not reach the cache
		}
	}
	st := in.Stats()
	if st.Hits != 3 || st.Misses != 5 || st.Entries != 2 || st.Evictions != 3 {
		t.Errorf("stats %+v, want 3 hits, 5 misses, 2 entries, 3 evictions", st)
	}
	if _, err := NewInjector(0, 1); err == nil {
		t.Error("NewInjector(0, 1) accepted")
	}
}

// TestCacheBytes checks the byte bound.
func TestCacheBytes(t *testing.T) {
	exits := readTestdata(t, "exits.ptx")
	out, _, err := Inject(exits, kernelPhases(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	in, _ := NewInjector(10, len(out)+len(out)/2)
	for _, mode := range []LaunchIDMode{LaunchIDParam, LaunchIDGlobal, LaunchIDParam} {
		if _, _, err := in.Inject(exits, kernelPhases(t), Options{LaunchID: mode}); err != nil {
			t.Fatal(err)
		}
	}
	if st := in.Stats(); st.Entries != 1 || st.Bytes > len(out)+len(out)/2 || st.Hits != 0 {
		t.Errorf("stats %+v: want one entry within %d bytes and no hit", st, len(out)+len(out)/2)
	}
}
