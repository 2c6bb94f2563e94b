//go:build gpu

package cuda

import (
	"errors"
	"strings"
	"testing"
)

// TestDevice needs a GPU: it is built with -tags gpu and run by make gpu-test.
func TestDevice(t *testing.T) {
	n, err := DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no CUDA device: this test runs on the GPU machine (make gpu-test)")
	}
	d, err := GetDevice(0)
	if err != nil {
		t.Fatal(err)
	}
	arch, err := d.Arch()
	if err != nil || !strings.HasPrefix(arch, "sm_") {
		t.Fatalf("Arch() = %q, %v", arch, err)
	}
	ctx, err := d.PrimaryContext()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Release()
	p, err := ctx.MemAlloc(64)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.MemFree(p)
	in := []byte("gpuprobe round trip through device memory, 64 bytes long ......")
	if err := ctx.MemcpyHtoD(p, in); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, len(in))
	if err := ctx.MemcpyDtoH(out, p); err != nil {
		t.Fatal(err)
	}
	if string(out) != string(in) {
		t.Fatalf("round trip gave %q", out)
	}
	// A broken module fails with the JIT log attached.
	_, err = ctx.LoadModule([]byte(".version 7.8\n.target sm_90\n.address_size 64\n.entry k() { bogus; }\n"))
	var ce *Error
	if !errors.As(err, &ce) || ce.Log == "" {
		t.Fatalf("LoadModule(bad PTX) = %v, want a *cuda.Error with a JIT log", err)
	}
}
