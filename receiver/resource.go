package receiver

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/receiver/internal/procres"
	"github.com/gpuprobe/gpuprobe/receiver/internal/translate"
	"go.uber.org/zap"
)

// resources builds the resource of each connecting process.
type resources struct {
	hostName string        // host.name of every resource (os.Hostname at start)
	rejected atomic.Uint64 // the applications' variables discarded (agent goroutines)
	dropped  atomic.Uint64 // the applications' attributes of procres.Protected keys, ignored
	logs     claimLog      // bounds the reports of both, all clients together
}

// claimLog rate-limits the reports of clients' discarded variables and
// dropped attributes, which a client can cause on every connection: a
// burst of stateLogBurst, then one per stateLogEvery (every one is
// counted all the same); the next report says how many were left out.
type claimLog struct {
	mu         sync.Mutex
	lim        stateLog
	suppressed int
}

// allow says whether a report may be logged now, and how many were left
// out since the last one that was.
func (c *claimLog) allow(now time.Time) (bool, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.lim.allow(now) {
		c.suppressed++
		return false, 0
	}
	n := c.suppressed
	c.suppressed = 0
	return true, n
}

// peer returns what the translator is told of a client: its pid from
// SO_PEERCRED, and the resource of its process built from what the agent
// server read of it in /proc and what its HELLO said. A variable of the
// application's that is discarded is logged, naming it, and counted; its
// attributes that only the collector or the pipeline's processors may set
// (k8s.*, host.*, ...) are counted and logged at debug level, once for
// the connection. Both logs are rate-limited (claimLog).
func (rs *resources) peer(p *agent.Peer, serviceOverride string, log *zap.Logger) *translate.Peer {
	h := &p.Hello
	if h.Flags&agentwire.HelloResource == 0 {
		h = &agentwire.Hello{} // an older shim: no extension, nothing to parse
	}
	pid := uint32(max(p.PID, 0))
	res := procres.New(procres.Process{PID: pid, Start: p.Proc.Start, Session: p.Session,
		ExePath: p.Proc.ExePath, ExeName: p.Proc.Comm, Cgroup: p.Proc.Cgroup, HostName: rs.hostName,
		ServiceOverride: serviceOverride, EnvServiceName: h.ServiceName, EnvResAttrs: h.ResAttrs,
		ServiceOmitted: h.Omitted&agentwire.OmittedServiceName != 0, ResAttrsOmitted: h.Omitted&agentwire.OmittedResAttrs != 0})
	rs.rejected.Add(uint64(len(res.Errs)))
	rs.dropped.Add(uint64(len(res.Dropped)))
	if len(res.Errs) > 0 || len(res.Dropped) > 0 {
		rs.report(p, res, log)
	}
	exe, _ := res.Attrs.Get("process.executable.name")
	return &translate.Peer{PID: pid, UID: p.UID, Exe: exe.Str(), Start: p.Proc.Start, Resource: res.Attrs}
}

// report logs what peer left out of a client's variables, within the
// rate limit.
func (rs *resources) report(p *agent.Peer, res procres.Resource, log *zap.Logger) {
	ok, suppressed := rs.logs.allow(time.Now())
	if !ok {
		return
	}
	fields := []zap.Field{zap.Int32("pid", p.PID), zap.Uint32("session", p.Session)}
	fields = fields[:len(fields):len(fields)] // each append below copies
	if suppressed > 0 {
		fields = append(fields, zap.Int("reports_suppressed", suppressed))
	}
	for _, err := range res.Errs {
		log.Warn("gpuprobe: a client's resource variable is discarded", append(fields, zap.Error(err))...)
	}
	if len(res.Dropped) > 0 {
		log.Debug("gpuprobe: a client's resource attributes that the collector sets are ignored",
			append(fields, zap.Strings("keys", res.Dropped))...)
	}
}
