package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/config"
	gpureceiver "github.com/gpuprobe/gpuprobe/receiver"
	"go.opentelemetry.io/collector/confmap"
)

// TestValidate: validate refuses what start would refuse for the
// configuration's sake, accepts a node's configuration on any machine,
// and checks the machine only with --host.
func TestValidate(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", dir)
	write := func(name, receiver string) string {
		p := filepath.Join(dir, name)
		body := "receivers:\n  otlp: {}\n  gpuprobe/a:\n" + receiver + "\n  gpuprobe:\n" + receiver + "\nexporters: {debug: {}}\n"
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	nowhere := filepath.Join(dir, "missing", "sub", "agent.sock")
	obj, err := filepath.Abs("../../testdata/bpf/launchcount.o") // built by make
	if err != nil {
		t.Fatal(err)
	}
	none := filepath.Join(dir, "none.yaml")
	if err := os.WriteFile(none, []byte("receivers:\n  otlp: {}\n  gpuprobe_like: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		code int
		want []string // lines of stdout and stderr
	}{
		{"node config on a workstation", []string{"../../deploy/kubernetes/config.yaml"}, 0, []string{"receivers::gpuprobe: valid"}},
		{"env defaults expanded, --host", []string{"--host", "../../testdata/config.yaml"}, 0, []string{"receivers::gpuprobe: valid"}},
		{"program without path", []string{write("nopath.yaml", "    programs: [{attach: [x]}]")}, 1,
			[]string{"receivers::gpuprobe::programs[0]::path: must not be empty", "receivers::gpuprobe/a::programs[0]::path: must not be empty"}},
		{"bare duration", []string{write("bare.yaml", "    limits: {launch_timeout: 5}")}, 1,
			[]string{"receivers::gpuprobe::limits::launch_timeout: must be a duration with a unit"}},
		{"metrics keys are the receiver's", []string{write("metrics.yaml", "    metrics: {gpu.cuda.kernel.launches: {enabled: false}}")}, 0,
			[]string{"receivers::gpuprobe: valid"}},
		{"host state not checked", []string{write("host.yaml", "    agent: {socket: "+nowhere+"}\n    programs: [{path: /nonexistent/p.o}]")}, 0,
			[]string{"receivers::gpuprobe: valid"}},
		{"host state with --host", []string{"--host", filepath.Join(dir, "host.yaml")}, 1,
			[]string{"receivers::gpuprobe::agent::socket: directory " + filepath.Dir(nowhere) + " is missing and cannot be created",
				"receivers::gpuprobe::programs[0]::path /nonexistent/p.o: read eBPF object"}},
		{"map_values of a map the object lacks", []string{"--host", write("seed.yaml", "    programs: [{path: "+obj+", map_values: {nosuch: {0: 1}}}]")}, 1,
			[]string{"receivers::gpuprobe::programs[0]::map_values::nosuch::0: no GPU map \"nosuch\" in the attached programs"}},
		{"map_values out of range", []string{"--host", write("range.yaml", "    programs: [{path: "+obj+", map_values: {lc_counts: {100000: 1}}}]")}, 1,
			[]string{"max_entries"}},
		{"map_values of the object's map", []string{"--host", write("ok.yaml", "    programs: [{path: "+obj+", map_values: {lc_counts: {1: 7}}}]")}, 0,
			[]string{"receivers::gpuprobe: valid"}},
		{"no gpuprobe receiver", []string{none}, 1, []string{"no gpuprobe receiver under receivers"}},
		{"missing file", []string{filepath.Join(dir, "nope.yaml")}, 1, []string{"gpuprobe validate: "}},
		{"no operand", nil, 2, []string{"usage: gpuprobe validate"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"validate"}, c.args...), &stdout, &stderr)
			out := stdout.String() + stderr.String()
			if code != c.code {
				t.Errorf("exit %d, want %d:\n%s", code, c.code, out)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
	if _, err := os.Stat(filepath.Dir(nowhere)); err == nil {
		t.Errorf("validate created %s", filepath.Dir(nowhere))
	}
}

// TestValidateBuilderKeys: the keys validate leaves to the receiver are
// exactly the receiver's configuration keys that package config lacks.
func TestValidateBuilderKeys(t *testing.T) {
	// Marshaled inside a map, as the collector marshals its receivers'.
	keys := func(cfg any) []string {
		outer := confmap.New()
		if err := outer.Marshal(map[string]any{"r": cfg}); err != nil {
			t.Fatal(err)
		}
		conf, err := outer.Sub("r")
		if err != nil {
			t.Fatal(err)
		}
		var top []string
		for k := range conf.ToStringMap() {
			top = append(top, k)
		}
		sort.Strings(top)
		return top
	}
	own := keys(config.Default())
	if len(own) < 10 {
		t.Fatalf("package config marshals only %v", own)
	}
	var extra []string
	for _, k := range keys(gpureceiver.NewFactory().CreateDefaultConfig()) {
		if !slices.Contains(own, k) {
			extra = append(extra, k)
		}
	}
	want := slices.Clone(builderKeys)
	sort.Strings(want)
	if !slices.Equal(extra, want) {
		t.Errorf("receiver keys beyond package config's: %v, want builderKeys %v", extra, want)
	}
}
