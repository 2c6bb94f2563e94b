package ptx

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// PtxasPath finds ptxas: $PTXAS, then PATH, then /usr/local/cuda/bin.
func PtxasPath() (string, error) {
	if p := os.Getenv("PTXAS"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("ptxas"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/local/cuda/bin/ptxas"); err == nil {
		return "/usr/local/cuda/bin/ptxas", nil
	}
	return "", errors.New("ptxas not found (set PTXAS, or install nvidia-cuda-toolkit)")
}

// Assemble runs ptxas -arch=arch on module and returns the cubin. The error
// carries ptxas's messages.
func Assemble(ctx context.Context, module, arch string) ([]byte, error) {
	bin, err := PtxasPath()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "gpuprobe-ptxas-")
	if err != nil {
		return nil, fmt.Errorf("ptxas: temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	in, out := filepath.Join(dir, "m.ptx"), filepath.Join(dir, "m.cubin")
	if err := os.WriteFile(in, []byte(module), 0o600); err != nil {
		return nil, fmt.Errorf("ptxas: write module: %w", err)
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "-arch="+arch, "-o", out, in)
	cmd.Stderr, cmd.Stdout = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("ptxas -arch=%s: %w: %s", arch, err, bytes.TrimSpace(stderr.Bytes()))
	}
	cubin, err := os.ReadFile(out)
	if err != nil {
		return nil, fmt.Errorf("ptxas: read cubin: %w", err)
	}
	return cubin, nil
}
