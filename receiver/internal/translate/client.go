package translate

// Per-client state: what one client (a source: one authenticated agent
// connection and its rings) has told the translator, and who the agent
// server says it is. Nothing a client writes changes another client's
// state: its device identities (ordinal → UUID), clock fit (clock.Mapper,
// by source and ordinal), pid, executable and resource are its own, and
// all of it goes when the client leaves. Its metric series are its
// process's (series.go), kept a while after it leaves. Its kernel names
// (function handle → mangled name) are demangled once per name and key
// its process's per-kernel series.

import (
	"strconv"
	"strings"
	"time"

	"github.com/gpuprobe/gpuprobe/receiver/internal/clock"
	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pcommon"
)

// Bounds of what one client's records may create.
const (
	// MaxDevices bounds the device ordinals of one client: the devices
	// it reported in Device records, or, before any, 0..MaxDevices-1.
	MaxDevices = clock.MaxDevices
	// OtherDevice is the device that every other device number folds
	// into; its series carry cuda.device.index -1.
	OtherDevice = ^uint32(0)

	maxExeLen = 255 // bytes of an executable name (NAME_MAX)
)

// Peer is what the agent server vouches for about a client: the
// credentials of its connection (SO_PEERCRED) and what /proc said of its
// process, read once at connect.
type Peer struct {
	PID   uint32 // in the collector's pid namespace; 0: unknown, records' pids are used
	UID   uint32 // from SO_PEERCRED: the share of series its process draws on (budget.go)
	Exe   string // executable name; "" when it could not be read
	Start uint64 // the process's start time (ticks after boot); 0: unknown, the client is a process of its own
	// Resource is the process's resource (procres.Build); the zero Map:
	// one is built from PID and Exe.
	Resource pcommon.Map
}

// clientTable owns the state of each source (producer connection): its
// devices, kernel handles, streams and pending-launch queue, and the
// executable names of processes.
type clientTable struct {
	o        *Options
	counters *Counters
	series   *seriesStore
	res      *resourceBook // its devices and resource, as spans show them (resource.go)

	byID map[uint32]*client // source → its state
	last *client            // the source looked up last: records come in runs of one
}

// client is the state of one source.
type client struct {
	src     uint32
	peer    Peer
	res     pcommon.Map       // its spans' resource (set with proc)
	proc    *procSeries       // its process's metric series (nil until needed)
	devices map[uint32]string // reported device ordinal → UUID, ≤ MaxDevices
	lastDev uint32            // device of its latest launch
	kernels handleTable       // function handle → kernel, ≤ maxKernelHandles, ≤ ClientBudget.NameBytes (budget.go)
	win     clientWindows     // its driver windows' state and graph launch calls (windows.go)
	spans   threadSpans       // its threads' application span contexts, ≤ maxThreadContexts (spancontext.go)
	stacks  threadStacks      // its threads' launch stacks, ≤ maxThreadContexts (stacks.go)
}

// Connect binds source src to the connection credentials p. Spans and
// metrics of src carry p.Resource (else one of p.PID and p.Exe), whatever
// pid its records claim; its metric series are those of its process (p.PID
// and p.Start), kept across its reconnects.
func (t *Translator) Connect(src uint32, p Peer) {
	p.Exe = record.Sanitize(p.Exe, maxExeLen)
	t.clients.connect(src, p)
	t.hw.connect(src, p.UID)
}

func (ct *clientTable) connect(src uint32, p Peer) {
	c := ct.clientOf(src)
	if c.proc != nil {
		ct.series.release(c.proc, time.Now())
		c.proc = nil
	}
	c.peer = p
	ct.bindProc(c)
	ct.res.connect(p.PID, src, p.Exe, c.res)
}

// bindLaunch takes launch record r of source src: it notes the process's
// name (while the process is alive: spans are built later) and the
// client's latest device, and returns the kernel r's function handle is
// bound to.
func (ct *clientTable) bindLaunch(src uint32, r *record.Launch) *kernel {
	ct.res.processName(r.PID)
	ct.clientOf(src).lastDev = r.Device
	return ct.kernelOf(src, r.Function)
}

