package image

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// entry is one file of the image's filesystem as read back.
type entry struct {
	typ  byte
	mode int64
	uid  int
	data []byte
}

// readBack opens the tarball at p as a runtime would and returns its
// config and its filesystem: the image tagged ref, or with ref "" the
// tarball's only image.
func readBack(t *testing.T, p, ref string) (*v1.ConfigFile, map[string]entry) {
	t.Helper()
	var tag *name.Tag
	if ref != "" {
		tg, err := name.NewTag(ref)
		if err != nil {
			t.Fatal(err)
		}
		tag = &tg
	}
	img, err := tarball.ImageFromPath(p, tag)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v; want 1", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	fs := map[string]entry{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		fs["/"+filepath.Clean(h.Name)] = entry{h.Typeflag, h.Mode, h.Uid, data}
	}
	return cf, fs
}

// checkImage checks what every gpuprobe image must hold.
func checkImage(t *testing.T, cf *v1.ConfigFile, fs map[string]entry) {
	t.Helper()
	if !slices.Equal(cf.Config.Entrypoint, []string{Collector}) || !slices.Equal(cf.Config.Cmd, []string{"--config", Config}) {
		t.Errorf("entrypoint %q cmd %q", cf.Config.Entrypoint, cf.Config.Cmd)
	}
	if cf.Config.User != User || cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("user %q, platform %s/%s", cf.Config.User, cf.OS, cf.Architecture)
	}
	want := map[string]int64{Collector: 0o755, CLI: 0o755, Shim: 0o755, Config: 0o644,
		"/usr": 0o755, "/usr/local": 0o755, "/usr/local/bin": 0o755, "/etc": 0o755, "/etc/gpuprobe": 0o755, "/tmp": 0o1777}
	for p, mode := range want {
		e, ok := fs[p]
		if !ok {
			t.Errorf("%s: missing", p)
			continue
		}
		if e.mode != mode || e.uid != 0 {
			t.Errorf("%s: mode %o uid %d, want %o, root", p, e.mode, e.uid, mode)
		}
	}
	for p, e := range fs {
		if e.typ != tar.TypeReg && e.typ != tar.TypeDir {
			t.Errorf("%s: type %c: only files and directories expected", p, e.typ)
		}
		if e.mode&0o002 != 0 && p != "/tmp" {
			t.Errorf("%s: world-writable (%o)", p, e.mode)
		}
	}
}

func TestBuildWritesWhatItIsGiven(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"otelcol-gpuprobe", "gpuprobe", "libgpuprobe.so", "config.yaml"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("content of "+f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	img, err := Build(Files(dir, filepath.Join(dir, "config.yaml"), ""))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "image.tar")
	if err := Write(p, "gpuprobe:test", img); err != nil {
		t.Fatal(err)
	}
	cf, fs := readBack(t, p, "gpuprobe:test")
	checkImage(t, cf, fs)
	// As TestBuiltImage reads it, whatever the tag.
	cf, fs = readBack(t, p, "")
	checkImage(t, cf, fs)
	if got := string(fs[Shim].data); got != "content of libgpuprobe.so" {
		t.Errorf("%s holds %q", Shim, got)
	}
	if _, ok := fs[CACerts]; ok {
		t.Errorf("%s present without ca-certs", CACerts)
	}
	// The same inputs give the same image.
	img2, _ := Build(Files(dir, filepath.Join(dir, "config.yaml"), ""))
	d1, _ := img.Digest()
	d2, _ := img2.Digest()
	if d1 != d2 {
		t.Errorf("digests differ: %s, %s", d1, d2)
	}
}

func TestBuildMissingFile(t *testing.T) {
	if _, err := Build(Files(t.TempDir(), "/nonexistent/config.yaml", "")); err == nil {
		t.Error("Build succeeded without its files")
	}
}

// TestBuiltImage checks the image make image wrote (GPUPROBE_IMAGE, set by
// make deploy-check): the binaries run in an image without a libc.
func TestBuiltImage(t *testing.T) {
	p := os.Getenv("GPUPROBE_IMAGE")
	if p == "" {
		t.Skip("GPUPROBE_IMAGE is not set (make deploy-check sets it)")
	}
	// Whatever IMAGE_TAG make image was given.
	cf, fs := readBack(t, p, "")
	checkImage(t, cf, fs)
	for _, p := range []string{Collector, CLI} {
		f, err := elf.NewFile(bytes.NewReader(fs[p].data))
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if f.Type != elf.ET_EXEC || slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP }) {
			t.Errorf("%s: not a static executable (the image has no libc)", p)
		}
	}
	if f, err := elf.NewFile(bytes.NewReader(fs[Shim].data)); err != nil || f.Type != elf.ET_DYN {
		t.Errorf("%s: not a shared object (%v)", Shim, err)
	}
	if len(fs[CACerts].data) == 0 {
		t.Errorf("%s: missing or empty", CACerts)
	}
	want, err := os.ReadFile("../kubernetes/config.yaml")
	if err != nil || !bytes.Equal(fs[Config].data, want) {
		t.Errorf("%s differs from deploy/kubernetes/config.yaml (%v)", Config, err)
	}
}
