package translate

// Resources: the process a span or metric describes. A connected client's
// comes from its Peer (built by the receiver from what the agent server
// read of the process and what its HELLO said); any other process's (host
// probes, a source connected without one) is built here from what is
// known: its pid and executable name.

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpuprobe/gpuprobe/internal/procread"
	"github.com/gpuprobe/gpuprobe/receiver/internal/procres"
	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pcommon"
)

// resourceBook owns what spans say of the process and device they describe:
// the resources and executable names of connected clients by peer pid, the
// executable names of other processes, and the devices each source
// reported. The client table writes it (connect, onDevice, forget) and
// validates device numbers against it; spanOut reads it.
type resourceBook struct {
	o       *Options
	peers   map[uint32]peerRes           // peer pid of a connected client → its resource
	procs   map[uint32]string            // pid → executable name (host probes, unconnected sources)
	unnamed map[uint32]time.Time         // pid → when its name could not be read (retried after nameRetry)
	now     func() time.Time             // time.Now when nil (tests set it)
	devices map[uint32]map[uint32]string // source → reported device ordinal → UUID, ≤ MaxDevices
}

// peerRes is a connected client's resource and executable name.
type peerRes struct {
	src uint32
	exe string
	res pcommon.Map
}

// connect records the resource of source src, connected as process pid.
func (rb *resourceBook) connect(pid, src uint32, exe string, res pcommon.Map) {
	if pid != 0 {
		rb.peers[pid] = peerRes{src: src, exe: exe, res: res}
	}
}

// forget drops the devices of source src and, while it is pid's latest
// connection, its resource.
func (rb *resourceBook) forget(pid, src uint32) {
	if c, ok := rb.peers[pid]; ok && pid != 0 && c.src == src {
		delete(rb.peers, pid)
	}
	delete(rb.devices, src)
}

// devicesOf returns the devices source src reported (nil: none).
func (rb *resourceBook) devicesOf(src uint32) map[uint32]string { return rb.devices[src] }

// putDeviceOf records device ordinal d of source src with its UUID.
func (rb *resourceBook) putDeviceOf(src, d uint32, uuid string) {
	devs := rb.devices[src]
	if devs == nil {
		devs = map[uint32]string{}
		rb.devices[src] = devs
	}
	devs[d] = uuid
}

// putDevice puts the device index and, when src reported it, its UUID.
func (rb *resourceBook) putDevice(a pcommon.Map, src, dev uint32) {
	a.PutInt("cuda.device.index", deviceIndex(dev))
	if u, ok := rb.devices[src][dev]; ok {
		a.PutStr("cuda.device.uuid", u)
	}
}

// processName returns the executable name of pid, cached.
func (rb *resourceBook) processName(pid uint32) string {
	if c, ok := rb.peers[pid]; ok && c.exe != "" {
		return c.exe // a connected client's, read at connect
	}
	if n, ok := rb.procs[pid]; ok {
		return n
	}
	now := time.Now
	if rb.now != nil {
		now = rb.now
	}
	if at, ok := rb.unnamed[pid]; ok && now().Sub(at) < nameRetry {
		return ""
	}
	var n string
	if rb.o.ProcessName != nil {
		n = rb.o.ProcessName(pid)
	} else {
		n = ProcName(pid)
	}
	n = record.Sanitize(n, maxExeLen)
	if n == "" {
		// Gone or unreadable: a later record may know it, but not every
		// record of the pid pays the /proc reads again.
		if rb.unnamed == nil || len(rb.unnamed) >= 4096 {
			rb.unnamed = map[uint32]time.Time{}
		}
		rb.unnamed[pid] = now()
		return ""
	}
	delete(rb.unnamed, pid)
	if len(rb.procs) > 4096 {
		clear(rb.procs)
	}
	rb.procs[pid] = n
	return n
}

// nameRetry is how long a pid whose name could not be read is not read
// again.
const nameRetry = time.Second

// maxComm bounds the read of /proc/PID/comm (the kernel keeps 16 bytes).
const maxComm = 64

// ProcName returns the executable name of pid: the base name of
// /proc/PID/exe, else /proc/PID/comm (cut at 15 bytes by the kernel), ""
// if the process is gone.
func ProcName(pid uint32) string {
	dir := "/proc/" + strconv.FormatUint(uint64(pid), 10)
	if exe, err := os.Readlink(dir + "/exe"); err == nil && exe != "" {
		return filepath.Base(strings.TrimSuffix(exe, " (deleted)"))
	}
	b, err := procread.File(dir+"/comm", maxComm)
	if err != nil && !errors.Is(err, procread.ErrTruncated) {
		return ""
	}
	return strings.TrimSpace(string(b))
}

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
func (rb *resourceBook) fillResource(attrs pcommon.Map, pid uint32) {
	if c, ok := rb.peers[pid]; ok && c.res != (pcommon.Map{}) {
		c.res.CopyTo(attrs)
		return
	}
	m, _ := procres.Build(procres.Process{PID: pid, ExeName: rb.processName(pid),
		HostName: rb.o.Process.HostName, ServiceOverride: rb.o.Process.ServiceName})
	m.MoveTo(attrs)
}
