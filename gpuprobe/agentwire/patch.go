package agentwire

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Limits of the PATCH exchange (see the package comment).
const (
	MaxImage      = 256 << 20 // largest code image in a PATCH or PATCHED memfd
	MaxInitBytes  = 256       // largest initial contents of a device global's block
	patchHeader   = 24        // bytes of the fixed part of PATCH
	patchedHeader = 32        // bytes of the fixed part of PATCHED
	kernelHeader  = 12        // bytes of a PATCHED kernel descriptor before its name
	globalHeader  = 32        // bytes of a PATCHED global descriptor before its name
	noPatchHeader = 12        // bytes of NOPATCH before its message
)

// Patch flags.
const (
	PatchImageMemfd uint32 = 1 // the image travels in a memfd (one SCM_RIGHTS descriptor), not inline
)

// LoadAPI says which driver call loads the image (informational; the shim
// loads the patched image with the same call).
type LoadAPI uint32

// Load APIs.
const (
	APIModule  LoadAPI = 1 // cuModuleLoadData / cuModuleLoadDataEx / cuModuleLoadFatBinary
	APILibrary LoadAPI = 2 // cuLibraryLoadData
	// APISASS asks for the Compute Sanitizer route's patch module for the
	// client's device (Arch): the user GPU programs as patch functions,
	// with kernel_phases' in the same module (the shim patches a CUDA
	// context with one patch image). The PATCH's Image is empty (size 0,
	// inline). The PATCHED answer's Image is the module's PTX,
	// NUL-terminated, for ptxas --compile-as-tools-patch on the node;
	// Kernels are the programs' targets, one per program: Name is the
	// kernel name or path.Match pattern the program probes (as in a PTX
	// module: mangled, qualified or base name; "*" every kernel) and
	// ParamIndex its bit: the shim sets bit SASSTargetShift + ParamIndex
	// of a sampled launch's userdata when the kernel matches, and the
	// program runs only then. Globals are in module order: global i's initial
	// value in the module is the magic SASSMagicBase + i, which the shim
	// replaces in the compiled image with the value its descriptor says
	// (the same kinds as for PTX). kernel_phases' own globals keep the
	// built-in image's magics and are not among them.
	APISASS LoadAPI = 3
	// APISASSKernels asks which kernels the Compute Sanitizer route may
	// probe (kernels::include/exclude) and how often (device_one_in). The
	// PATCH's Image (inline) is at most SASSMaxQuery kernel names, each
	// NUL-terminated (ParseKernelQuery). The PATCHED answer's Image is
	// empty; Kernels name those the route may probe, Name as asked and
	// ParamIndex its index in the query; DeviceOneIn applies to them.
	APISASSKernels LoadAPI = 4
)

// SASSMaxQuery bounds the kernel names of an APISASSKernels PATCH.
const SASSMaxQuery = 64

// ParseKernelQuery splits an APISASSKernels PATCH's image into its kernel
// names; an error names the byte offset that breaks the format.
func ParseKernelQuery(img []byte) ([]string, error) {
	var names []string
	for off := 0; off < len(img); {
		n := bytes.IndexByte(img[off:], 0)
		switch {
		case n < 0:
			return nil, fmt.Errorf("kernel query: name at image offset %d has no terminating NUL", off)
		case n == 0 || n > MaxKernelName:
			return nil, fmt.Errorf("kernel query: name at image offset %d is %d bytes, want 1..%d", off, n, MaxKernelName)
		case len(names) == SASSMaxQuery:
			return nil, fmt.Errorf("kernel query: name at image offset %d is past the %d names a query may hold", off, SASSMaxQuery)
		}
		names = append(names, string(img[off:off+n]))
		off += n + 1
	}
	return names, nil
}

// SASSMagicBase is the initial value of global 0 of an APISASS module;
// global i starts as SASSMagicBase + i.
const SASSMagicBase uint64 = 0x4750534700000000

// The program bits of an APISASS module's userdata: the low SASSTargetShift
// bits are the launch id, bit SASSTargetShift + i says program i runs.
const (
	SASSTargetShift = 48
	SASSMaxPrograms = 15 // bits 48..62
)

