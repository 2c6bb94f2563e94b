package translate

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// stageRank places each stage's owner type in the pipeline of doc.go: a
// type may name the types ranked below it, never one ranked above it nor
// one beside it (the same rank). The launch table's parts share a rank,
// under the launch table; the resourceBook, read by the clients and the
// spans, ranks under the other emitters.
var stageRank = map[string]int{
	"Translator":   0, // decode
	"clientTable":  1, // per-client state
	"launchTable":  2, // pairing
	"graphTable":   3, // pairing: the launch table's parts
	"windowTable":  3,
	"streamTable":  3,
	"hostTable":    3,
	"spanOut":      4, // emission
	"seriesStore":  4,
	"resourceBook": 5,
}

// stageAllows says whether stage type from may name stage type to.
func stageAllows(from, to string) bool {
	return from == to || stageRank[to] > stageRank[from]
}

// stageFiles parses the Go files of dir but its tests.
func stageFiles(dir string) ([]*ast.File, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", n, err)
		}
		files = append(files, f)
	}
	return files, nil
}

// stageViolations lists where the Go files of dir break the stage order:
// a method of a stage type that names a type of a stage above or beside
// it, or a stage type that holds one (through its fields, and the fields
// of the package's types they hold).
func stageViolations(dir string) ([]string, error) {
	files, err := stageFiles(dir)
	if err != nil {
		return nil, err
	}
	structs := map[string]*ast.StructType{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if ts, ok := n.(*ast.TypeSpec); ok {
				if st, ok := ts.Type.(*ast.StructType); ok {
					structs[ts.Name.Name] = st
				}
			}
			return true
		})
	}
	var out []string
	for owner := range stageRank {
		if st := structs[owner]; st != nil {
			for _, held := range heldStages(st, structs, map[string]bool{owner: true}) {
				if !stageAllows(owner, held) {
					out = append(out, fmt.Sprintf("%s holds a %s", owner, held))
				}
			}
		}
	}
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || len(fd.Recv.List) == 0 {
				continue
			}
			owner := typeName(fd.Recv.List[0].Type)
			if _, ok := stageRank[owner]; !ok {
				continue
			}
			for _, named := range namedStages(fd) {
				if !stageAllows(owner, named) {
					out = append(out, fmt.Sprintf("%s.%s names %s", owner, fd.Name.Name, named))
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// typeName is the name of the package-local type that expression e
// denotes, through pointers, slices, arrays, maps' values and generic
// instances ("" if none).
func typeName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.Ident:
		return t.Name
	case *ast.StarExpr:
		return typeName(t.X)
	case *ast.ArrayType:
		return typeName(t.Elt)
	case *ast.MapType:
		return typeName(t.Value)
	case *ast.IndexExpr:
		return typeName(t.X)
	case *ast.IndexListExpr:
		return typeName(t.X)
	}
	return ""
}

// heldStages lists the stage types that struct st holds, directly or
// through the fields of the package's other types (seen: types already
// followed).
func heldStages(st *ast.StructType, structs map[string]*ast.StructType, seen map[string]bool) []string {
	var held []string
	for _, fl := range st.Fields.List {
		var names []string
		ast.Inspect(fl.Type, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok {
				names = append(names, id.Name)
			}
			return true
		})
		for _, n := range names {
			if seen[n] {
				continue
			}
			seen[n] = true
			if _, ok := stageRank[n]; ok {
				held = append(held, n)
				continue
			}
			if inner := structs[n]; inner != nil {
				held = append(held, heldStages(inner, structs, seen)...)
			}
		}
	}
	return held
}

// namedStages lists the stage types that method fd names: in its
// signature and body, and as the types of the receiver's fields it
// selects (lt.graphs is a graphTable).
func namedStages(fd *ast.FuncDecl) []string {
	var named []string
	recv := fd.Recv.List[0]
	ast.Inspect(fd, func(n ast.Node) bool {
		if n == recv.Type {
			return false // the receiver's own type
		}
		if id, ok := n.(*ast.Ident); ok {
			if _, ok := stageRank[id.Name]; ok {
				named = append(named, id.Name)
			}
		}
		return true
	})
	return named
}

// TestStageOrder holds the package to the stage order of doc.go.
func TestStageOrder(t *testing.T) {
	v, err := stageViolations(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range v {
		t.Errorf("stage order: %s", s)
	}
}

// TestStageViolations checks that stageViolations finds each kind of
// break, on small packages.
func TestStageViolations(t *testing.T) {
	const types = `package p
type Options struct{ n int }
type Translator struct{ clients *clientTable; launches *launchTable }
type clientTable struct{ res *resourceBook }
type launchTable struct{ graphs *graphTable; hosts *hostTable; spans *spanOut }
type graphTable struct{ o *Options }
type hostTable struct{ spans *spanOut }
type spanOut struct{ res *resourceBook }
type resourceBook struct{}
type launch struct{ k int }
`
	tests := []struct {
		name, src string
		want      []string
	}{
		{"clean", `package p
func (lt *launchTable) onLaunch(l *launch) { lt.graphs.add(l); lt.spans.emit(l) }
func (gt *graphTable) add(l *launch) {}
func (so *spanOut) emit(l *launch) { _ = so.res }
`, nil},
		{"pairing names the client table", `package p
func (lt *launchTable) onLaunch(c *clientTable) {}
`, []string{"launchTable.onLaunch names clientTable"}},
		{"a part names its table", `package p
func (gt *graphTable) back(lt *launchTable) {}
`, []string{"graphTable.back names launchTable"}},
		{"emission names a pairing part", `package p
func (so *spanOut) emit() { var h hostTable; _ = h }
`, []string{"spanOut.emit names hostTable"}},
		{"a part holds a sibling", `package p
type graphState struct{ hosts *hostTable }
type windowTable struct{ g graphState }
`, []string{"windowTable holds a hostTable"}},
		{"emission holds an emitter beside it", `package p
type seriesStore struct{ procs map[int]*procState }
type procState struct{ out []*spanOut }
`, []string{"seriesStore holds a spanOut"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, src := range map[string]string{"types.go": types, "code.go": tc.src} {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := stageViolations(dir)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("violations %q, want %q", got, tc.want)
			}
		})
	}
}