// procOf returns the metric series of source src's process, made on first
// use.
func (ct *clientTable) procOf(src uint32) *procSeries {
	c := ct.clientOf(src)
	if c.proc == nil {
		ct.bindProc(c)
	}
	return c.proc
}

// bindProc gives client c its resource and its process's series.
func (ct *clientTable) bindProc(c *client) {
	c.res = c.peer.Resource
	if c.res == (pcommon.Map{}) {
		c.res = ct.o.peerResource(c.src, &c.peer)
	}
	key := procKey{pid: c.peer.PID, start: c.peer.Start}
	if key.pid == 0 || key.start == 0 {
		key = procKey{src: c.src}
	}
	c.proc = ct.series.acquire(key, c.peer.UID, func() pcommon.Map { return c.res })
}

// Disconnect ends source src (its rings are drained): its pending launches
// are emitted now, and all its state is freed but its process's metric
// series, kept Options.Process.Retention.
func (t *Translator) Disconnect(src uint32, now time.Time) {
	var pid uint32
	if c := t.clients.get(src); c != nil {
		pid = c.peer.PID
	}
	if pid != 0 {
		defer t.spans.limit.gone(pid) // after its last spans
	}
	t.launches.forget(src, pid, now)
	t.hw.forgetSource(src)
	if pid != 0 {
		if mono, ok := t.monoNow(now); ok {
			t.hw.forgetPID(pid, mono)
		}
		t.shares.forget(pid)
		t.spans.sym.Forget(pid) // its maps and code objects; the pid may be reused
	}
	t.clients.forget(src, now)
	t.o.Clock.Forget(src)
}

// size is the number of sources with state.
func (ct *clientTable) size() int { return len(ct.byID) }

// get returns the state of source src, nil if it has none.
func (ct *clientTable) get(src uint32) *client {
	if c := ct.last; c != nil && c.src == src {
		return c
	}
	return ct.byID[src]
}

// forget drops the state of source src (disconnected).
func (ct *clientTable) forget(src uint32, now time.Time) {
	c := ct.byID[src]
	if c == nil {
		return
	}
	ct.res.forget(c.peer.PID, src)
	if c.proc != nil {
		ct.series.release(c.proc, now)
	}
	delete(ct.byID, src)
	ct.last = nil
}

// Clients is the number of sources with state.
func (t *Translator) Clients() int { return t.clients.size() }

// clientOf returns the state of source src, created on first use (sources
// are numbered by the receiver, never by records).
func (ct *clientTable) clientOf(src uint32) *client {
	if c := ct.last; c != nil && c.src == src {
		return c
	}
	c := ct.byID[src]
	if c == nil {
		c = &client{src: src, kernels: handleTable{byFn: map[uint64]*kernel{}}}
		ct.byID[src] = c
	}
	ct.last = c
	return c
}

// device validates a device number of a record: one the client reported,
// or before any report one below MaxDevices; else OtherDevice (counted).
func (ct *clientTable) device(c *client, d uint32) uint32 {
	if devs := ct.res.devicesOf(c.src); len(devs) > 0 {
		if _, ok := devs[d]; ok {
			return d
		}
	} else if d < MaxDevices {
		return d
	}
	ct.counters.DevicesFolded++
	return OtherDevice
}

// pid is the pid of a record of client c: its peer's, when known.
func (c *client) pid(recPID uint32) uint32 {
	if c.peer.PID != 0 {
		return c.peer.PID
	}
	return recPID
}

// onDevice records a device the client reports (at most MaxDevices).
func (ct *clientTable) onDevice(c *client, d *record.Device) {
	devs := ct.res.devicesOf(c.src)
	if _, ok := devs[d.Device]; !ok && (d.Device >= MaxDevices || len(devs) >= MaxDevices) {
		ct.counters.DevicesFolded++
		return
	}
	uuid := deviceUUID(d)
	ct.res.putDeviceOf(c.src, d.Device, uuid)
	ct.procOf(c.src).putDevice(d.Device, uuid)
}