// PatchRequest is a client's PATCH: a code image and the device it runs on.
type PatchRequest struct {
	ID    uint32  // request id, echoed in the answer
	Arch  uint32  // the device's SM number (90 for sm_90)
	API   LoadAPI // the load call the application made
	Image []byte  // the image: fatbin container, cubin or PTX text
}

// GlobalKind says how the shim computes the value of a module global.
type GlobalKind uint32

// Global kinds of a PATCHED answer.
const (
	// GlobalRegion: the device address (cuMemHostGetDevicePointer after
	// cuMemHostRegister DEVICEMAP) of WELCOME region Region, plus Value.
	GlobalRegion GlobalKind = 1
	// GlobalConst: Value itself.
	GlobalConst GlobalKind = 2
	// GlobalRingBlock: the device reservation block of the ring in WELCOME
	// region Region: allocated once per region and process (cuMemAlloc of
	// Size bytes, filled with Init on allocation) and shared by every
	// module that writes the ring.
	GlobalRingBlock GlobalKind = 3
	// GlobalDeviceAlloc: device memory private to the module, Size bytes,
	// zeroed. Globals of one module with the same Region number share one
	// allocation (Region is an allocation number, not a WELCOME region).
	GlobalDeviceAlloc GlobalKind = 4
	// GlobalDeviceMap: the device copy of WELCOME region Region (shm
	// package comment, "Device-resident maps"), plus Value: allocated
	// once per region and process with the region's size, filled from the
	// host region, mirrored back every Size microseconds (0: 10 ms) by the
	// shim's thread. If it cannot be allocated the global is 0.
	GlobalDeviceMap GlobalKind = 5
)

// String names the kind.
func (k GlobalKind) String() string {
	switch k {
	case GlobalRegion:
		return "region"
	case GlobalConst:
		return "const"
	case GlobalRingBlock:
		return "ring-block"
	case GlobalDeviceAlloc:
		return "device-alloc"
	case GlobalDeviceMap:
		return "device-map"
	}
	return fmt.Sprintf("GlobalKind(%d)", uint32(k))
}

// PatchedKernel is one patched kernel and where its hidden launch-id
// parameter goes.
type PatchedKernel struct {
	Name        string // mangled name (cuModuleGetFunction's)
	ParamIndex  uint32 // kernelParams index of the launch id (the kernel's own parameter count)
	ParamOffset uint32 // byte offset of the launch id in a CU_LAUNCH_PARAM_BUFFER_POINTER buffer
}

// PatchedGlobal is one module-scope .u64 the shim sets after loading.
type PatchedGlobal struct {
	Name   string     // the global's name in the module
	Kind   GlobalKind // how to compute its value
	Region uint32     // WELCOME region index (GlobalRegion, GlobalRingBlock, GlobalDeviceMap) or allocation number (GlobalDeviceAlloc)
	Value  uint64     // constant, or offset into the region
	Size   uint64     // bytes to allocate (GlobalRingBlock, GlobalDeviceAlloc); mirror period in µs (GlobalDeviceMap)
	Init   []byte     // initial contents of a GlobalRingBlock
}

// Patched is the server's PATCHED answer.
type Patched struct {
	ID      uint32          // the request's id
	Image   []byte          // the patched PTX, NUL-terminated (travels in a memfd)
	Kernels []PatchedKernel // the patched kernels, in module order
	Globals []PatchedGlobal // the globals to set before the first launch
	// DeviceOneIn: the shim gives a launch of these kernels its launch id
	// in one launch in DeviceOneIn (chosen by a hash of the id) and launch
	// id 0 to the others, which the probes skip; 0 and 1 mean every launch.
	DeviceOneIn uint32
	// DeviceMaxPerSecond: the shim gives a launch id to at most this many
	// launches per second of each patched kernel (a launch at least
	// 1/DeviceMaxPerSecond after the last one it gave an id to); 0: no
	// limit. Applied after DeviceOneIn.
	DeviceMaxPerSecond uint32
}

