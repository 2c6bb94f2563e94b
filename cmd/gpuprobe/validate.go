package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/receiver/progcheck"
	"go.opentelemetry.io/collector/confmap"
)

func init() {
	Register(&Command{
		Name:    "validate",
		Summary: "check the gpuprobe receivers of a collector configuration as the collector's start would (--host: on this machine too)",
		Run:     runValidate,
	})
}

// builderKeys are the receiver's keys that package config does not
// decode: mdatagen's metrics builder (receiver.Config). TestValidate
// BuilderKeys keeps the list in step with the receiver.
var builderKeys = []string{"metrics", "resource_attributes"}

// runValidate decodes and validates each gpuprobe receiver (gpuprobe,
// gpuprobe/NAME) of a collector configuration, with ${env:NAME} and
// ${env:NAME:-default} expanded from this environment. Without --host it
// checks the configuration alone, as `otelcol validate` does, so that a
// node's configuration validates on a workstation; --host adds what start
// needs of this machine: a usable socket directory and loadable
// programs' objects. Exit status: 0 when every receiver is valid, 1 when
// one is not or the file cannot be read, 2 on a usage error.
func runValidate(args []string, stdout, stderr io.Writer) int {
	fs := newUsageFlags("validate", "usage: gpuprobe validate [--host] CONFIG.yaml", stderr)
	host := fs.Bool("host", false, "also check this machine as start would: the agent socket's directory, the programs' objects and their maps' record_types and map_values")
	if code, ok := parseArgs(fs, args, false); !ok {
		return code
	}
	file := fs.Arg(0)
	receivers, err := gpuprobeReceivers(file)
	if err != nil {
		fmt.Fprintf(stderr, "gpuprobe validate: %s: %v\n", file, err)
		return 1
	}
	if len(receivers) == 0 {
		fmt.Fprintf(stderr, "gpuprobe validate: %s: no gpuprobe receiver under receivers\n", file)
		return 1
	}
	code := 0
	for _, name := range sortedNames(receivers) {
		err := checkReceiver(receivers[name], *host)
		if err == nil {
			fmt.Fprintf(stdout, "receivers::%s: valid\n", name)
			continue
		}
		code = 1
		for _, line := range errorLines(err) {
			fmt.Fprintf(stderr, "receivers::%s::%s\n", name, line)
		}
	}
	return code
}

// gpuprobeReceivers resolves the configuration file and returns its
// gpuprobe receivers by name.
func gpuprobeReceivers(file string) (map[string]*confmap.Conf, error) {
	r, err := confmap.NewResolver(confmap.ResolverSettings{
		URIs:              []string{"file:" + file},
		ProviderFactories: []confmap.ProviderFactory{readProvider("file", readFile), readProvider("env", readEnv)},
		DefaultScheme:     "env",
	})
	if err != nil {
		return nil, err
	}
	conf, err := r.Resolve(context.Background())
	if err != nil {
		return nil, err
	}
	all, err := conf.Sub("receivers")
	if err != nil {
		return nil, err
	}
	out := map[string]*confmap.Conf{}
	for name := range all.ToStringMap() {
		if name != "gpuprobe" && !strings.HasPrefix(name, "gpuprobe/") {
			continue
		}
		if out[name], err = all.Sub(name); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// checkReceiver decodes and validates one receiver's configuration, and
// with host checks what start needs of this machine.
func checkReceiver(conf *confmap.Conf, host bool) error {
	own := conf.ToStringMap()
	for _, k := range builderKeys {
		delete(own, k)
	}
	c := config.Default()
	if err := c.Unmarshal(confmap.NewFromStringMap(own)); err != nil {
		return err
	}
	if err := c.Validate(); err != nil || !host {
		return err
	}
	return errors.Join(config.CheckSocketDirUsable(c.Agent.Socket), progcheck.Check(c))
}

// errorLines flattens joined errors into their lines (each "key: reason").
func errorLines(err error) []string {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []string
		for _, e := range j.Unwrap() {
			out = append(out, errorLines(e)...)
		}
		return out
	}
	return strings.Split(err.Error(), "\n")
}

func sortedNames(m map[string]*confmap.Conf) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// readProvider is a confmap provider of scheme whose values read returns
// as YAML, as the collector's file and env providers do.
func readProvider(scheme string, read func(string) ([]byte, error)) confmap.ProviderFactory {
	return confmap.NewProviderFactory(func(confmap.ProviderSettings) confmap.Provider {
		return &provider{scheme: scheme, read: read}
	})
}

type provider struct {
	scheme string
	read   func(string) ([]byte, error)
}

func (p *provider) Retrieve(_ context.Context, uri string, _ confmap.WatcherFunc) (*confmap.Retrieved, error) {
	b, err := p.read(strings.TrimPrefix(uri, p.scheme+":"))
	if err != nil {
		return nil, err
	}
	return confmap.NewRetrievedFromYAML(b)
}

func (p *provider) Scheme() string                 { return p.scheme }
func (p *provider) Shutdown(context.Context) error { return nil }

func readFile(path string) ([]byte, error) { return os.ReadFile(path) }

// readEnv is NAME's value, or the default of NAME:-default when NAME is
// unset or empty (the collector's env provider).
func readEnv(ref string) ([]byte, error) {
	name, def, hasDef := strings.Cut(ref, ":-")
	if v := os.Getenv(name); v != "" || !hasDef {
		return []byte(v), nil
	}
	return []byte(def), nil
}
