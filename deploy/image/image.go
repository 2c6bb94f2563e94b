// Package image builds gpuprobe's container image without a Docker
// daemon: one layer of the collector, the CLI, the shim and a default
// configuration on an empty base, written as a tarball in `docker save`'s
// format, which docker load, podman load, ctr images import, kind load
// image-archive and crane push accept
// (docs/kubernetes.md, "The image").
package image

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Paths inside the image.
const (
	Collector = "/usr/local/bin/otelcol-gpuprobe"
	CLI       = "/usr/local/bin/gpuprobe"
	// Shim lies beside the CLI, where `gpuprobe install-shim` finds it.
	Shim    = "/usr/local/bin/libgpuprobe.so"
	Config  = "/etc/gpuprobe/config.yaml"
	CACerts = "/etc/ssl/certs/ca-certificates.crt"
)

// User is the image's user: the shim trusts only a root collector
// (docs/security.md, "The shim's trust checks").
const User = "0:0"

// File is one file of the layer: Src on this machine, Path in the image.
type File struct {
	Src, Path string
	Mode      int64
}

// Files returns the image's files from the build outputs in bin and the
// collector configuration config; caCerts may be "" (no TLS roots).
func Files(bin, config, caCerts string) []File {
	f := []File{
		{bin + "/otelcol-gpuprobe", Collector, 0o755},
		{bin + "/gpuprobe", CLI, 0o755},
		{bin + "/libgpuprobe.so", Shim, 0o755},
		{config, Config, 0o644},
	}
	if caCerts != "" {
		f = append(f, File{caCerts, CACerts, 0o644})
	}
	return f
}

// epoch is every timestamp of the image, so that the same inputs give the
// same digest.
var epoch = time.Unix(0, 0).UTC()

// Build returns the image of files, with the collector as entrypoint.
func Build(files []File) (v1.Image, error) {
	layerTar, err := layerTar(files)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithCompressedCaching)
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Created = v1.Time{Time: epoch}
	cf.Config = v1.Config{
		Entrypoint:   []string{Collector},
		Cmd:          []string{"--config", Config},
		User:         User,
		WorkingDir:   "/",
		Env:          []string{"PATH=/usr/local/bin"},
		ExposedPorts: map[string]struct{}{"9464/tcp": {}, "8888/tcp": {}, "13133/tcp": {}},
		Labels:       map[string]string{"org.opencontainers.image.title": "gpuprobe"},
	}
	return mutate.ConfigFile(img, cf)
}

// layerTar writes the files and their parent directories as a tar,
// owned by root, in path order.
func layerTar(files []File) ([]byte, error) {
	dirs := map[string]bool{"tmp": true}
	for _, f := range files {
		for d := path.Dir(f.Path[1:]); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	var names []string
	for d := range dirs {
		names = append(names, d)
	}
	slices.Sort(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range names {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	files = slices.Clone(files)
	slices.SortFunc(files, func(a, b File) int { return cmpString(a.Path, b.Path) })
	for _, f := range files {
		data, err := os.ReadFile(f.Src)
		if err != nil {
			return nil, fmt.Errorf("image: %s: %w", f.Path, err)
		}
		h := &tar.Header{Typeflag: tar.TypeReg, Name: f.Path[1:], Mode: f.Mode, Size: int64(len(data)), ModTime: epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Write writes img as a `docker save` tarball at p under the reference ref
// (e.g. ghcr.io/gpuprobe/gpuprobe:0.1.0-dev).
func Write(p, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image: reference %q: %w", ref, err)
	}
	return tarball.WriteToFile(p, tag, img)
}
