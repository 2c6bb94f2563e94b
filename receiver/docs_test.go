package receiver

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// telemetryDoc is the reference of everything the receiver emits.
const telemetryDoc = "../docs/telemetry.md"

// emitters are the packages whose string literals name what the receiver
// emits (metric, span and attribute names).
var emitters = []string{".", "internal/translate", "internal/progmaps", "internal/hostcall", "internal/procres"}

// TestDocsDocumentEveryMetric checks that docs/telemetry.md names every
// metric the receiver emits: those of metadata.yaml and the self-metrics
// and metrics built in code (gpu.*, gpuprobe.receiver.*).
func TestDocsDocumentEveryMetric(t *testing.T) {
	doc := documentedNames(t)
	names := metadataNames(t, "metrics")
	for _, n := range emittedNames(t) {
		if strings.HasPrefix(n, "gpu.") || strings.HasPrefix(n, "gpuprobe.receiver.") {
			names = append(names, n)
		}
	}
	if len(names) < 30 {
		t.Fatalf("found only %d metric names: %v", len(names), names)
	}
	for _, n := range dedup(names) {
		if !doc[n] {
			t.Errorf("%s: metric %s is not documented", telemetryDoc, n)
		}
	}
}

// TestDocsDocumentEveryAttribute checks that docs/telemetry.md names every
// attribute (and span name) the receiver emits: those of metadata.yaml
// (resource attributes too), the keys set with Put* on attribute maps, and
// the dotted names in the emitting packages' code.
func TestDocsDocumentEveryAttribute(t *testing.T) {
	doc := documentedNames(t)
	names := append(metadataNames(t, "attributes"), metadataNames(t, "resource_attributes")...)
	for _, n := range emittedNames(t) {
		if !strings.HasPrefix(n, "gpu.") && !strings.HasPrefix(n, "gpuprobe.receiver.") {
			names = append(names, n)
		}
	}
	if len(names) < 50 {
		t.Fatalf("found only %d attribute names: %v", len(names), names)
	}
	for _, n := range dedup(names) {
		if !doc[n] {
			t.Errorf("%s: attribute or span name %s is not documented", telemetryDoc, n)
		}
	}
}

// TestNamesTableCoversEveryName checks that docs/names.md, which says
// where each name comes from, has a row for every metric, attribute and
// span name the receiver emits or metadata.yaml declares: a name in a
// row's first column, not one the text mentions (a rename's old name,
// "were `key`, `index`" must not pass for a row).
func TestNamesTableCoversEveryName(t *testing.T) {
	doc := map[string]bool{}
	for _, r := range namesTable(t) {
		for _, n := range r.names {
			doc[n] = true
		}
	}
	names := append(metadataNames(t, "attributes"), metadataNames(t, "resource_attributes")...)
	names = append(names, metadataNames(t, "metrics")...)
	names = append(names, emittedNames(t)...)
	for _, n := range dedup(names) {
		if !doc[n] {
			t.Errorf("%s: %s has no row", namesDoc, n)
		}
	}
}

// TestNamesTableHasNoStaleRows checks the other way: every name in the
// first column of docs/names.md's tables is one the receiver emits or
// metadata.yaml declares, so a row left behind by a rename (the bare
// key and index of user maps, say) fails instead of documenting a name
// that is gone. Templates are skipped (`gpuprobe.map.<map>.<field>`,
// `….by_lane`) or checked by their stem (`gpuprobe.map.index.N`), and so
// are the span-name table's examples of CUDA symbols (no dot).
func TestNamesTableHasNoStaleRows(t *testing.T) {
	known := map[string]bool{}
	for _, section := range []string{"attributes", "resource_attributes", "metrics"} {
		for _, n := range metadataNames(t, section) {
			known[n] = true
		}
	}
	for _, n := range emittedNames(t) {
		known[n] = true
	}
	rows := namesTable(t)
	if len(rows) < 40 {
		t.Fatalf("%s: only %d table rows", namesDoc, len(rows))
	}
	for _, r := range rows {
		for _, n := range r.names {
			switch {
			case strings.ContainsAny(n, "<…"), r.section == "Span names" && !strings.Contains(n, "."):
			case !known[strings.TrimSuffix(n, ".N")]:
				t.Errorf("%s: %s row %q: %s is neither emitted nor in metadata.yaml", namesDoc, r.section, r.cell, n)
			}
		}
	}
}

