package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// httpClient bounds every request the harness makes.
var httpClient = &http.Client{Timeout: 10 * time.Second}

// FreePorts returns n distinct TCP ports on 127.0.0.1 that were free a
// moment ago (all are held open together, so they differ).
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Jaeger is a running Jaeger v2 with in-memory storage: OTLP gRPC in, the
// HTTP query API out, every listener on 127.0.0.1.
type Jaeger struct {
	*Process
	// OTLPGRPC is host:port of the OTLP gRPC receiver.
	OTLPGRPC string
	// QueryURL is the base URL of the query API (and UI).
	QueryURL string
}

// jaegerConfig is Jaeger v2's configuration: an OpenTelemetry Collector
// configuration whose jaeger_storage extension holds the memory backend,
// jaeger_query serves the API, and jaeger_storage_exporter writes to it.
const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: info
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  jaeger_query:
    # On by default in v2: Jaeger would trace its own API calls and export
    # them to localhost:4317, and wait ~10s for that at shutdown.
    enable_tracing: false
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:%d
    grpc:
      endpoint: 127.0.0.1:%d
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:%d
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`

// StartJaeger writes a config into dir and starts Jaeger, waiting (bounded)
// until the query API answers and the OTLP port accepts connections.
func StartJaeger(ctx context.Context, bin, dir string) (*Jaeger, error) {
	return retryOnPortClash(func() (*Jaeger, error) { return startJaeger(ctx, bin, dir) })
}

func startJaeger(ctx context.Context, bin, dir string) (*Jaeger, error) {
	ports, err := FreePorts(3)
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "jaeger.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, jaegerConfig, ports[0], ports[1], ports[2]), 0o644); err != nil {
		return nil, fmt.Errorf("jaeger config: %w", err)
	}
	p, err := Start("jaeger", bin, []string{"--config", cfg}, dir, nil)
	if err != nil {
		return nil, err
	}
	j := &Jaeger{
		Process:  p,
		QueryURL: "http://127.0.0.1:" + strconv.Itoa(ports[0]),
		OTLPGRPC: "127.0.0.1:" + strconv.Itoa(ports[2]),
	}
	err = p.WaitReady(ctx, 60*time.Second, func(ctx context.Context) error {
		if _, err := j.Services(ctx); err != nil {
			return err
		}
		return dialTCP(ctx, j.OTLPGRPC)
	})
	if err != nil {
		_ = p.Stop(5 * time.Second)
		return nil, fmt.Errorf("%w\njaeger logs:\n%s", err, p.Logs())
	}
	return j, nil
}

// JaegerTrace is one trace as the Jaeger query API returns it.
type JaegerTrace struct {
	TraceID   string                   `json:"traceID"`
	Spans     []JaegerSpan             `json:"spans"`
	Processes map[string]JaegerProcess `json:"processes"`
}

// JaegerSpan is one span of a JaegerTrace.
type JaegerSpan struct {
	TraceID       string      `json:"traceID"`
	SpanID        string      `json:"spanID"`
	OperationName string      `json:"operationName"`
	References    []JaegerRef `json:"references"`
	StartTime     int64       `json:"startTime"` // µs since the epoch
	Duration      int64       `json:"duration"`  // µs
	Tags          []JaegerTag `json:"tags"`
	ProcessID     string      `json:"processID"`
}

// JaegerRef is a span reference (CHILD_OF is the parent).
type JaegerRef struct {
	RefType string `json:"refType"`
	TraceID string `json:"traceID"`
	SpanID  string `json:"spanID"`
}

// JaegerTag is a span or process attribute.
type JaegerTag struct {
	Key   string `json:"key"`
	Type  string `json:"type"`
	Value any    `json:"value"`
}

// JaegerProcess is the resource of a span (service name and attributes).
type JaegerProcess struct {
	ServiceName string      `json:"serviceName"`
	Tags        []JaegerTag `json:"tags"`
}

// Parent returns the span id of the span's CHILD_OF reference, or "".
func (s JaegerSpan) Parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// Tag returns the value of the span's attribute key.
func (s JaegerSpan) Tag(key string) (any, bool) {
	for _, t := range s.Tags {
		if t.Key == key {
			return t.Value, true
		}
	}
	return nil, false
}

// Tag returns the value of the resource attribute key.
func (p JaegerProcess) Tag(key string) (any, bool) {
	for _, t := range p.Tags {
		if t.Key == key {
			return t.Value, true
		}
	}
	return nil, false
}

// Services lists the service names Jaeger has spans for.
func (j *Jaeger) Services(ctx context.Context) ([]string, error) {
	var resp struct {
		Data []string `json:"data"`
	}
	if err := getJSON(ctx, j.QueryURL+"/api/services", &resp); err != nil {
		return nil, err
	}
	return resp.Data, nil
}

// Traces returns up to limit traces of service from the last hour.
func (j *Jaeger) Traces(ctx context.Context, service string, limit int) ([]JaegerTrace, error) {
	q := url.Values{
		"service":  {service},
		"limit":    {strconv.Itoa(limit)},
		"lookback": {"1h"},
		"start":    {strconv.FormatInt(time.Now().Add(-time.Hour).UnixMicro(), 10)},
		"end":      {strconv.FormatInt(time.Now().Add(time.Minute).UnixMicro(), 10)},
	}
	var resp struct {
		Data   []JaegerTrace `json:"data"`
		Errors []struct {
			Msg string `json:"msg"`
		} `json:"errors"`
	}
	if err := getJSON(ctx, j.QueryURL+"/api/traces?"+q.Encode(), &resp); err != nil {
		return nil, err
	}
	if len(resp.Errors) > 0 {
		return nil, fmt.Errorf("jaeger /api/traces: %s", resp.Errors[0].Msg)
	}
	return resp.Data, nil
}

// getJSON GETs url and decodes a 200 response's JSON body into v.
func getJSON(ctx context.Context, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("GET %s: reading body: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %s: %.500s", u, resp.Status, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: decoding %.200s: %w", u, body, err)
	}
	return nil
}

// dialTCP checks that something accepts connections on addr.
func dialTCP(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}