// NoPatchCode says why an image was not patched.
type NoPatchCode uint32

// NOPATCH codes.
const (
	NoPatchNoPTX    NoPatchCode = 1 // the image has no PTX usable on the device
	NoPatchNoKernel NoPatchCode = 2 // no probe targets a kernel of the image
	NoPatchError    NoPatchCode = 3 // parsing, injection or the answer failed
	NoPatchDisabled NoPatchCode = 4 // the server patches nothing (no probes configured)
)

// String names the code.
func (c NoPatchCode) String() string {
	switch c {
	case NoPatchNoPTX:
		return "no PTX"
	case NoPatchNoKernel:
		return "no kernel targeted"
	case NoPatchError:
		return "patch error"
	case NoPatchDisabled:
		return "patching disabled"
	}
	return fmt.Sprintf("NoPatchCode(%d)", uint32(c))
}

// NoPatch is a NOPATCH answer; as an error from a Patch callback it is
// sent as is.
type NoPatch struct {
	ID      uint32      // the request's id
	Code    NoPatchCode // why
	Message string      // details, <= MaxErrorMsg bytes
}

// Error implements error.
func (n *NoPatch) Error() string { return fmt.Sprintf("agent: not patched: %v: %s", n.Code, n.Message) }

// MarshalPatch encodes a PATCH frame. With memfd set, the image is not in
// the frame: the caller sends it as one descriptor with the frame.
func MarshalPatch(r *PatchRequest, memfd bool) ([]byte, error) {
	if len(r.Image) > MaxImage {
		return nil, fmt.Errorf("agent: PATCH image of %d bytes exceeds %d", len(r.Image), MaxImage)
	}
	le := binary.LittleEndian
	p := le.AppendUint32(nil, r.ID)
	p = le.AppendUint32(p, r.Arch)
	p = le.AppendUint32(p, uint32(r.API))
	flags := uint32(0)
	if memfd {
		flags = PatchImageMemfd
	}
	p = le.AppendUint32(p, flags)
	p = le.AppendUint64(p, uint64(len(r.Image)))
	if !memfd {
		if len(p)+len(r.Image) > MaxPayload {
			return nil, fmt.Errorf("agent: inline PATCH image of %d bytes exceeds the %d-byte frame; use a memfd", len(r.Image), MaxPayload-patchHeader)
		}
		p = append(p, r.Image...)
	}
	return AppendFrame(nil, FramePatch, p), nil
}

// UnmarshalPatch decodes a PATCH payload. With PatchImageMemfd in flags
// the image is not in the payload and Image is nil: the size is returned
// for the caller to read that many bytes from the descriptor.
func UnmarshalPatch(p []byte) (r PatchRequest, flags uint32, size uint64, err error) {
	le := binary.LittleEndian
	if len(p) < patchHeader {
		return r, 0, 0, &ProtocolError{CodeProtocol, fmt.Sprintf("PATCH payload of %d bytes, want at least %d", len(p), patchHeader)}
	}
	r = PatchRequest{ID: le.Uint32(p), Arch: le.Uint32(p[4:]), API: LoadAPI(le.Uint32(p[8:]))}
	flags, size = le.Uint32(p[12:]), le.Uint64(p[16:])
	if flags&^PatchImageMemfd != 0 {
		return r, flags, size, &ProtocolError{CodeProtocol, fmt.Sprintf("PATCH flags %#x at payload offset 12 has unknown bits", flags)}
	}
	if size > MaxImage {
		return r, flags, size, &ProtocolError{CodeProtocol, fmt.Sprintf("PATCH image_size %d at payload offset 16 exceeds %d", size, MaxImage)}
	}
	rest := uint64(len(p) - patchHeader)
	if flags&PatchImageMemfd != 0 {
		if rest != 0 {
			return r, flags, size, &ProtocolError{CodeProtocol, fmt.Sprintf("PATCH with a memfd image has %d inline bytes at payload offset %d, want 0", rest, patchHeader)}
		}
		return r, flags, size, nil
	}
	if rest != size {
		return r, flags, size, &ProtocolError{CodeProtocol, fmt.Sprintf("PATCH image_size %d at payload offset 16, but %d bytes follow", size, rest)}
	}
	r.Image = p[patchHeader:]
	return r, flags, size, nil
}

