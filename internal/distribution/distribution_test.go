// Package distribution holds no Go code, only the tests that keep the two
// collector distributions one configuration surface: the lean manifest
// (builder-config-lean.yaml) is a subset of the full one
// (builder-config.yaml) at the same versions, and every configuration that
// `make run`, the adversarial suite and the load test start the lean
// collector with uses only its components.
package distribution

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"

	"github.com/gpuprobe/gpuprobe/e2e/adversarial"
	"github.com/gpuprobe/gpuprobe/receiver"
)

const (
	fullManifest = "builder-config.yaml"
	leanManifest = "builder-config-lean.yaml"
)

// kinds are the component sections of a manifest, which are also the
// sections of a collector configuration.
var kinds = []string{"receivers", "processors", "exporters", "extensions", "connectors"}

// types maps a component module (the last element of its import path) to
// the types it registers, aliases included; TestTypesMatchBinaries checks
// it against the built distributions.
var types = map[string][]string{
	"receiver":                   {receiver.NewFactory().Type().String()},
	"otlpreceiver":               {"otlp"},
	"otlpexporter":               {"otlp_grpc", "otlp"},
	"otlphttpexporter":           {"otlp_http", "otlphttp"},
	"debugexporter":              {"debug"},
	"fileexporter":               {"file"},
	"prometheusexporter":         {"prometheus"},
	"batchprocessor":             {"batch"},
	"memorylimiterprocessor":     {"memory_limiter"},
	"resourcedetectionprocessor": {"resource_detection"},
	"k8sattributesprocessor":     {"k8s_attributes"},
	"healthcheckextension":       {"health_check"},
	"pprofextension":             {"pprof"},
}

// heavy are modules the lean distribution leaves out: they pull in the
// cloud SDKs and the Kubernetes client.
var heavy = []string{"resourcedetectionprocessor", "k8sattributesprocessor"}

// component is one entry of a manifest's component section.
type component struct {
	module, version, imp, name string
}

// importPath is the Go package the distribution imports for c.
func (c component) importPath() string {
	if c.imp != "" {
		return c.imp
	}
	return c.module
}

// manifest is what the tests read of an ocb manifest.
type manifest struct {
	raw        map[string]any
	components map[string][]component // by kind
}

// repoPath is rel under the repository root.
func repoPath(rel string) string { return filepath.Join("..", "..", rel) }

func loadManifest(t *testing.T, name string) manifest {
	t.Helper()
	conf, err := confmaptest.LoadConf(repoPath(name))
	if err != nil {
		t.Fatal(err)
	}
	m := manifest{raw: conf.ToStringMap(), components: map[string][]component{}}
	for _, kind := range kinds {
		entries, _ := m.raw[kind].([]any)
		for i, e := range entries {
			c, err := parseComponent(e)
			if err != nil {
				t.Fatalf("%s: %s[%d]: %v", name, kind, i, err)
			}
			m.components[kind] = append(m.components[kind], c)
		}
	}
	return m
}

func parseComponent(e any) (component, error) {
	fields, ok := e.(map[string]any)
	if !ok {
		return component{}, fmt.Errorf("want a map, got %T", e)
	}
	str := func(k string) string { s, _ := fields[k].(string); return s }
	module, version, ok := strings.Cut(str("gomod"), " ")
	if !ok || module == "" || version == "" {
		return component{}, fmt.Errorf("gomod: want \"MODULE VERSION\", got %q", str("gomod"))
	}
	return component{module: module, version: version, imp: str("import"), name: str("name")}, nil
}

// TestLeanIsSubsetOfFull checks that every lean component is a full one at
// the same version, that the rest of the manifests agree, and that the
// lean one leaves the heavy processors out.
func TestLeanIsSubsetOfFull(t *testing.T) {
	full, lean := loadManifest(t, fullManifest), loadManifest(t, leanManifest)
	for _, kind := range kinds {
		for _, c := range lean.components[kind] {
			i := slices.IndexFunc(full.components[kind], func(f component) bool { return f.module == c.module })
			switch {
			case i < 0:
				t.Errorf("%s: %s: %s is not in %s", leanManifest, kind, c.module, fullManifest)
			case full.components[kind][i] != c:
				t.Errorf("%s: %s: %+v, but %s has %+v: move the version in both", leanManifest, kind, c,
					fullManifest, full.components[kind][i])
			}
			if slices.Contains(heavy, path.Base(c.importPath())) {
				t.Errorf("%s: %s: %s is one the lean distribution leaves out", leanManifest, kind, c.module)
			}
		}
	}
	for _, key := range []string{"providers", "telemetry", "replaces"} {
		if f, l := fmt.Sprint(full.raw[key]), fmt.Sprint(lean.raw[key]); f != l {
			t.Errorf("%s: %s: %s, but %s has %s", leanManifest, key, l, fullManifest, f)
		}
	}
	fd, _ := full.raw["dist"].(map[string]any)
	ld, _ := lean.raw["dist"].(map[string]any)
	if fd["version"] != ld["version"] {
		t.Errorf("%s: dist::version: %v, but %s has %v", leanManifest, ld["version"], fullManifest, fd["version"])
	}
	for _, d := range []map[string]any{fd, ld} {
		name, _ := d["name"].(string)
		if d["output_path"] != "./build/"+name || !strings.HasSuffix(fmt.Sprint(d["module"]), "/cmd/"+name) {
			t.Errorf("dist %s: output_path %v and module %v: want ./build/%s and …/cmd/%s (the Makefile's layout)",
				name, d["output_path"], d["module"], name, name)
		}
	}
}

