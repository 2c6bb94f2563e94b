package ptx

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/verifier"
)

// DefaultArch is the .target of generated PTX when Options.Arch is empty.
const DefaultArch = "sm_90"

// PTXVersion is the .version of every module this package writes.
const PTXVersion = "7.8"

// DefaultHostCallTimeout bounds how long a GPU thread waits for the host to
// answer a mailbox request before the helper returns -ETIMEDOUT.
const DefaultHostCallTimeout = 100 * time.Microsecond

// ETIMEDOUT is returned (negated) by host-call helpers that timed out.
const ETIMEDOUT = 110

// Options control code generation.
type Options struct {
	// Arch is the .target, e.g. "sm_90" (default). sm_70 is the minimum:
	// the warp helpers need activemask and the .sync shuffles.
	Arch string
	// Prefix starts every module-scope name the program declares (its
	// .func, subprograms and globals), so that several programs can be
	// spliced into one module. Default: "gpuprobe_" + the program name.
	Prefix string
	// PidTgid is what get_current_pid_tgid (helper 14) returns.
	PidTgid uint64
	// LoopBudget is how many backward jumps a run may take (0: jit.LoopBudget).
	LoopBudget int
	// HostCallTimeout bounds the wait for a host-call answer (0: 100 µs).
	HostCallTimeout time.Duration
	// Conformance enables the helpers of the bpf_conformance suite
	// (helper 5 "unwind": r0 = r1, and the program ends when r0 == 0),
	// and register calls (callx) that dispatch to them.
	Conformance bool
	// AssumeAligned trusts that every load and store through a pointer is
	// naturally aligned, and drops the run-time alignment check (and its
	// byte-wise slow path). A misaligned access then faults the kernel the
	// probe runs in, so only set it for code known to be aligned.
	AssumeAligned bool
	// Verified is the verifier's result for this program (verifier.Verify
	// of the same instructions). Its alignment proofs then replace the
	// run-time check of every load, store and helper pointer argument it
	// proved naturally aligned (Result.ProvenAligned: not through the
	// context, whose alignment is the caller's). Stack, map values and
	// the loader's regions are 8-byte aligned, as the proofs assume.
	Verified *verifier.Result
	// RingDevice turns on device-side reservation for GPU ring buffers
	// (shm/doc.go, "Device-side reservation"): tickets, a cached tail and
	// the count of full-ring drops live in a 64-byte device-memory block
	// whose address the loader stores in the map's GlobalRingDevice global,
	// so a record costs posted writes over PCIe and no round trip. While
	// that global is 0 the record takes the host-memory protocol.
	RingDevice bool
	// DeviceMaps names the maps that live in device memory (shm package
	// comment, "Device-resident maps"): their rings take one reservation
	// per warp with gpu-scope atomics and release stores.
	DeviceMaps []string
	// Comments writes each eBPF instruction (and its BTF source line, when
	// known) as a PTX comment above its code.
	Comments bool
}

// smVersion parses "sm_90", "sm_90a" or "sm_100" into 90 / 100.
func smVersion(arch string) (int, error) {
	s, ok := strings.CutPrefix(arch, "sm_")
	if !ok {
		return 0, fmt.Errorf("ptx: arch %q: want sm_NN", arch)
	}
	s = strings.TrimRight(s, "af")
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("ptx: arch %q: want sm_NN", arch)
	}
	if n < 70 {
		return 0, fmt.Errorf("ptx: arch %q: sm_70 or newer is needed (activemask, shfl.sync)", arch)
	}
	return n, nil
}

func (o Options) withDefaults(p *jit.Program) (Options, int, error) {
	if o.Arch == "" {
		o.Arch = DefaultArch
	}
	sm, err := smVersion(o.Arch)
	if err != nil {
		return o, 0, err
	}
	if o.Prefix == "" {
		o.Prefix = "gpuprobe_" + Sanitize(p.Name)
	} else if Sanitize(o.Prefix) != o.Prefix {
		return o, 0, fmt.Errorf("ptx: prefix %q is not a PTX identifier", o.Prefix)
	}
	if o.LoopBudget == 0 {
		o.LoopBudget = jit.LoopBudget
	}
	if o.LoopBudget < 0 || o.LoopBudget > 1<<31-1 {
		return o, 0, fmt.Errorf("ptx: loop budget %d out of range", o.LoopBudget)
	}
	if o.HostCallTimeout == 0 {
		o.HostCallTimeout = DefaultHostCallTimeout
	}
	if o.HostCallTimeout < 0 {
		return o, 0, fmt.Errorf("ptx: host call timeout %v is negative", o.HostCallTimeout)
	}
	return o, sm, nil
}

// Sanitize turns s into a PTX identifier: letters, digits, '_' and '$';
// anything else becomes '_', and a leading digit gets a '_' in front.
func Sanitize(s string) string {
	if s == "" {
		return "anon"
	}
	b := []byte(s)
	for i, c := range b {
		ok := c == '_' || c == '$' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
		if !ok {
			b[i] = '_'
		}
	}
	if b[0] >= '0' && b[0] <= '9' {
		return "_" + string(b)
	}
	return string(b)
}

