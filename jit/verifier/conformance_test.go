package verifier_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuprobe/gpuprobe/jit/conformance"
	"github.com/gpuprobe/gpuprobe/jit/verifier"
)

// conformanceDir is the bpf_conformance data shared by the project.
const conformanceDir = "../../testdata/conformance"

func conformanceFiles(t *testing.T, sub string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(conformanceDir, sub, "*.data"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		if _, err := os.Stat(conformanceDir); errors.Is(err, os.ErrNotExist) {
			t.Fatalf("no conformance data at %s", conformanceDir)
		}
		t.Fatalf("no .data files in %s/%s", conformanceDir, sub)
	}
	return files
}

// TestConformanceAccepted checks that every program of the bpf_conformance
// suite passes the verifier, with r1 pointing to the case's memory.
func TestConformanceAccepted(t *testing.T) {
	for _, path := range conformanceFiles(t, "tests") {
		t.Run(filepath.Base(path), func(t *testing.T) {
			c, err := conformance.ParseFile(path)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			p, err := c.Program()
			if err != nil {
				t.Fatalf("assemble: %v", err)
			}
			res, err := verifier.Verify(p, verifier.Options{CtxSize: len(c.Mem), Helpers: verifier.ConformanceHelpers})
			if err != nil {
				t.Fatalf("rejected: %v", err)
			}
			if res.Steps == 0 || len(res.Funcs) == 0 {
				t.Fatalf("empty result %+v", res)
			}
		})
	}
}

// runtimeNegatives are negative cases that assemble and verify but fail at
// run time or by result (the runner rejects them, not the verifier).
var runtimeNegatives = map[string]bool{
	"incorrect_return_value_high_bits.data": true, // wrong -- result
}

// TestConformanceRejected checks that every negative case is refused by the
// parser/assembler or by the verifier (with an *Error), except the ones
// that only a run can refuse.
func TestConformanceRejected(t *testing.T) {
	for _, path := range conformanceFiles(t, "negative") {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			c, err := conformance.ParseFile(path)
			if err != nil {
				return // rejected by the parser
			}
			p, err := c.Program()
			if err != nil {
				return // rejected by the assembler or decoder
			}
			_, err = verifier.Verify(p, verifier.Options{CtxSize: len(c.Mem), Helpers: verifier.ConformanceHelpers})
			if runtimeNegatives[name] {
				if err != nil {
					t.Fatalf("expected the verifier to accept it (the result is what is wrong): %v", err)
				}
				return
			}
			var ve *verifier.Error
			if !errors.As(err, &ve) {
				t.Fatalf("accepted by the assembler and the verifier (err %v)", err)
			}
			t.Logf("%v", err)
		})
	}
}
