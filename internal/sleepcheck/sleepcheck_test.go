package sleepcheck

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// allowList is the file that lists, per test function, the sleeps that
// do not order events.
const allowList = "testdata/sleep-allowlist.txt"

// site is one function of a test file and the sleeps it holds.
type site struct {
	file string // slash-separated, from the repository root
	fn   string // enclosing top-level function: "F" or "T.M"
}

func (s site) String() string { return s.file + " " + s.fn }

// entry is one line of the allow-list.
type entry struct {
	line   int
	n      int    // how many sleeps the function holds
	reason string // why they do not order events
}

// skipDir reports whether the walk leaves out directory name: tool
// caches, generated builds, and test data (not Go code of the project).
func skipDir(name string) bool {
	return name != "." && strings.HasPrefix(name, ".") ||
		name == "testdata" || name == "vendor" || name == "build" || name == "node_modules"
}

// repoRoot finds the directory of the main module's go.mod above the
// package directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for ; ; dir = filepath.Dir(dir) {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			strings.Contains(string(b), "module github.com/gpuprobe/gpuprobe\n") {
			return dir
		}
		if dir == filepath.Dir(dir) {
			t.Fatal("no go.mod of github.com/gpuprobe/gpuprobe above the package")
		}
	}
}

// sleeps parses the Go file at path and counts, per enclosing top-level
// function, the uses of time.Sleep (called or taken as a value, under
// whatever name the file imports package time).
func sleeps(path, rel string) (map[site]int, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	timeName := ""
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "time" {
			timeName = "time"
			if imp.Name != nil {
				timeName = imp.Name.Name
			}
		}
	}
	got := map[site]int{}
	if timeName == "" || timeName == "_" {
		return got, nil
	}
	for _, decl := range f.Decls {
		name := declName(decl)
		ast.Inspect(decl, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Sleep" {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == timeName {
				got[site{rel, name}]++
			}
			return true
		})
	}
	return got, nil
}

// declName names a top-level declaration: a function "F", a method
// "T.M", anything else by its first name.
func declName(d ast.Decl) string {
	switch d := d.(type) {
	case *ast.FuncDecl:
		if d.Recv == nil || len(d.Recv.List) == 0 {
			return d.Name.Name
		}
		typ := d.Recv.List[0].Type
		for {
			switch e := typ.(type) {
			case *ast.StarExpr:
				typ = e.X
				continue
			case *ast.IndexExpr:
				typ = e.X
				continue
			case *ast.IndexListExpr:
				typ = e.X
				continue
			}
			break
		}
		if id, ok := typ.(*ast.Ident); ok {
			return id.Name + "." + d.Name.Name
		}
		return d.Name.Name
	case *ast.GenDecl:
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.ValueSpec:
				return s.Names[0].Name
			case *ast.TypeSpec:
				return s.Name.Name
			}
		}
	}
	return "?"
}

// readAllowList parses the allow-list: "<file> <function> <count> <reason>"
// a line, '#' comments and blank lines left out.
func readAllowList(path string) (map[site]entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[site]entry{}
	sc := bufio.NewScanner(f)
	for ln := 1; sc.Scan(); ln++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) < 4 {
			return nil, fmt.Errorf("%s:%d: want <file> <function> <count> <reason>, got %q", path, ln, text)
		}
		n, err := strconv.Atoi(fields[2])
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s:%d: count %q: want a number ≥ 1", path, ln, fields[2])
		}
		s := site{fields[0], fields[1]}
		if prev, dup := out[s]; dup {
			return nil, fmt.Errorf("%s:%d: %s listed again (first on line %d)", path, ln, s, prev.line)
		}
		out[s] = entry{line: ln, n: n, reason: strings.Join(fields[3:], " ")}
	}
	return out, sc.Err()
}

// TestSleepsAllowListed: every time.Sleep in a _test.go file of the
// repository sits in a function of the allow-list, which says why it does
// not order events (a test that waits for something to happen polls a
// condition or waits on a channel); every entry still matches its count.
func TestSleepsAllowListed(t *testing.T) {
	root := repoRoot(t)
	allowed, err := readAllowList(allowList)
	if err != nil {
		t.Fatal(err)
	}
	found := map[site]int{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && skipDir(d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		got, err := sleeps(path, filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		for s, n := range got {
			found[s] += n
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	for s, n := range found {
		e, ok := allowed[s]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("%s: %d time.Sleep not in %s: poll a condition or wait on a channel, or list it with its reason", s, n, allowList))
		case e.n != n:
			bad = append(bad, fmt.Sprintf("%s: %d time.Sleep, %s:%d lists %d", s, n, allowList, e.line, e.n))
		}
	}
	for s, e := range allowed {
		if found[s] == 0 {
			bad = append(bad, fmt.Sprintf("%s:%d: %s holds no time.Sleep any more: remove the entry", allowList, e.line, s))
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Error(b)
	}
}

// TestSleepsFound: the scan finds a sleep under a renamed import, in a
// method and in a closure, and none in a file that only mentions it.
func TestSleepsFound(t *testing.T) {
	const src = `package p

import (
	"testing"
	tm "time"
)

type suite struct{}

func (s *suite) run() { tm.Sleep(1) }

func TestX(t *testing.T) {
	f := tm.Sleep
	go func() { f(1); tm.Sleep(2) }()
	_ = "time.Sleep"
}
`
	dir := t.TempDir()
	path := filepath.Join(dir, "x_test.go")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := sleeps(path, "x_test.go")
	if err != nil {
		t.Fatal(err)
	}
	want := map[site]int{{"x_test.go", "suite.run"}: 1, {"x_test.go", "TestX"}: 2}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("sleeps %v, want %v", got, want)
	}
}
