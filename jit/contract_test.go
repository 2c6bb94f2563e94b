package jit_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/jit"
)

// contractHeader opens docs/gpu-programs.md's table of helper argument
// bounds.
const contractHeader = "| helper | argument | bytes it touches |\n|---|---|---|\n"

// contractRows renders the ABI table's pointer arguments as the rows of
// that table: one per helper and contract, naming its arguments.
func contractRows() []string {
	var rows []string
	for _, id := range jit.Helpers() {
		sig, _ := jit.HelperSignature(id)
		var texts []string
		regs := map[string][]string{}
		for a := range sig.Args {
			text, ok := sig.Contract(a)
			if !ok {
				continue
			}
			if regs[text] == nil {
				texts = append(texts, text)
			}
			regs[text] = append(regs[text], fmt.Sprintf("r%d", a+1))
		}
		for _, text := range texts {
			r := regs[text]
			if len(r) > 1 {
				text += " each"
			}
			rows = append(rows, fmt.Sprintf("| `%s` (%d) | %s | %s |", sig.Name, id, strings.Join(r, ", "), text))
		}
	}
	return rows
}

// TestContractDocs: docs/gpu-programs.md's table of helper argument
// bounds is what the ABI table says, row for row.
func TestContractDocs(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "gpu-programs.md"))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join(contractRows(), "\n")
	_, rest, ok := strings.Cut(string(b), contractHeader)
	if !ok {
		t.Fatalf("docs/gpu-programs.md has no table opening %q; it should be:\n%s%s", contractHeader, contractHeader, want)
	}
	var got []string
	for _, line := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		got = append(got, line)
	}
	if strings.Join(got, "\n") != want {
		t.Errorf("docs/gpu-programs.md's table of helper argument bounds differs from jit/abi.go; it should be:\n%s%s", contractHeader, want)
	}
}

// TestContractCoversAccess: every argument ArgAccess describes has a
// contract in words, and no other.
func TestContractCoversAccess(t *testing.T) {
	m := &jit.Map{KeySize: 4, ValueSize: 8}
	for _, id := range jit.Helpers() {
		sig, _ := jit.HelperSignature(id)
		for a := range sig.Args {
			_, acc := sig.ArgAccess(a, 8, m)
			_, text := sig.Contract(a)
			if acc != text {
				t.Errorf("%s r%d: ArgAccess ok %v, Contract ok %v", sig.Name, a+1, acc, text)
			}
		}
	}
}
