package adversarial

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpuprobe/gpuprobe/e2e"
)

// The bounds the suite holds the collector to.
const (
	// PatchMemory is the suite's agent::max_patch_memory.
	PatchMemory = 128 << 20
	// MaxRSS is the collector's stated resident memory bound for that
	// budget (docs/security.md): the budget, plus 256 MiB for the
	// injection cache and 256 MiB for everything else (rings, per-client
	// state, pdata, the runtime). Anything above means a client can grow
	// the collector without bound.
	MaxRSS = PatchMemory + 512<<20
	// MaxScrape is how long /metrics may take to answer, at any time.
	MaxScrape = time.Second
	// MaxShutdown is how long SIGTERM may take to end the collector.
	MaxShutdown = 5 * time.Second
	// ShutdownTimeout is the suite's shutdown_timeout: the receiver's
	// part of MaxShutdown, the rest left to the pipelines and the process.
	ShutdownTimeout = 3 * time.Second
	// Duration is how long each hostile class runs.
	Duration = 5 * time.Second
	// FdSettle is how long the descriptor count may take to return to its
	// baseline once a hostile client has gone.
	FdSettle = 3 * time.Second
)

// Collector is the collector under test and its watchdog.
type Collector struct {
	Proc     *e2e.Process
	Dir      string
	Socket   string
	Exporter string // the prometheus exporter's /metrics
	Self     string // the collector's own /metrics (self-metrics)

	mu          sync.Mutex
	exited      string // how the collector ended, if it did
	peakRSS     int64
	rssOver     string // when VmRSS first went over MaxRSS
	slowScrapes int
	worstScrape time.Duration
	scrapeErr   error
	once        sync.Once
	finished    bool // the suite has judged it
	stop        chan struct{}
	stopped     chan struct{}
}

// Config returns the collector configuration: the socket in dir, an
// exporter and self-metrics on the given ports, allowed uids as given.
func Config(socket string, exporterPort, selfPort int, allowedUIDs []int) string {
	uids := make([]string, len(allowedUIDs))
	for i, u := range allowedUIDs {
		uids[i] = strconv.Itoa(u)
	}
	return `receivers:
  gpuprobe:
    agent:
      socket: ` + socket + `
      socket_mode: "0660"
      allowed_uids: [` + strings.Join(uids, ", ") + `]
      max_patch_memory: ` + strconv.Itoa(PatchMemory) + `
      idle_timeout: 1s
    buffers:
      ring_slots: 4096
    poll_interval: 5ms
    metrics_interval: 500ms
    shutdown_timeout: ` + ShutdownTimeout.String() + `
    resource:
      service_name: adversarial
exporters:
  prometheus:
    endpoint: 127.0.0.1:` + strconv.Itoa(exporterPort) + `
    metric_expiration: 10m
  debug:
    verbosity: basic
service:
  telemetry:
    logs:
      level: warn
    metrics:
      level: basic
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: ` + strconv.Itoa(selfPort) + `
  pipelines:
    traces:
      receivers: [gpuprobe]
      exporters: [debug]
    metrics:
      receivers: [gpuprobe]
      exporters: [prometheus]
`
}

