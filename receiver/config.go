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
	config.Config                 `mapstructure:",squash"`
	metadata.MetricsBuilderConfig `mapstructure:",squash"`
}

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
	if err := c.Config.Unmarshal(confmap.NewFromStringMap(own)); err != nil {
		return err
	}
	if err := confmap.NewFromStringMap(builder).Unmarshal(&c.MetricsBuilderConfig); err != nil {
		return fmt.Errorf("gpuprobe config: %w", err)
	}
	return nil
}

func createDefaultConfig() component.Config {
	return &Config{Config: *config.Default(), MetricsBuilderConfig: metadata.NewDefaultMetricsBuilderConfig()}
}
