package receiver

import (
	"fmt"

	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/receiver/internal/metadata"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
)

// Config is the receiver's configuration: gpuprobe's own keys (package
// config) and mdatagen's metrics and resource_attributes keys.
type Config struct {
	ownConfig                     `mapstructure:",squash"`
	metadata.MetricsBuilderConfig `mapstructure:",squash"`
}

// ownConfig is config.Config embedded under an unexported name: confmap's
// validation walk calls the Validate promoted to Config and skips
// unexported fields, so each problem is reported once, under
// receivers::gpuprobe. Embedded as config.Config, the field would be
// walked too and every problem printed again under
// receivers::gpuprobe::config.
type ownConfig = config.Config

// Own returns gpuprobe's own configuration (package config's keys).
func (c *Config) Own() *config.Config { return &c.ownConfig }

// builderKeys are the top-level keys that belong to MetricsBuilderConfig.
var builderKeys = []string{"metrics", "resource_attributes"}

// Unmarshal decodes metrics and resource_attributes into the builder
// config and the other keys with config.Config's checks. It implements
// confmap.Unmarshaler (and hides config.Config's, which would reject the
// builder's keys).
func (c *Config) Unmarshal(conf *confmap.Conf) error {
	own := conf.ToStringMap()
	builder := map[string]any{}
	for _, k := range builderKeys {
		if v, ok := own[k]; ok {
			builder[k] = v
			delete(own, k)
		}
	}
	if err := c.ownConfig.Unmarshal(confmap.NewFromStringMap(own)); err != nil {
		return err
	}
	if err := confmap.NewFromStringMap(builder).Unmarshal(&c.MetricsBuilderConfig); err != nil {
		return fmt.Errorf("gpuprobe config: %w", err)
	}
	return nil
}

// Marshal encodes both parts: mapstructure skips the unexported
// embedding. It implements confmap.Marshaler, on the value: confmap's
// encoder asks the struct value, not a pointer to it.
func (c Config) Marshal(conf *confmap.Conf) error {
	if err := conf.Marshal(&c.ownConfig); err != nil {
		return err
	}
	return conf.Marshal(&c.MetricsBuilderConfig)
}

func createDefaultConfig() component.Config {
	return &Config{ownConfig: *config.Default(), MetricsBuilderConfig: metadata.NewDefaultMetricsBuilderConfig()}
}
