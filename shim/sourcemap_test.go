package shim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSourceMapListsEveryFile checks that the layout comment at the top of
// src/gp.h names every C file of src/.
func TestSourceMapListsEveryFile(t *testing.T) {
	b, err := os.ReadFile("src/gp.h")
	if err != nil {
		t.Fatal(err)
	}
	head, _, _ := strings.Cut(string(b), "*/")
	files, err := filepath.Glob("src/*.c")
	if err != nil || len(files) == 0 {
		t.Fatalf("no C sources: %v", err)
	}
	for _, f := range files {
		if !strings.Contains(head, " *   "+filepath.Base(f)+" ") {
			t.Errorf("src/gp.h: the source map does not list %s", filepath.Base(f))
		}
	}
}
