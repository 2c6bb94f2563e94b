//go:build !cgo

package main

import (
	"fmt"
	"os"
)

// main refuses to run: the checks drive the GPU through internal/cuda,
// which loads libcuda with cgo, so a build without cgo (a cross-compile
// such as GOARCH=arm64 with CGO_ENABLED=0) has nothing to run.
func main() {
	fmt.Fprintln(os.Stderr, "gpuprobe-gpucheck: built without cgo; rebuild with CGO_ENABLED=1 on the target architecture")
	os.Exit(2)
}
