package inject

import (
	"fmt"
	"os"
	"testing"

	"github.com/gpuprobe/gpuprobe/internal/bpftest"
)

// TestMain builds testdata/bpf's objects where they are missing or stale,
// so the tests run on a clean checkout without make.
func TestMain(m *testing.M) {
	if err := bpftest.BuildTestdata(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}
