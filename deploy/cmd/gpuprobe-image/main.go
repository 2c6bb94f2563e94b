// Command gpuprobe-image writes gpuprobe's container image as a tarball,
// without a Docker daemon (make image; docs/kubernetes.md, "The image").
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/gpuprobe/gpuprobe/deploy/image"
)

func main() {
	bin := flag.String("bin", "bin", "directory of otelcol-gpuprobe, gpuprobe (static) and libgpuprobe.so")
	config := flag.String("config", "deploy/kubernetes/config.yaml", "the collector configuration to put at "+image.Config)
	ca := flag.String("ca-certs", "/etc/ssl/certs/ca-certificates.crt", "TLS roots to put at "+image.CACerts+` ("" for none)`)
	ref := flag.String("tag", "ghcr.io/gpuprobe/gpuprobe:0.1.0-dev", "the image's reference in the tarball")
	out := flag.String("o", "build/gpuprobe-image.tar", "output tarball")
	flag.Parse()
	img, err := image.Build(image.Files(*bin, *config, *ca))
	if err == nil {
		err = image.Write(*out, *ref, img)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpuprobe-image:", err)
		os.Exit(1)
	}
	d, _ := img.Digest()
	fmt.Printf("%s: %s %s\n", *out, *ref, d)
}
