package receiver

import (
	"strings"
	"testing"

	"go.opentelemetry.io/collector/confmap"
)

// TestValidateOnce: confmap's validation walk, as the collector's
// validate runs it, reports each problem once, under its key.
func TestValidateOnce(t *testing.T) {
	c := createDefaultConfig().(*Config)
	c.Sampling.OneIn = 0
	err := confmap.Validate(c)
	if err == nil || err.Error() != "sampling::one_in: must be ≥ 1, got 0" {
		t.Fatalf("confmap.Validate = %q, want the one problem once", err)
	}
	if c.Own() != &c.ownConfig || strings.Contains(err.Error(), "config:") {
		t.Errorf("Own() is not the embedded configuration, or the key has a config segment")
	}
}

// TestMarshalBothParts: the configuration, marshaled as the collector
// marshals its receivers' (inside its own configuration), encodes
// package config's keys and the metrics builder's, as it decodes them.
func TestMarshalBothParts(t *testing.T) {
	outer := confmap.New()
	if err := outer.Marshal(map[string]any{"gpuprobe": createDefaultConfig()}); err != nil {
		t.Fatal(err)
	}
	conf, err := outer.Sub("gpuprobe")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"agent", "sampling", "programs", "metrics", "resource_attributes"} {
		if !conf.IsSet(k) {
			t.Errorf("marshaled configuration lacks %s", k)
		}
	}
	back := createDefaultConfig().(*Config)
	if err := back.Unmarshal(conf); err != nil {
		t.Fatalf("the marshaled configuration does not decode: %v", err)
	}
}
