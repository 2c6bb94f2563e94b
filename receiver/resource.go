package receiver

import (
	"sync/atomic"

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
}

// peer returns what the translator is told of a client: its pid from
// SO_PEERCRED, and the resource of its process built from what the agent
// server read of it in /proc and what its HELLO said. A variable of the
// application's that is discarded is logged, naming it, and counted; its
// attributes that only the collector or the pipeline's processors may set
// (k8s.*, host.*, ...) are counted and logged at debug level, once for
// the connection.
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
	for _, err := range res.Errs {
		rs.rejected.Add(1)
		log.Warn("gpuprobe: a client's resource variable is discarded", zap.Int32("pid", p.PID),
			zap.Uint32("session", p.Session), zap.Error(err))
	}
	if len(res.Dropped) > 0 {
		rs.dropped.Add(uint64(len(res.Dropped)))
		log.Debug("gpuprobe: a client's resource attributes that the collector sets are ignored", zap.Int32("pid", p.PID),
			zap.Uint32("session", p.Session), zap.Strings("keys", res.Dropped))
	}
	exe, _ := res.Attrs.Get("process.executable.name")
	return &translate.Peer{PID: pid, Exe: exe.Str(), Start: p.Proc.Start, Resource: res.Attrs}
}