// distTypes returns the component types of m by kind.
func distTypes(t *testing.T, m manifest) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for kind, cs := range m.components {
		for _, c := range cs {
			ts, ok := types[path.Base(c.importPath())]
			if !ok {
				t.Fatalf("%s: no types listed for %s: add it to this test's types", kind, c.importPath())
			}
			out[kind] = append(out[kind], ts...)
		}
	}
	return out
}

// parseYAML returns a YAML document as a string map.
func parseYAML(data []byte) (map[string]any, error) {
	r, err := confmap.NewRetrievedFromYAML(data)
	if err != nil {
		return nil, err
	}
	conf, err := r.AsConf()
	if err != nil {
		return nil, err
	}
	return conf.ToStringMap(), nil
}

// suiteConfigs are the configurations the lean collector is started with.
func suiteConfigs(t *testing.T) map[string]map[string]any {
	t.Helper()
	conf, err := confmaptest.LoadConf(repoPath("testdata/config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{"testdata/config.yaml (make run)": conf.ToStringMap()}
	adv := adversarial.Config("/tmp/agent.sock", 9464, 8888, []int{0})
	if out["adversarial.Config (adversarial suite, load test)"], err = parseYAML([]byte(adv)); err != nil {
		t.Fatalf("adversarial.Config: %v\n%s", err, adv)
	}
	return out
}

// TestSuiteConfigsUseLeanComponents checks each component a suite
// configuration names (its type, before any '/') against the lean manifest.
func TestSuiteConfigsUseLeanComponents(t *testing.T) {
	lean := distTypes(t, loadManifest(t, leanManifest))
	for name, cfg := range suiteConfigs(t) {
		for _, kind := range kinds {
			section, _ := cfg[kind].(map[string]any)
			for id := range section {
				typ, _, _ := strings.Cut(id, "/")
				if !slices.Contains(lean[kind], typ) {
					t.Errorf("%s: %s::%s: type %q is not in %s (has %v)", name, kind, id, typ, leanManifest, lean[kind])
				}
			}
		}
	}
}

// TestTypesMatchBinaries checks this test's types table against what the
// built distributions say of themselves (`components`); it skips a
// distribution that is not built.
func TestTypesMatchBinaries(t *testing.T) {
	for _, name := range []string{"otelcol-gpuprobe", "otelcol-gpuprobe-lean"} {
		t.Run(name, func(t *testing.T) {
			bin := repoPath(filepath.Join("bin", name))
			if _, err := os.Stat(bin); err != nil {
				t.Skipf("bin/%s is not built", name)
			}
			out, err := exec.CommandContext(t.Context(), bin, "components").Output()
			if err != nil {
				t.Fatalf("%s components: %v", bin, err)
			}
			listed, err := parseYAML(out)
			if err != nil {
				t.Fatalf("%s components: %v\n%s", bin, err, out)
			}
			checkTypes(t, name, listed)
		})
	}
}

// checkTypes checks that each component listed in a `components` output
// has its type first in the types table.
func checkTypes(t *testing.T, bin string, out map[string]any) {
	t.Helper()
	for _, kind := range kinds {
		entries, _ := out[kind].([]any)
		for _, e := range entries {
			fields, _ := e.(map[string]any)
			module, _, _ := strings.Cut(fmt.Sprint(fields["module"]), " ")
			key := path.Base(module)
			if module == "github.com/gpuprobe/gpuprobe" {
				key = "receiver"
			}
			if ts := types[key]; len(ts) == 0 || ts[0] != fields["name"] {
				t.Errorf("%s components: %s %s is %v; this test's types say %v", bin, kind, module, fields["name"], ts)
			}
		}
	}
}
