package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestDocsDocumentEveryKey checks that every configuration key has a row
// in the configuration reference, docs/configuration.md.
// A row may name a key in full (`sampling::one_in`) or after a sibling of
// the same section (`agent::allowed_uids` / `allowed_gids`,
// `programs[i]::path`, `::attach`).
func TestDocsDocumentEveryKey(t *testing.T) {
	keys := configKeys(reflect.TypeOf(Config{}), "")
	if len(keys) < 30 {
		t.Fatalf("found only %d keys: %v", len(keys), keys)
	}
	for _, doc := range []string{"../docs/configuration.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		var rows []string
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "| `") {
				rows = append(rows, strings.SplitN(line[1:], "|", 2)[0])
			}
		}
		for _, k := range keys {
			if !documented(rows, k) {
				t.Errorf("%s: no configuration table row for %s", doc, k)
			}
		}
	}
}

// configKeys lists the leaf keys of t ("programs[i]::path").
func configKeys(t reflect.Type, prefix string) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := f.Tag.Get("mapstructure")
		if name == "" {
			continue
		}
		ft := f.Type
		if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct {
			out = append(out, configKeys(ft.Elem(), prefix+name+"[i]::")...)
			continue
		}
		if ft.Kind() == reflect.Struct && ft.PkgPath() == t.PkgPath() {
			out = append(out, configKeys(ft, prefix+name+"::")...)
			continue
		}
		out = append(out, prefix+name)
	}
	return out
}

// documented reports whether a row names key in full or after a sibling.
func documented(rows []string, key string) bool {
	i := strings.LastIndex(key, "::")
	for _, r := range rows {
		if strings.Contains(r, "`"+key+"`") {
			return true
		}
		if i < 0 {
			continue
		}
		parent, leaf := key[:i+2], key[i+2:]
		if strings.Contains(r, "`"+parent) &&
			(strings.Contains(r, "`"+leaf+"`") || strings.Contains(r, "`::"+leaf+"`")) {
			return true
		}
	}
	return false
}
