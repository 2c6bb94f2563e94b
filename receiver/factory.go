package receiver

import (
	"context"
	"fmt"

	"github.com/gpuprobe/gpuprobe/receiver/internal/metadata"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/receiver"
)

// NewFactory returns the factory of the gpuprobe receiver (traces,
// metrics, and logs: the GPU programs' trace_printk and puts; the signals
// share one instance per configuration).
func NewFactory() receiver.Factory {
	return receiver.NewFactory(
		metadata.Type,
		createDefaultConfig,
		receiver.WithTraces(createTraces, metadata.TracesStability),
		receiver.WithMetrics(createMetrics, metadata.MetricsStability),
		receiver.WithLogs(createLogs, metadata.LogsStability),
	)
}

// instances maps a configuration to the receiver that serves all its signals.
var instances = newShared[*Config, *gpuReceiver]()

func getReceiver(set receiver.Settings, cfg component.Config) (*handle, error) {
	c, ok := cfg.(*Config)
	if !ok {
		return nil, fmt.Errorf("gpuprobe: config is %T, want *receiver.Config", cfg)
	}
	e, err := instances.acquire(c, func() (*gpuReceiver, error) {
		r, err := newReceiver(set, c.Own())
		if err == nil {
			r.out.view = newMetricView(c.MetricsBuilderConfig)
		}
		return r, err
	})
	if err != nil {
		return nil, err
	}
	return &handle{r: e.v, e: e}, nil
}

func createTraces(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Traces) (receiver.Traces, error) {
	h, err := getReceiver(set, cfg)
	if err != nil {
		return nil, err
	}
	h.r.setTraces(next)
	h.flush = h.r.requestFlush // launches still pending go out before the pipeline stops
	h.detach = func() {
		h.r.setTraces(nil)
		h.r.run.down.tracesDetached() // spans built later are undelivered
	}
	return h, nil
}

func createMetrics(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Metrics) (receiver.Metrics, error) {
	h, err := getReceiver(set, cfg)
	if err != nil {
		return nil, err
	}
	h.r.setMetrics(next)
	h.flush = h.r.requestFlush // a last metrics point, with every pending launch, before the pipeline stops
	h.detach = func() { h.r.setMetrics(nil) }
	return h, nil
}

func createLogs(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Logs) (receiver.Logs, error) {
	h, err := getReceiver(set, cfg)
	if err != nil {
		return nil, err
	}
	h.r.hc.setLogs(next)
	h.detach = func() { h.r.hc.setLogs(nil) }
	return h, nil
}