// GlobalKind says what a module-scope global of a compiled program holds.
type GlobalKind int

// Kinds of module-scope globals. The injector writes each with
// cuModuleGetGlobal + cuMemcpyHtoD before the first launch.
const (
	GlobalMap          GlobalKind = iota + 1 // u64: device address of the map's shm region (0: not attached)
	GlobalMailbox                            // u64: device address of the host-call mailbox region (0: none)
	GlobalLaunchID                           // u64: id of the current launch (helper 606)
	GlobalMapLanes                           // u64: the lanes field of a per-thread/per-warp map's region header (0: not attached)
	GlobalRingDevice                         // u64: device address of a ring's device reservation block (Options.RingDevice; 0: host protocol)
	GlobalClock                              // u64: device address of the i64 CLOCK_MONOTONIC − %globaltimer (helper 5; 0: no offset)
	GlobalMailboxLocks                       // u64: device address of the mailbox's lock block in device memory (shm "Mailbox"; 0: host calls fail with -ETIMEDOUT)
)

// String names the kind.
func (k GlobalKind) String() string {
	switch k {
	case GlobalMap:
		return "map"
	case GlobalMailbox:
		return "mailbox"
	case GlobalLaunchID:
		return "launch_id"
	case GlobalMapLanes:
		return "map_lanes"
	case GlobalRingDevice:
		return "ring_device"
	case GlobalClock:
		return "clock"
	case GlobalMailboxLocks:
		return "mailbox_locks"
	}
	return fmt.Sprintf("GlobalKind(%d)", int(k))
}

// Global is one module-scope `.global .u64` of a compiled program.
type Global struct {
	Name string     // PTX symbol
	Kind GlobalKind // what it holds
	Map  string     // for GlobalMap, GlobalMapLanes and GlobalRingDevice: the map's name in jit.Program.Maps
}

// Func is a compiled program: one .func (plus a .func per bpf-to-bpf
// subprogram) and the module-scope declarations they need.
//
// The entry .func has the signature
//
//	.func (.param .b64 ret) Name (.param .b64 ctx, .param .b64 ctx_len)
//
// r1 = ctx and r2 = ctx_len on entry; the returned value is r0.
type Func struct {
	Name    string   // PTX name of the entry .func
	Arch    string   // the .target the code was generated for
	Globals []Global // module-scope globals the injector must set
	Shared  []Shared // module-scope .shared variables (per-block arrays, 1601)
	Decls   string   // module-scope text: globals and .func prototypes
	Body    string   // the .func definitions
}

// Shared is the .shared variable that holds a per-block array (map type
// 1601). Its name depends only on the map's name, so that the programs of
// one object spliced into one module (an entry and an exit probe) share
// it; whoever splices several programs declares each name once (see
// SharedDecls).
type Shared struct {
	Name string // PTX symbol
	Map  string // the map's name
	Size uint64 // bytes: max_entries × 8-byte aligned value size
}

// Decl is the module-scope declaration of s.
func (s Shared) Decl() string {
	return ".shared .align 8 .b8 " + s.Name + "[" + strconv.FormatUint(s.Size, 10) + "];\n"
}

// SharedDecls declares, once each, the .shared variables of programs to be
// spliced into one module (seen carries the names already declared there
// and is updated; nil for a fresh module). Two programs that use a
// per-block map of the same name with different sizes cannot share a
// module.
func SharedDecls(seen map[string]uint64, fs ...*Func) (string, error) {
	if seen == nil {
		seen = map[string]uint64{}
	}
	var b strings.Builder
	for _, f := range fs {
		for _, s := range f.Shared {
			if size, ok := seen[s.Name]; ok {
				if size != s.Size {
					return "", fmt.Errorf("per-block map %q is %d bytes in program %s and %d bytes in another program of the module", s.Map, s.Size, f.Name, size)
				}
				continue
			}
			seen[s.Name] = s.Size
			b.WriteString(s.Decl())
		}
	}
	return b.String(), nil
}

// Text is the declarations followed by the definitions: what to splice
// into a module (after its .version/.target/.address_size header). It
// declares f's .shared variables too; to splice several programs into
// one module, use SharedDecls and each program's Decls and Body instead.
func (f *Func) Text() string {
	sh, _ := SharedDecls(nil, f) // one program: no conflict possible
	return sh + f.Decls + f.Body
}

// Global returns the global of the given kind (and map name for GlobalMap).
func (f *Func) Global(kind GlobalKind, mapName string) (Global, bool) {
	for _, g := range f.Globals {
		if g.Kind == kind && g.Map == mapName {
			return g, true
		}
	}
	return Global{}, false
}

// Header is the module header for the given target.
func Header(arch string) string {
	return ".version " + PTXVersion + "\n.target " + arch + "\n.address_size 64\n\n"
}