// deviceUUID is a device's cuda.device.uuid: the bare UUID, as OBI writes
// it (nvidia-smi's, less its "GPU-" or "MIG-" prefix). For a MIG instance
// it is the instance's own UUID (the shim sends cuDeviceGetUuid_v2's), so
// two instances of one GPU are two devices.
func deviceUUID(d *record.Device) string {
	return strings.TrimPrefix(d.UUIDString(), "GPU-")
}

// validate rewrites the client-supplied identity fields of a decoded record
// in place: device numbers folded (devs), the pid replaced by the peer's.
func (ct *clientTable) validate(src uint32, pid *uint32, devs ...*uint32) {
	c := ct.clientOf(src)
	for _, d := range devs {
		*d = ct.device(c, *d)
	}
	if pid != nil && src != HostProbeSource {
		*pid = c.pid(*pid)
	}
}

// LastDevice is the device of the latest launch read from source src (0
// before any).
func (t *Translator) LastDevice(src uint32) uint32 {
	if c := t.clients.get(src); c != nil {
		return c.lastDev
	}
	return 0
}

// deviceIndex is the cuda.device.index of a validated device number.
func deviceIndex(dev uint32) int64 {
	if dev == OtherDevice {
		return -1
	}
	return int64(dev)
}

// onKernelName records a function handle's kernel name. A later record
// for the handle replaces it: the shim names a handle again when the
// driver reuses it for another kernel, and sends a name whole after a cut
// copy when its names ring was full; a launch that came first was named by
// its handle. Only a cut copy of the name the handle has changes nothing.
// Launches already pending keep the kernel they were bound to. The names
// a client's handles hold stay within its budget (handleTable.room).
func (ct *clientTable) onKernelName(src uint32, k *record.KernelName) {
	c := ct.clientOf(src)
	if k.Truncated {
		ct.counters.NamesTruncated++
	}
	old, known := c.kernels.get(k.Function)
	if known && (old.mangled == k.Name || (k.Truncated && strings.HasPrefix(old.mangled, k.Name))) {
		return
	}
	mangled, name := k.Name, ""
	if k.Truncated {
		// A cut mangled name does not demangle: show it as it is, marked.
		mangled += TruncatedMarker
		name = mangled
	} else {
		name = ct.series.demangle(k.Name)
	}
	kn := &kernel{mangled: mangled, hash: record.NameHash(k.Name), name: name}
	if !c.kernels.room(k.Function, kn.cost(), ct.o.nameBudget(), &ct.counters.NamesEvicted) {
		// The budget is held by pending launches' handles: this one's
		// launches count under "other" until it is named again.
		ct.counters.NamesRefused++
		kn.refuse(ct.procOf(src))
	} else {
		kn.series = ct.procOf(src).seriesFor(name)
	}
	kn.include = ct.o.Filter.Match(k.Name, name)
	c.kernels.put(k.Function, kn)
}

// demangle returns the span name of a mangled name, cached: every process
// (source) names the same kernels again. The cache holds at most
// maxNameCache names and maxNameCacheBytes bytes; it starts over when full.
func (sr *seriesStore) demangle(mangled string) string {
	if n, ok := sr.names[mangled]; ok {
		return n
	}
	n := sr.o.Demangle(mangled)
	cost := len(mangled) + len(n) + nameCacheEntryCost
	if len(sr.names) >= maxNameCache || sr.nameBytes+cost > maxNameCacheBytes {
		clear(sr.names)
		sr.nameBytes = 0
	}
	sr.names[mangled] = n
	sr.nameBytes += cost
	return n
}

// kernelOf returns the kernel source src's function handle fn is bound
// to; a handle never named (or forgotten) is named by its handle.
func (ct *clientTable) kernelOf(src uint32, fn uint64) *kernel {
	c := ct.clientOf(src)
	if k, ok := c.kernels.get(fn); ok {
		return k
	}
	name := "function@0x" + strconv.FormatUint(fn, 16)
	k := &kernel{mangled: name, name: name, include: ct.o.Filter.Match(name)}
	if c.kernels.room(fn, k.cost(), ct.o.nameBudget(), &ct.counters.NamesEvicted) {
		k.series = ct.procOf(src).seriesFor(name)
	} else {
		ct.counters.NamesRefused++
		k.refuse(ct.procOf(src))
	}
	c.kernels.put(fn, k)
	return k
}
