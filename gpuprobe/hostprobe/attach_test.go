package hostprobe

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestAttachErrors(t *testing.T) {
	requireRoot(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := buildStandins(t)
	text := filepath.Join(s.dir, "notes.txt")
	if err := os.WriteFile(text, []byte("not an ELF file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	nosyms := filepath.Join(s.dir, "libother.so")
	src := filepath.Join(s.dir, "other.c")
	if err := os.WriteFile(src, []byte("int other(void) { return 1; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gcc(t, "-shared", "-fPIC", "-o", nosyms, src)
	// An executable that imports the runtime (undefined symbols) and
	// has no .symtab: nothing to attach to.
	strippedApp := s.stripped(t, s.app, "standin_app_stripped")

	p, err := Load(Options{})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	defer p.Close()
	for _, tc := range []struct {
		name, path string
		want       []string // substrings of the error
	}{
		{"missing file", filepath.Join(s.dir, "nope.so"), []string{"nope.so", "no such file"}},
		{"directory", s.dir, []string{"not a regular file"}},
		{"not ELF", text, []string{"notes.txt", "not an ELF file"}},
		{"no known symbol", nosyms, []string{"libother.so", "none of the 84 CUDA runtime or driver symbols", ".symtab and .dynsym"}},
		{"stripped executable importing the runtime", strippedApp, []string{"none of the 84", "stripped: no .symtab"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := p.Attach(tc.path)
			if err == nil {
				t.Fatalf("Attach(%s) = %+v, want an error", tc.path, a)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Attach(%s) error %q does not contain %q", tc.path, err, w)
				}
			}
		})
	}
	if n := len(p.Attachments()); n != 0 {
		t.Errorf("%d attachments after failed Attach calls, want 0", n)
	}
}

func TestAttachMissing(t *testing.T) {
	requireRoot(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := buildStandins(t)
	driver, runtime := splitSymbols()
	omit := s.variant(t, "libcuda_omit.so.1", "-DSTANDIN_OMIT_SOME")
	p, err := Load(Options{})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	defer p.Close()
	without := func(list []string, drop ...string) []string {
		return slices.DeleteFunc(slices.Clone(list), func(s string) bool { return slices.Contains(drop, s) })
	}
	for _, tc := range []struct {
		name         string
		path         string
		wantAttached []string
		wantMissing  []string
		wantStripped bool
	}{
		// strip --strip-all keeps .dynsym, where a library's exports are.
		{"stripped library", s.stripped(t, s.libcuda, "libcuda_stripped.so.1"), driver, runtime, true},
		{"library lacking two functions", omit, without(driver, "cuLaunchKernelEx", "cuMemcpyAsync"),
			append(slices.Clone(runtime), "cuLaunchKernelEx", "cuMemcpyAsync"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := p.Attach(tc.path)
			if err != nil {
				t.Fatalf("Attach: %v", err)
			}
			if !slices.Equal(a.Attached, tc.wantAttached) {
				t.Errorf("Attached = %v, want %v", a.Attached, tc.wantAttached)
			}
			got, want := slices.Sorted(slices.Values(a.Missing)), slices.Sorted(slices.Values(tc.wantMissing))
			if !slices.Equal(got, want) {
				t.Errorf("Missing = %v, want %v", got, want)
			}
			if a.Stripped != tc.wantStripped {
				t.Errorf("Stripped = %v, want %v", a.Stripped, tc.wantStripped)
			}
			if len(a.APIs) != len(a.Attached)-2 { // the two name functions are not HostAPIs
				t.Errorf("%d APIs for %d attached symbols, want %d", len(a.APIs), len(a.Attached), len(a.Attached)-2)
			}
		})
	}
}

func TestAttachSameFileOnceAndDetach(t *testing.T) {
	requireRoot(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := buildStandins(t)
	sym := filepath.Join(s.dir, "libcuda.so")
	if err := os.Symlink(s.libcuda, sym); err != nil {
		t.Fatal(err)
	}
	hard := filepath.Join(s.dir, "libcuda-hardlink.so.1")
	if err := os.Link(s.libcuda, hard); err != nil {
		t.Fatal(err)
	}
	p, err := Load(Options{})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	defer p.Close()
	first, err := p.Attach(s.libcuda)
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	for _, path := range []string{s.libcuda, sym, hard} {
		a, err := p.Attach(path)
		if err != nil || a != first {
			t.Errorf("Attach(%s) = %p, %v; want the first Attachment %p", path, a, err, first)
		}
	}
	if _, err := p.Attach(s.libcudart); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if n := len(p.Attachments()); n != 2 {
		t.Fatalf("%d attachments, want 2", n)
	}
	// Events flow, then stop once both files are detached.
	runApp(t, s.app)
	if calls, names := drain(t, p); len(calls) != len(wantCalls) || len(names) != len(wantNames) {
		t.Fatalf("attached: %d calls and %d names, want %d and %d", len(calls), len(names), len(wantCalls), len(wantNames))
	}
	if err := p.Detach(sym); err != nil { // by another path to the same file
		t.Fatalf("Detach(%s): %v", sym, err)
	}
	if err := p.Detach(s.libcuda); err == nil || !strings.Contains(err.Error(), "not attached") {
		t.Errorf("second Detach: %v, want a \"not attached\" error", err)
	}
	runApp(t, s.app)
	calls, names := drain(t, p)
	for _, c := range calls {
		if !strings.HasPrefix(c.API.String(), "cuda") {
			t.Errorf("a driver call (%s) was seen after libcuda was detached", c.API)
		}
	}
	if len(calls) != 38 || len(names) != 0 {
		t.Errorf("libcudart alone: %d calls, %d names; want 38 and 0", len(calls), len(names))
	}
	if err := p.Detach(s.libcudart); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	runApp(t, s.app)
	if calls, names := drain(t, p); len(calls)+len(names) != 0 {
		t.Errorf("detached: %d calls, %d names; want none", len(calls), len(names))
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := p.Attach(s.libcuda); err != ErrClosed {
		t.Errorf("Attach after Close: %v, want ErrClosed", err)
	}
}
