package verifier

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/bpfasm"
)

const conformanceDir = "../../testdata/conformance"

// sections splits a bpf_conformance .data file into its "-- name" sections.
func sections(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	cur := ""
	for _, line := range strings.Split(string(b), "\n") {
		if name, ok := strings.CutPrefix(line, "-- "); ok {
			cur = strings.TrimSpace(name)
			out[cur] += ""
			continue
		}
		if cur != "" {
			out[cur] += line + "\n"
		}
	}
	return out
}

func dataFiles(t *testing.T, sub string) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(conformanceDir, sub, "*.data"))
	if len(files) == 0 {
		t.Fatalf("no conformance data in %s/%s", conformanceDir, sub)
	}
	return files
}

// TestConformanceFolding checks the verifier's constant folding and branch
// pruning against the suite: wherever the analysis finds r0 to be a single
// value at exit, it must be the expected result.
func TestConformanceFolding(t *testing.T) {
	folded := 0
	files := dataFiles(t, "tests")
	for _, path := range files {
		sec := sections(t, path)
		src, ok := sec["asm"]
		if !ok {
			continue
		}
		insns, err := bpfasm.Assemble(src)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		mem, err := bpfasm.ParseHex(sec["mem"])
		if err != nil {
			t.Fatalf("%s: mem: %v", path, err)
		}
		want, err := strconv.ParseUint(strings.TrimSpace(sec["result"]), 0, 64)
		if err != nil {
			t.Fatalf("%s: result: %v", path, err)
		}
		v, err := verify(&jit.Program{Insns: insns}, Options{CtxSize: len(mem), Helpers: ConformanceHelpers})
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if !v.exitSeen {
			t.Fatalf("%s: no exit reached", path)
		}
		if c, ok := v.exitR0.isConst(); ok {
			folded++
			if c != want {
				t.Errorf("%s: verifier folds r0 to %#x, the suite expects %#x", filepath.Base(path), c, want)
			}
		} else if want > v.exitR0.umax || want < v.exitR0.umin || int64(want) > v.exitR0.smax || int64(want) < v.exitR0.smin {
			t.Errorf("%s: expected r0 %#x is outside the verifier's range %+v", filepath.Base(path), want, v.exitR0)
		}
	}
	t.Logf("r0 folded to a constant in %d of %d programs", folded, len(files))
	if folded < len(files)/2 {
		t.Errorf("only %d programs folded; the constant evaluator is too weak", folded)
	}
}

// TestNegativeRawDecodedByCilium rejects the reserved-field cases of the
// negative suite on its own: the raw bytes go through cilium/ebpf's
// decoder, which does not check reserved fields, then the verifier.
func TestNegativeRawDecodedByCilium(t *testing.T) {
	n := 0
	for _, path := range dataFiles(t, "negative") {
		raw, ok := sections(t, path)["raw"]
		if !ok {
			continue
		}
		n++
		b, err := bpfasm.ParseHex(raw)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		insns, err := asm.AppendInstructions(nil, bytes.NewReader(b), binary.LittleEndian, "linux")
		if err != nil {
			continue // cilium refuses it already
		}
		_, err = Verify(&jit.Program{Insns: insns}, Options{})
		var ve *Error
		if !errors.As(err, &ve) {
			t.Errorf("%s: accepted", filepath.Base(path))
			continue
		}
		t.Logf("%s: %v", filepath.Base(path), err)
	}
	if n == 0 {
		t.Fatal("no -- raw cases found")
	}
}
