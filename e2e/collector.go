package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// StartCollector writes config (a collector YAML configuration) into dir
// and starts the collector binary with it. ready is polled (bounded) until
// it returns nil; on failure the collector's logs are in the error.
func StartCollector(ctx context.Context, bin, dir, config string, ready func(context.Context) error) (*Process, error) {
	cfg := filepath.Join(dir, "otelcol.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		return nil, fmt.Errorf("collector config: %w", err)
	}
	p, err := Start("otelcol-gpuprobe", bin, []string{"--config", cfg}, dir, nil)
	if err != nil {
		return nil, err
	}
	if err := p.WaitReady(ctx, 60*time.Second, ready); err != nil {
		_ = p.Stop(5 * time.Second)
		return nil, fmt.Errorf("%w\ncollector logs:\n%s", err, p.Logs())
	}
	return p, nil
}