// namesRow is a table row of docs/names.md: its section, its first cell
// and the names written in backquotes there, brace lists expanded.
type namesRow struct {
	section, cell string
	names         []string
}

// namesTable returns the rows of docs/names.md's tables (header and rule
// lines left out).
func namesTable(t *testing.T) []namesRow {
	t.Helper()
	b, err := os.ReadFile(namesDoc)
	if err != nil {
		t.Fatal(err)
	}
	var out []namesRow
	section := ""
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "## ") {
			section = strings.TrimPrefix(line, "## ")
			continue
		}
		cells := strings.Split(line, "|")
		if !strings.HasPrefix(line, "| ") || len(cells) < 3 || strings.HasPrefix(cells[1], "---") || strings.TrimSpace(cells[1]) == "name" {
			continue
		}
		r := namesRow{section: section, cell: strings.TrimSpace(cells[1])}
		parts := strings.Split(cells[1], "`")
		for i := 1; i < len(parts); i += 2 {
			r.names = append(r.names, expandBraces(parts[i])...)
		}
		out = append(out, r)
	}
	return out
}

// namesDoc says where each name comes from (semconv, OBI, ours).
const namesDoc = "../docs/names.md"

// dottedName matches the names the receiver gives metrics, spans and
// attributes ("cuda.launch.host_wait").
var dottedName = regexp.MustCompile(`^(cuda|gpu|gpuprobe|process|thread|service|code)(\.[a-z0-9_]+)+$`)

// emittedNames lists, from the non-test Go files of the emitting packages,
// the string literals that look like telemetry names and the literal keys
// passed to Put* methods (attributes without a dot, such as "key").
func emittedNames(t *testing.T) []string {
	t.Helper()
	var out []string
	fset := token.NewFileSet()
	for _, dir := range emitters {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.BasicLit:
					if s, ok := stringLit(n); ok && dottedName.MatchString(s) {
						out = append(out, s)
					}
				case *ast.CallExpr:
					sel, ok := n.Fun.(*ast.SelectorExpr)
					if !ok || !strings.HasPrefix(sel.Sel.Name, "Put") || len(n.Args) == 0 {
						return true
					}
					if lit, ok := n.Args[0].(*ast.BasicLit); ok {
						if s, ok := stringLit(lit); ok {
							out = append(out, s)
						}
					}
				}
				return true
			})
		}
	}
	return dedup(out)
}

func stringLit(l *ast.BasicLit) (string, bool) {
	if l.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(l.Value)
	return s, err == nil
}

// metadataNames lists the keys of a top-level section of metadata.yaml
// ("metrics", "attributes"): the lines indented by two spaces below it.
func metadataNames(t *testing.T, section string) []string {
	t.Helper()
	b, err := os.ReadFile("metadata.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case line == section+":":
			in = true
		case line != "" && line[0] != ' ' && line[0] != '#':
			in = false
		case in && strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "   ") && strings.HasSuffix(line, ":"):
			out = append(out, strings.TrimSuffix(strings.TrimSpace(line), ":"))
		}
	}
	if len(out) == 0 {
		t.Fatalf("metadata.yaml: no %s", section)
	}
	return out
}

// documentedNames returns the names written in backquotes in the telemetry
// reference, with brace lists expanded (`cuda.grid.{x,y,z}`).
func documentedNames(t *testing.T) map[string]bool {
	t.Helper()
	return namesIn(t, telemetryDoc)
}

// namesIn returns the names written in backquotes in the doc at path,
// with brace lists expanded.
func namesIn(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := map[string]bool{}
	parts := strings.Split(string(b), "`")
	for i := 1; i < len(parts); i += 2 {
		name, _, _ := strings.Cut(parts[i], " ") // `cuda.launch.probed = false`
		name, _, _ = strings.Cut(name, "=")
		for _, n := range expandBraces(name) {
			doc[n] = true
		}
	}
	return doc
}

// expandBraces expands one brace list: "a.{x,y}" → "a.x", "a.y".
func expandBraces(s string) []string {
	i, j := strings.Index(s, "{"), strings.Index(s, "}")
	if i < 0 || j < i {
		return []string{s}
	}
	var out []string
	for _, alt := range strings.Split(s[i+1:j], ",") {
		out = append(out, s[:i]+alt+s[j+1:])
	}
	return out
}

func dedup(s []string) []string {
	sort.Strings(s)
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}
