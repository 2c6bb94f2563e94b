package translate

// Resources: the process a span or metric describes. A connected client's
// comes from its Peer (built by the receiver from what the agent server
// read of the process and what its HELLO said); any other process's (host
// probes, a source connected without one) is built here from what is
// known: its pid and executable name.

import (
	"github.com/gpuprobe/gpuprobe/receiver/internal/procres"
	"go.opentelemetry.io/collector/pdata/pcommon"
)

// peerResource builds the resource of a client connected without one.
func (o *Options) peerResource(src uint32, p *Peer) pcommon.Map {
	m, _ := procres.Build(procres.Process{PID: p.PID, Start: p.Start, Session: src, ExeName: p.Exe,
		HostName: o.Process.HostName, ServiceOverride: o.Process.ServiceName})
	return m
}

// overflowResource is the resource of the processes beyond MaxProcesses.
func (o *Options) overflowResource() pcommon.Map {
	m, _ := procres.Build(procres.Process{HostName: o.Process.HostName, ServiceOverride: o.Process.ServiceName})
	return m
}

// fillResource puts the resource of process pid into attrs: its connected
// client's, else one of its pid and executable name.
func (ct *clientTable) fillResource(attrs pcommon.Map, pid uint32) {
	if c := ct.peers[pid]; c != nil && c.res != (pcommon.Map{}) {
		c.res.CopyTo(attrs)
		return
	}
	m, _ := procres.Build(procres.Process{PID: pid, ExeName: ct.processName(pid),
		HostName: ct.o.Process.HostName, ServiceOverride: ct.o.Process.ServiceName})
	m.MoveTo(attrs)
}