// StartCollector starts bin with Config in a fresh directory (mode 0755,
// so that an unprivileged client can reach the socket) and starts the
// watchdog.
func StartCollector(ctx context.Context, bin string, allowedUIDs []int) (*Collector, error) {
	dir, err := os.MkdirTemp("", "gpuprobe-adversarial-")
	if err != nil {
		return nil, fmt.Errorf("collector dir: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, fmt.Errorf("collector dir: %w", err)
	}
	ports, err := e2e.FreePorts(2)
	if err != nil {
		return nil, fmt.Errorf("ports: %w", err)
	}
	c := &Collector{Dir: dir, Socket: filepath.Join(dir, "agent.sock"),
		Exporter: "http://127.0.0.1:" + strconv.Itoa(ports[0]) + "/metrics",
		Self:     "http://127.0.0.1:" + strconv.Itoa(ports[1]) + "/metrics",
		stop:     make(chan struct{}), stopped: make(chan struct{})}
	cfg := Config(c.Socket, ports[0], ports[1], allowedUIDs)
	c.Proc, err = e2e.StartCollector(ctx, bin, dir, cfg, func(ctx context.Context) error {
		if _, err := os.Stat(c.Socket); err != nil {
			return fmt.Errorf("agent socket: %w", err)
		}
		_, err := e2e.Scrape(ctx, c.Self)
		return err
	})
	if err != nil {
		return nil, err
	}
	go c.watch()
	return c, nil
}

// watch samples the collector every 200 ms until Terminate.
func (c *Collector) watch() {
	defer close(c.stopped)
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		if exited, err := c.Proc.Exited(); exited {
			c.mu.Lock()
			c.exited = fmt.Sprintf("collector exited at %s: %v", time.Now().Format("15:04:05.000"), err)
			c.mu.Unlock()
			return
		}
		if rss, err := RSS(c.Proc.Pid()); err == nil {
			c.mu.Lock()
			if rss > MaxRSS && c.peakRSS <= MaxRSS {
				c.rssOver = time.Now().Format("15:04:05.000")
			}
			c.peakRSS = max(c.peakRSS, rss)
			c.mu.Unlock()
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 3*MaxScrape)
		_, err := e2e.Scrape(ctx, c.Self)
		cancel()
		if d := time.Since(start); err != nil || d > MaxScrape {
			c.mu.Lock()
			c.slowScrapes++
			c.worstScrape = max(c.worstScrape, d)
			if err != nil {
				c.scrapeErr = err
			}
			c.mu.Unlock()
		}
	}
}

// Violations says what the watchdog saw that broke a bound.
func (c *Collector) Violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var v []string
	if c.exited != "" {
		v = append(v, c.exited)
	}
	if c.peakRSS > MaxRSS {
		v = append(v, fmt.Sprintf("VmRSS over the %d MiB bound from %s, peak %d MiB", MaxRSS>>20, c.rssOver, c.peakRSS>>20))
	}
	if c.slowScrapes > 0 {
		v = append(v, fmt.Sprintf("/metrics over %s %d times, worst %s (last error: %v)",
			MaxScrape, c.slowScrapes, c.worstScrape.Round(time.Millisecond), c.scrapeErr))
	}
	return v
}

// PeakRSS is the largest VmRSS the watchdog saw.
func (c *Collector) PeakRSS() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peakRSS
}

// Alive reports whether the collector is still running.
func (c *Collector) Alive() bool {
	exited, _ := c.Proc.Exited()
	return !exited
}

// Terminate sends SIGTERM and returns how long the collector took to end
// (it is killed a second after MaxShutdown). Calling it again is harmless.
func (c *Collector) Terminate() (time.Duration, error) {
	c.once.Do(func() { close(c.stop) })
	<-c.stopped
	start := time.Now()
	err := c.Proc.Stop(MaxShutdown + time.Second)
	d := time.Since(start)
	_ = os.RemoveAll(c.Dir)
	return d, err
}

// RSS reads VmRSS of pid from /proc, in bytes.
func RSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("rss: %w", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("rss: %q: %w", v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("rss: no VmRSS in /proc/%d/status", pid)
}

// Fds counts the open descriptors of pid.
func Fds(pid int) (int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, fmt.Errorf("fds: %w", err)
	}
	return len(ents), nil
}

// Counter sums the samples of the family base (with or without _total)
// whose labels include match.
func Counter(fams map[string]*dto.MetricFamily, base string, match map[string]string) (float64, bool) {
	var sum float64
	found := false
	for _, name := range []string{base, base + "_total"} {
		for _, m := range e2e.FindMetric(fams, name, match) {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
			found = true
		}
	}
	return sum, found
}

// dialRaw opens a plain connection to the agent socket.
func dialRaw(socket string) (*net.UnixConn, error) {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", socket, err)
	}
	return c, nil
}
