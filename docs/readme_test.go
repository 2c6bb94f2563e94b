package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxREADMELines bounds README.md: what a reader sees first stays one
// screenful of scrolling, and the rest lives in docs/.
const maxREADMELines = 150

// readme returns README.md's text.
func readme(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestREADMELength: README.md keeps to maxREADMELines lines.
func TestREADMELength(t *testing.T) {
	if n := strings.Count(readme(t), "\n"); n > maxREADMELines {
		t.Errorf("README.md has %d lines, want at most %d: move detail into docs/", n, maxREADMELines)
	}
}

// packageTable returns the directories that the rows of README.md's
// "Packages" table link to.
func packageTable(t *testing.T) map[string]bool {
	t.Helper()
	text := readme(t)
	_, sec, ok := strings.Cut(text, "\n## Packages\n")
	if !ok {
		t.Fatal(`README.md has no "## Packages" section`)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	dirs := map[string]bool{}
	for _, line := range strings.Split(sec, "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			if !strings.HasSuffix(m[1], ".md") && !strings.Contains(m[1], "#") {
				dirs[filepath.ToSlash(filepath.Clean(m[1]))] = true
			}
		}
	}
	if len(dirs) < 10 {
		t.Fatalf("README.md's package table links %d directories, want the repository's", len(dirs))
	}
	return dirs
}

// goPackages returns the directories under root that hold non-test Go
// files, outside testdata and build outputs.
func goPackages(t *testing.T) map[string]bool {
	t.Helper()
	pkgs := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (skipDirs[d.Name()] || strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		pkgs[filepath.ToSlash(rel)] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// TestREADMEPackageTable checks README.md's package table both ways: every
// directory it links holds a Go package, and every Go package
// is in the table or under a package that is (receiver covers
// receiver/internal/translate; gpuprobe/, cmd/ and internal/ hold no
// package of their own, so each package under them is listed).
func TestREADMEPackageTable(t *testing.T) {
	table, pkgs := packageTable(t), goPackages(t)
	for dir := range table {
		if !pkgs[dir] {
			t.Errorf("README.md's package table links %s, which holds no Go package", dir)
		}
	}
	for pkg := range pkgs {
		covered := false
		for d := pkg; d != "." && !covered; d = filepath.ToSlash(filepath.Dir(d)) {
			covered = table[d] && pkgs[d]
		}
		if !covered {
			t.Errorf("README.md's package table leaves out %s (nor lists a package above it)", pkg)
		}
	}
}
