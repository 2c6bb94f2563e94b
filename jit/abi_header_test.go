package jit_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/gpuprobe/gpuprobe/jit"
)

// abiConsts returns the values of abi.go's constants of type typ
// (HelperID or MapType), by name.
func abiConsts(t *testing.T, typ string) map[string]int64 {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "abi.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			if id, ok := v.Type.(*ast.Ident); !ok || id.Name != typ || len(v.Values) != 1 {
				continue
			}
			lit, ok := v.Values[0].(*ast.BasicLit)
			if !ok {
				t.Fatalf("abi.go: %s is not a literal", v.Names[0].Name)
			}
			n, err := strconv.ParseInt(lit.Value, 0, 64)
			if err != nil {
				t.Fatal(err)
			}
			out[v.Names[0].Name] = n
		}
	}
	if len(out) == 0 {
		t.Fatalf("abi.go declares no %s constants", typ)
	}
	return out
}

// headerValues returns the numbers re's second group matches in
// include/gpuprobe.h, by the first group.
func headerValues(t *testing.T, hdr []byte, re string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, m := range regexp.MustCompile(re).FindAllSubmatch(hdr, -1) {
		n, err := strconv.ParseInt(string(m[2]), 0, 64)
		if err != nil {
			t.Fatal(err)
		}
		out[string(m[1])] = n
	}
	if len(out) == 0 {
		t.Fatalf("gpuprobe.h: nothing matches %s", re)
	}
	return out
}

// sameNumbers fails unless a and b hold the same set of values.
func sameNumbers(t *testing.T, what string, abi, hdr map[string]int64) {
	t.Helper()
	inABI := map[int64]string{}
	for name, v := range abi {
		inABI[v] = name
	}
	inHdr := map[int64]string{}
	for name, v := range hdr {
		if other, dup := inHdr[v]; dup {
			t.Errorf("gpuprobe.h: %s %d declared twice (%s, %s)", what, v, other, name)
		}
		inHdr[v] = name
		if _, ok := inABI[v]; !ok {
			t.Errorf("gpuprobe.h: %s %s = %d is not in jit/abi.go", what, name, v)
		}
	}
	var missing []int64
	for v := range inABI {
		if _, ok := inHdr[v]; !ok {
			missing = append(missing, v)
		}
	}
	slices.Sort(missing)
	for _, v := range missing {
		t.Errorf("jit/abi.go: %s %s = %d is not in gpuprobe.h", what, inABI[v], v)
	}
}

// TestHeaderMatchesABI: include/gpuprobe.h, the header GPU programs are
// written against, declares exactly abi.go's helper ids and map type
// numbers, and its flag values are abi.go's.
func TestHeaderMatchesABI(t *testing.T) {
	hdr, err := os.ReadFile(filepath.Join(includeDir, "gpuprobe.h"))
	if err != nil {
		t.Fatal(err)
	}
	sameNumbers(t, "helper", abiConsts(t, "HelperID"),
		headerValues(t, hdr, `static[^;]*?\(\*(\w+)\)[^;]*?=\s*\(void \*\)(\d+);`))
	sameNumbers(t, "map type", abiConsts(t, "MapType"),
		headerValues(t, hdr, `(?m)^#define (BPF_MAP_TYPE_\w+) (\d+)`))

	if v := headerValues(t, hdr, `(?m)^#define (BPF_F_MMAPABLE) \(1U << (\d+)\)$`)["BPF_F_MMAPABLE"]; 1<<v != jit.MapFlagMmapable {
		t.Errorf("gpuprobe.h: BPF_F_MMAPABLE is 1 << %d, jit.MapFlagMmapable is %#x", v, jit.MapFlagMmapable)
	}
	if v := headerValues(t, hdr, `(?m)^#define (GPUPROBE_MEM_STORE) (\d+)$`)["GPUPROBE_MEM_STORE"]; v != jit.MemCtxStore {
		t.Errorf("gpuprobe.h: GPUPROBE_MEM_STORE is %d, jit.MemCtxStore is %d", v, jit.MemCtxStore)
	}
}
