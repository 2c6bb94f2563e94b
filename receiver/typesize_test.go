package receiver

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// Bounds on one type of the receiver: a type past them holds
// more than one job's state and is split into parts that own it.
const (
	maxTypeFields  = 15
	maxTypeMethods = 30
)

// TestTypeSize checks every struct type of the receiver and its internal
// packages against maxTypeFields and maxTypeMethods. An embedded field and
// each name of a multi-name field count as one field; methods are those
// declared on the type. mdatagen's output (generated_*.go) is left out:
// its MetricsBuilder and TelemetryBuilder get a field per metric of
// metadata.yaml, and cannot be split into parts by us.
func TestTypeSize(t *testing.T) {
	fields := map[string]int{}
	methods := map[string]int{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") ||
			strings.HasPrefix(d.Name(), "generated_") {
			return err
		}
		if strings.HasPrefix(d.Name(), "generated_") {
			// mdatagen's: MetricsBuilder holds one field per metric of
			// metadata.yaml by its design, and `make generate` rewrites it.
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		pkg := filepath.Dir(path)
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					if ts, ok := spec.(*ast.TypeSpec); ok {
						if st, ok := ts.Type.(*ast.StructType); ok {
							fields[pkg+"."+ts.Name.Name] = countFields(st)
						}
					}
				}
			case *ast.FuncDecl:
				if name := recvName(decl); name != "" {
					methods[pkg+"."+name]++
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for typ, n := range fields {
		// mdatagen writes internal/metadata from metadata.yaml: its
		// builders hold a field per metric and are not ours to split.
		if strings.HasPrefix(typ, filepath.Join("internal", "metadata")+".") {
			continue
		}
		if n > maxTypeFields || methods[typ] > maxTypeMethods {
			t.Errorf("%s: %d fields, %d methods; at most %d and %d", typ, n, methods[typ], maxTypeFields, maxTypeMethods)
		}
	}
}

func countFields(st *ast.StructType) int {
	n := 0
	for _, f := range st.Fields.List {
		n += max(len(f.Names), 1)
	}
	return n
}

// recvName is the name of the type a method is declared on, "" for a
// function.
func recvName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return ""
	}
	typ := fn.Recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	switch x := typ.(type) {
	case *ast.IndexExpr:
		typ = x.X
	case *ast.IndexListExpr:
		typ = x.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
