package procres

import (
	"crypto/sha1"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pcommon"
)

// Process is what is known of a process when its resource is built.
type Process struct {
	// The collector's own facts.
	PID      uint32 // from SO_PEERCRED (0: unknown, outside the collector's pid namespace)
	Start    uint64 // start time in clock ticks after boot (0: unknown)
	Session  uint32 // the agent session: names the instance when PID or Start is unknown
	ExePath  string // /proc/PID/exe ("": unknown)
	ExeName  string // the executable's name when ExePath is unknown (/proc/PID/comm)
	Cgroup   string // /proc/PID/cgroup: container.id, k8s.pod.uid
	HostName string // the collector's host name

	// The operator's resource::service_name ("": none).
	ServiceOverride string

	// The application's, from its HELLO: OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES, and whether its shim left either out as
	// too long.
	EnvServiceName, EnvResAttrs     string
	ServiceOmitted, ResAttrsOmitted bool
}

// Bounds of the executable's path (PATH_MAX) and name (NAME_MAX).
const (
	maxExePath = 4096
	maxExeName = 255
)

// Resource is the resource of a process, and what was left out of the
// application's variables.
type Resource struct {
	Attrs   pcommon.Map
	Errs    []error  // a *FieldError for each variable discarded whole
	Dropped []string // the application's attribute keys that are Protected, ignored
}

// Build returns the resource attributes of p, and an error (a *FieldError)
// for each of the application's variables that was discarded.
func Build(p Process) (pcommon.Map, []error) {
	r := New(p)
	return r.Attrs, r.Errs
}

// New returns the resource of p.
//
// service.name is resource::service_name, else OTEL_SERVICE_NAME, else the
// service.name of OTEL_RESOURCE_ATTRIBUTES, else
// "unknown_service:<executable name>" (the SDK specification's default).
// service.instance.id is a UUID (version 5) of the host name, pid and
// start time, the same for every connection of the process (of the agent
// session where those are unknown; none without either). The
// application's attributes of Protected keys are dropped and listed.
// container.id and k8s.pod.uid are what /proc/PID/cgroup names, for
// k8s_attributes to find the pod by.
func New(p Process) Resource {
	var errs []error
	svc := ""
	if p.ServiceOmitted {
		errs = append(errs, &FieldError{Field: EnvServiceName, Reason: "longer than the 256 bytes HELLO carries, left out by the shim"})
	} else if s, err := ParseServiceName(p.EnvServiceName); err != nil {
		errs = append(errs, err)
	} else {
		svc = s
	}
	var attrs []Attr
	if p.ResAttrsOmitted {
		errs = append(errs, &FieldError{Field: EnvResAttrs, Reason: "longer than the 4096 bytes HELLO carries, left out by the shim"})
	} else if as, err := ParseResAttrs(p.EnvResAttrs); err != nil {
		errs = append(errs, err)
	} else {
		attrs = as
	}

	m := pcommon.NewMap()
	m.EnsureCapacity(8 + len(attrs))
	exe, path := p.ExeName, record.Sanitize(p.ExePath, maxExePath)
	if path != "" {
		exe = filepath.Base(path)
	}
	exe = record.Sanitize(exe, maxExeName)
	if p.PID != 0 {
		m.PutInt("process.pid", int64(p.PID))
	}
	if exe != "" {
		m.PutStr("process.executable.name", exe)
	}
	if path != "" {
		m.PutStr("process.executable.path", path)
	}
	if id := ContainerID(p.Cgroup); id != "" {
		m.PutStr("container.id", id)
	}
	if uid := PodUID(p.Cgroup); uid != "" {
		m.PutStr("k8s.pod.uid", uid)
	}
	if p.HostName != "" {
		m.PutStr("host.name", p.HostName)
	}
	var dropped []string
	for _, a := range attrs {
		switch {
		case Protected(a.Key):
			dropped = append(dropped, a.Key)
		case a.Key == "service.name":
			if svc == "" {
				svc = a.Value
			}
		default:
			m.PutStr(a.Key, a.Value)
		}
	}
	switch {
	case p.ServiceOverride != "":
		svc = p.ServiceOverride
	case svc == "" && exe != "":
		svc = "unknown_service:" + exe
	case svc == "":
		svc = "unknown_service"
	}
	m.PutStr("service.name", svc)
	if p.PID != 0 && p.Start != 0 || p.Session != 0 {
		m.PutStr("service.instance.id", p.instanceID())
	}
	return Resource{Attrs: m, Errs: errs, Dropped: dropped}
}

// instanceNamespace is the UUID namespace of generated instance ids (the
// one the semantic conventions suggest for service.instance.id).
var instanceNamespace = [16]byte{0x4d, 0x63, 0x00, 0x9a, 0x8d, 0x0f, 0x11, 0xee, 0xaa, 0xd7, 0x4c, 0x79, 0x6e, 0xd8, 0xe3, 0x20}

// instanceID is a version 5 UUID of the host name and the process's pid
// and start time (or the agent session, when either is unknown).
func (p *Process) instanceID() string {
	name := p.HostName + "/" + strconv.FormatUint(uint64(p.PID), 10) + "/" + strconv.FormatUint(p.Start, 10)
	if p.PID == 0 || p.Start == 0 {
		name = p.HostName + "/session/" + strconv.FormatUint(uint64(p.Session), 10)
	}
	h := sha1.New()
	h.Write(instanceNamespace[:])
	h.Write([]byte(name))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x50 // version 5
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}