// MarshalPatched encodes a PATCHED frame; the image travels in a memfd
// beside it.
func MarshalPatched(a *Patched) ([]byte, error) {
	if len(a.Image) > MaxImage {
		return nil, fmt.Errorf("agent: PATCHED image of %d bytes exceeds %d", len(a.Image), MaxImage)
	}
	le := binary.LittleEndian
	p := le.AppendUint32(nil, a.ID)
	p = le.AppendUint32(p, uint32(len(a.Kernels)))
	p = le.AppendUint32(p, uint32(len(a.Globals)))
	p = le.AppendUint32(p, a.DeviceOneIn)
	p = le.AppendUint64(p, uint64(len(a.Image)))
	p = le.AppendUint32(p, a.DeviceMaxPerSecond)
	p = le.AppendUint32(p, 0) // reserved
	for i, k := range a.Kernels {
		if len(k.Name) == 0 || len(k.Name) > MaxKernelName {
			return nil, fmt.Errorf("agent: PATCHED kernel %d name of %d bytes, want 1..%d", i, len(k.Name), MaxKernelName)
		}
		p = le.AppendUint32(p, k.ParamIndex)
		p = le.AppendUint32(p, k.ParamOffset)
		p = le.AppendUint32(p, uint32(len(k.Name)))
		p = append(p, k.Name...)
	}
	for i, g := range a.Globals {
		if len(g.Name) == 0 || len(g.Name) > MaxKernelName {
			return nil, fmt.Errorf("agent: PATCHED global %d name of %d bytes, want 1..%d", i, len(g.Name), MaxKernelName)
		}
		if len(g.Init) > MaxInitBytes || uint64(len(g.Init)) > g.Size {
			return nil, fmt.Errorf("agent: PATCHED global %s: %d init bytes for a %d-byte block (limit %d)", g.Name, len(g.Init), g.Size, MaxInitBytes)
		}
		p = le.AppendUint32(p, uint32(g.Kind))
		p = le.AppendUint32(p, g.Region)
		p = le.AppendUint64(p, g.Value)
		p = le.AppendUint64(p, g.Size)
		p = le.AppendUint32(p, uint32(len(g.Name)))
		p = le.AppendUint32(p, uint32(len(g.Init)))
		p = append(p, g.Name...)
		p = append(p, g.Init...)
	}
	if len(p) > MaxPayload {
		return nil, fmt.Errorf("agent: PATCHED description of %d bytes (%d kernels, %d globals) exceeds the %d-byte frame", len(p), len(a.Kernels), len(a.Globals), MaxPayload)
	}
	return AppendFrame(nil, FramePatched, p), nil
}

// MaxKernelName bounds kernel and global names in PATCHED.
const MaxKernelName = 4096

