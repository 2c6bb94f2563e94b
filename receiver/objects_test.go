package receiver

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestObjectsParsedOnce checks by structure that each object of programs[]
// is parsed once at start: the receiver calls progmaps.ReadObjects once
// (which reads, checks and parses each object, TestReadObjects) and hands
// the objects on; no package on the start route reads an object itself.
func TestObjectsParsedOnce(t *testing.T) {
	parsers := map[string]bool{
		"ebpf.LoadCollectionSpec": true, "ebpf.LoadCollectionSpecFromReader": true,
		"jit.LoadELF": true, "jit.LoadELFBytes": true, "jit.LoadELFReader": true, "jit.ParseObject": true,
	}
	allowed := map[string]string{ // call → the one file that may make it
		"jit.ParseObject": filepath.Join("internal", "progmaps", "objects.go"),
	}
	calls := map[string][]string{} // call → files
	for _, dir := range []string{".", filepath.Join("internal", "progmaps"), filepath.Join("..", "gpuprobe", "hostprobe", "userprog"), filepath.Join("..", "gpuprobe", "patcher")} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			n, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(n, func(n ast.Node) bool {
				if s, ok := n.(*ast.SelectorExpr); ok {
					if id, ok := s.X.(*ast.Ident); ok {
						name := id.Name + "." + s.Sel.Name
						calls[name] = append(calls[name], f)
					}
				}
				return true
			})
		}
	}
	for name, files := range calls {
		if !parsers[name] {
			continue
		}
		for _, f := range files {
			if allowed[name] != f {
				t.Errorf("%s: %s parses an object of programs[] again; use the progmaps.ReadObjects result", f, name)
			}
		}
	}
	if got := calls["progmaps.ReadObjects"]; len(got) != 1 || got[0] != "receiver.go" {
		t.Errorf("progmaps.ReadObjects referenced from %v, want once, from receiver.go", got)
	}
	if len(calls["jit.ParseObject"]) != 1 {
		t.Errorf("jit.ParseObject referenced from %v, want once", calls["jit.ParseObject"])
	}
}
