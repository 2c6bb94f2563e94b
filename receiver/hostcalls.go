package receiver

import (
	"context"
	"sync"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/receiver/internal/hostcall"
	"github.com/gpuprobe/gpuprobe/receiver/internal/translate"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.uber.org/zap"
)

// maxPendingMessages bounds the trace_printk/puts messages held between
// two polls (all clients together); the excess is dropped and counted.
const maxPendingMessages = 8192

// hostCalls is the receiver's side of the GPU programs' host calls: which
// maps live on the host, the clients' mailbox servers, and the messages
// waiting for the logs pipeline.
type hostCalls struct {
	maps []*jit.Map // host maps of the GPU programs, one per name
	need bool       // some GPU program makes host calls

	mu      sync.Mutex
	logs    consumer.Logs
	pending []pendingMessage
	dropped uint64             // messages dropped (no room, or no logs pipeline)
	total   hostcall.Counters  // of the servers stopped so far
	live    []*clientHostCalls // servers of connected clients
}

type pendingMessage struct {
	pid  int32
	name string
	msg  hostcall.Message
}

// clientHostCalls is one client's mailbox server and host maps.
type clientHostCalls struct {
	srv  *hostcall.Server
	maps map[string]hostcall.HostMap
}

// scan looks at the GPU programs for host calls and host maps (before
// the agent socket opens).
func (h *hostCalls) scan(progs []*jit.Program) {
	seen := map[string]bool{}
	for _, p := range progs {
		h.need = h.need || hostcall.Needs(p)
		for _, m := range p.Maps {
			if hostcall.IsHostMap(m) && !seen[m.Name] {
				seen[m.Name] = true
				h.maps = append(h.maps, m)
			}
		}
	}
}

// setLogs sets the logs consumer (nil: messages are counted as dropped).
func (h *hostCalls) setLogs(c consumer.Logs) {
	h.mu.Lock()
	h.logs = c
	h.mu.Unlock()
}

// offers starts a mailbox server for a client whose programs need host
// calls and returns the WELCOME regions: the mailbox (RoleMailbox) and one
// RoleMap region per host map. Nil when no program makes host calls.
func (h *hostCalls) offers(p *agent.Peer) (*clientHostCalls, []agentwire.Offer, error) {
	if h == nil || !h.need {
		return nil, nil, nil
	}
	c := &clientHostCalls{maps: map[string]hostcall.HostMap{}}
	var offers []agentwire.Offer
	for _, m := range h.maps {
		hm, err := hostcall.NewHostMap(m)
		if err != nil {
			c.closeMaps()
			return nil, nil, err
		}
		c.maps[m.Name] = hm
		offers = append(offers, agentwire.Offer{Role: agentwire.RoleMap, Name: m.Name, Region: hm.Region()})
	}
	srv, err := hostcall.New(hostcall.Options{}, c.maps, func(m hostcall.Message) { h.add(p.PID, p.Hello.Name, m) })
	if err != nil {
		c.closeMaps()
		return nil, nil, err
	}
	c.srv = srv
	srv.Start()
	h.mu.Lock()
	h.live = append(h.live, c)
	h.mu.Unlock()
	return c, append([]agentwire.Offer{{Role: agentwire.RoleMailbox, Name: "mailbox", Region: srv.Mailbox().Region()}}, offers...), nil
}

// add queues a message for the logs pipeline (the serving goroutine).
func (h *hostCalls) add(pid int32, name string, m hostcall.Message) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.logs == nil || len(h.pending) >= maxPendingMessages {
		h.dropped++
		return
	}
	h.pending = append(h.pending, pendingMessage{pid: pid, name: name, msg: m})
}

// stop ends a client's server (the client is gone) and keeps its counters.
func (h *hostCalls) stop(c *clientHostCalls, log *zap.Logger) {
	if c == nil {
		return
	}
	if err := c.srv.Stop(); err != nil {
		log.Debug("gpuprobe: closing a mailbox", zap.Error(err))
	}
	c.closeMaps()
	n := c.srv.Counters()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.total.Served += n.Served
	h.total.Late += n.Late
	h.total.Rejected += n.Rejected
	h.total.Invalid += n.Invalid
	for i, l := range h.live {
		if l == c {
			h.live = append(h.live[:i], h.live[i+1:]...)
			break
		}
	}
}