// UnmarshalPatched decodes a PATCHED payload; the image (image_size bytes,
// returned) comes from the descriptor and is not set.
func UnmarshalPatched(p []byte) (*Patched, uint64, error) {
	le := binary.LittleEndian
	bad := func(off int, format string, args ...any) error {
		return &ProtocolError{CodeProtocol, fmt.Sprintf("PATCHED at payload offset %d: ", off) + fmt.Sprintf(format, args...)}
	}
	if len(p) < patchedHeader {
		return nil, 0, bad(0, "payload of %d bytes, want at least %d", len(p), patchedHeader)
	}
	a := &Patched{ID: le.Uint32(p), DeviceOneIn: le.Uint32(p[12:]), DeviceMaxPerSecond: le.Uint32(p[24:])}
	nk, ng, size := le.Uint32(p[4:]), le.Uint32(p[8:]), le.Uint64(p[16:])
	if size > MaxImage {
		return nil, 0, bad(16, "image_size %d exceeds %d", size, MaxImage)
	}
	if uint64(nk)*kernelHeader+uint64(ng)*globalHeader > uint64(len(p)) {
		return nil, 0, bad(4, "%d kernels and %d globals do not fit in %d bytes", nk, ng, len(p))
	}
	off := patchedHeader
	name := func(at, n int) (string, error) {
		if n == 0 || n > MaxKernelName {
			return "", bad(at, "name length %d, want 1..%d", n, MaxKernelName)
		}
		if off+n > len(p) {
			return "", bad(at, "name of %d bytes runs past the payload end %d", n, len(p))
		}
		s := string(p[off : off+n])
		off += n
		return s, nil
	}
	for i := uint32(0); i < nk; i++ {
		if off+kernelHeader > len(p) {
			return nil, 0, bad(off, "kernel %d descriptor truncated", i)
		}
		k := PatchedKernel{ParamIndex: le.Uint32(p[off:]), ParamOffset: le.Uint32(p[off+4:])}
		n, at := int(le.Uint32(p[off+8:])), off+8
		off += kernelHeader
		var err error
		if k.Name, err = name(at, n); err != nil {
			return nil, 0, err
		}
		a.Kernels = append(a.Kernels, k)
	}
	for i := uint32(0); i < ng; i++ {
		if off+globalHeader > len(p) {
			return nil, 0, bad(off, "global %d descriptor truncated", i)
		}
		g := PatchedGlobal{Kind: GlobalKind(le.Uint32(p[off:])), Region: le.Uint32(p[off+4:]),
			Value: le.Uint64(p[off+8:]), Size: le.Uint64(p[off+16:])}
		if g.Kind < GlobalRegion || g.Kind > GlobalDeviceMap {
			return nil, 0, bad(off, "global %d kind %d unknown", i, g.Kind)
		}
		n, ni, at := int(le.Uint32(p[off+24:])), int(le.Uint32(p[off+28:])), off+24
		if ni > MaxInitBytes || uint64(ni) > g.Size {
			return nil, 0, bad(off+28, "global %d: %d init bytes for a %d-byte block (limit %d)", i, ni, g.Size, MaxInitBytes)
		}
		off += globalHeader
		var err error
		if g.Name, err = name(at, n); err != nil {
			return nil, 0, err
		}
		if off+ni > len(p) {
			return nil, 0, bad(off, "global %s: %d init bytes run past the payload end %d", g.Name, ni, len(p))
		}
		if ni > 0 {
			g.Init = append([]byte(nil), p[off:off+ni]...)
		}
		off += ni
		a.Globals = append(a.Globals, g)
	}
	if off != len(p) {
		return nil, 0, bad(off, "%d trailing bytes", len(p)-off)
	}
	return a, size, nil
}

// MarshalNoPatch encodes a NOPATCH frame (the message is cut to
// MaxErrorMsg).
func MarshalNoPatch(n *NoPatch) []byte {
	msg := n.Message
	if len(msg) > MaxErrorMsg {
		msg = msg[:MaxErrorMsg]
	}
	le := binary.LittleEndian
	p := le.AppendUint32(nil, n.ID)
	p = le.AppendUint32(p, uint32(n.Code))
	p = le.AppendUint32(p, uint32(len(msg)))
	p = append(p, msg...)
	return AppendFrame(nil, FrameNoPatch, p)
}

// UnmarshalNoPatch decodes a NOPATCH payload.
func UnmarshalNoPatch(p []byte) (*NoPatch, error) {
	le := binary.LittleEndian
	if len(p) < noPatchHeader {
		return nil, &ProtocolError{CodeProtocol, fmt.Sprintf("NOPATCH payload of %d bytes, want at least %d", len(p), noPatchHeader)}
	}
	n := le.Uint32(p[8:])
	if n > MaxErrorMsg || int(n) != len(p)-noPatchHeader {
		return nil, &ProtocolError{CodeProtocol, fmt.Sprintf("NOPATCH msg_len %d at payload offset 8 with %d bytes following", n, len(p)-noPatchHeader)}
	}
	return &NoPatch{ID: le.Uint32(p), Code: NoPatchCode(le.Uint32(p[4:])), Message: string(p[noPatchHeader:])}, nil
}