func (c *clientHostCalls) closeMaps() {
	for _, m := range c.maps {
		m.Close()
	}
}

// flush sends the queued messages as log records.
func (h *hostCalls) flush(ctx context.Context, service string, log *zap.Logger) {
	if h == nil {
		return
	}
	h.mu.Lock()
	msgs, lc := h.pending, h.logs
	h.pending = nil
	h.mu.Unlock()
	if len(msgs) == 0 || lc == nil {
		return
	}
	if err := lc.ConsumeLogs(ctx, messageLogs(msgs, service)); err != nil {
		h.mu.Lock()
		h.dropped += uint64(len(msgs))
		h.mu.Unlock()
		log.Debug("gpuprobe: the logs pipeline refused GPU messages", zap.Int("messages", len(msgs)), zap.Error(err))
	}
}

// messageLogs turns messages into log records, one resource per process:
// the body is the text, severity INFO, with the GPU thread and the helper.
func messageLogs(msgs []pendingMessage, service string) plog.Logs {
	ld := plog.NewLogs()
	if service == "" {
		service = "gpuprobe"
	}
	byPID := map[int32]plog.LogRecordSlice{}
	for _, pm := range msgs {
		lrs, ok := byPID[pm.pid]
		if !ok {
			rl := ld.ResourceLogs().AppendEmpty()
			a := rl.Resource().Attributes()
			a.PutStr("service.name", service)
			a.PutInt("process.pid", int64(pm.pid))
			a.PutStr("process.executable.name", pm.name)
			sl := rl.ScopeLogs().AppendEmpty()
			sl.Scope().SetName("gpuprobe")
			lrs = sl.LogRecords()
			byPID[pm.pid] = lrs
		}
		lr := lrs.AppendEmpty()
		ts := pcommon.NewTimestampFromTime(pm.msg.Time)
		lr.SetTimestamp(ts)
		lr.SetObservedTimestamp(ts)
		lr.SetSeverityNumber(plog.SeverityNumberInfo)
		lr.SetSeverityText("INFO")
		lr.Body().SetStr(pm.msg.Text)
		lr.Attributes().PutInt("gpuprobe.gpu.thread", int64(pm.msg.Caller))
		name := "bpf_trace_printk"
		if pm.msg.Helper == jit.HelperPuts {
			name = "bpf_puts"
		}
		lr.Attributes().PutStr("code.function.name", name)
	}
	return ld
}

// metrics are the host-call self metrics: totals of stopped and live
// servers.
func (h *hostCalls) metrics() []translate.SelfMetric {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	t, dropped := h.total, h.dropped
	live := append([]*clientHostCalls(nil), h.live...)
	h.mu.Unlock()
	for _, c := range live {
		n := c.srv.Counters()
		t.Served, t.Late, t.Rejected, t.Invalid = t.Served+n.Served, t.Late+n.Late, t.Rejected+n.Rejected, t.Invalid+n.Invalid
	}
	return []translate.SelfMetric{
		{Name: "gpuprobe.receiver.hostcalls.served", Unit: "{request}", Desc: "GPU host-call requests answered (printk, puts, host maps).", Value: t.Served},
		{Name: "gpuprobe.receiver.hostcalls.late", Unit: "{request}", Desc: "GPU host-call requests answered after the GPU thread had timed out.", Value: t.Late},
		{Name: "gpuprobe.receiver.hostcalls.rejected", Unit: "{request}", Desc: "GPU host-call requests over a client's rate limit, answered -EBUSY without being served.", Value: t.Rejected},
		{Name: "gpuprobe.receiver.hostcalls.invalid", Unit: "{request}", Desc: "GPU host-call requests refused: unknown helper or map, bad payload or format.", Value: t.Invalid},
		{Name: "gpuprobe.receiver.hostcalls.messages.dropped", Unit: "{message}", Desc: "trace_printk/puts messages dropped (no logs pipeline, queue full, or refused).", Value: dropped},
	}
}
