package inject

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpuprobe/gpuprobe/gpuprobe/ptxmod"
	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/ptx"
	"github.com/gpuprobe/gpuprobe/jit/verifier"
)

// MinSM is the oldest .target the probes can run on: the warp helpers
// need activemask and the .sync shuffles (sm_70).
const MinSM = 70

// Options control an injection.
type Options struct {
	// Arch is the GPU the module will run on ("sm_90"). Optional; with
	// RaiseTarget it is the .target given to modules that target an
	// architecture older than the probes need.
	Arch string
	// RaiseTarget sets .target to Arch when the module's target is older
	// than sm_70 (the driver JIT-compiles PTX for the device anyway). Off,
	// such a module is an error.
	RaiseTarget bool
	// Kernels restricts patching to these kernels (names or patterns as in
	// program targets); empty means every kernel a program targets.
	Kernels []string
	// Generic also runs memcapture programs after generic ld/st (no state
	// space) whose address is global at run time (isspacep.global).
	Generic bool
	// LaunchID says how probes get the launch id (default LaunchIDParam).
	LaunchID LaunchIDMode
	// Strict makes a program that targets no kernel of the module an
	// error; otherwise it is listed in Report.Unmatched (it may target a
	// kernel of another module), and only a module that no program targets
	// at all is an error (ErrNoKernel).
	Strict bool
	// NoInline calls entry and exit programs as .func calls instead of
	// splicing their bodies into the kernel (inline.go).
	NoInline bool
	// SkipUnidentified skips every probe site (entry, exit, memcapture)
	// of a launch whose launch id is 0, which the shim passes to the
	// launches sampling::device_one_in leaves out: they run the kernel's
	// own code and a branch per site. LaunchIDParam mode only.
	SkipUnidentified bool
	// Limits bound the parse of the module (zero: ptxmod.DefaultLimits);
	// past one, Inject fails with an error wrapping ptxmod.ErrLimit.
	Limits ptxmod.Limits
	// PTX are the code generation options of the programs (PidTgid,
	// LoopBudget, HostCallTimeout, AssumeAligned, Comments). Arch and
	// Prefix are set by the injector.
	PTX ptx.Options
}

// ErrNoKernel is wrapped by a *NoKernelError.
var ErrNoKernel = errors.New("no kernel of the module is targeted")

// NoKernelError says that programs target kernels the module does not
// have, and lists the kernels it has.
type NoKernelError struct {
	Targets  []string // the targets that matched nothing, with their programs
	Selected []string // Options.Kernels, when it restricted the kernels
	Kernels  []string // the kernels of the module
}

// Error lists the targets and the kernels present.
func (e *NoKernelError) Error() string {
	ks := "none"
	if len(e.Kernels) > 0 {
		ks = strings.Join(e.Kernels, ", ")
	}
	sel := ""
	if len(e.Selected) > 0 {
		sel = " among the kernels selected by " + strings.Join(e.Selected, ", ")
	}
	return fmt.Sprintf("inject: kernel %s not found%s; the module has kernels: %s", strings.Join(e.Targets, ", "), sel, ks)
}

// Unwrap returns ErrNoKernel.
func (e *NoKernelError) Unwrap() error { return ErrNoKernel }

// ProgramError is an error of one program (verifying, compiling or
// binding it), which the module's other programs do not share: a caller
// may inject again without it.
type ProgramError struct {
	Index   int    // the program's index in Inject's progs
	Program string // jit.Program.Name
	Err     error
}

// Error names the program.
func (e *ProgramError) Error() string { return "inject: program " + e.Program + ": " + e.Err.Error() }

// Unwrap returns the program's error.
func (e *ProgramError) Unwrap() error { return e.Err }

// Report says what Inject did and what the loader must set up.
type Report struct {
	Version string // .version of the patched module
	Target  string // .target of the patched module
	// VersionRaised and TargetRaised say whether .version/.target changed.
	VersionRaised, TargetRaised bool
	Kernels                     []KernelReport  // patched kernels, in module order
	Programs                    []ProgramReport // injected programs, in input order
	Globals                     []Global        // module-scope globals to set before a launch
	Unmatched                   []string        // programs that target no kernel of this module
	Cached                      bool            // served from an Injector's cache
}

// KernelReport describes one patched kernel.
type KernelReport struct {
	Name       string       // symbol (mangled name)
	Entry      []string     // entry programs, in call order
	Exit       []string     // exit programs, in call order
	MemCapture []string     // memcapture programs, in call order
	ExitSites  int          // ret/exit instructions routed through the exit probes
	MemSites   int          // loads and stores followed by the memcapture probes
	Launch     *LaunchParam // the hidden launch-id parameter; nil in LaunchIDGlobal mode
}

// ProgramReport describes one injected program.
type ProgramReport struct {
	Name    string        // jit.Program.Name
	Kind    jit.ProbeKind // entry, exit or memcapture
	Func    string        // PTX name of its .func
	Kernels []string      // kernels that call it
	Inlined bool          // its body is spliced at its sites, not called (inline.go)
}

// Global is one module-scope .u64 that the loader sets (cuModuleGetGlobal
// + a copy) before the first launch: a map's region base, a per-thread or
// per-warp map's lanes, the mailbox base, or (LaunchIDGlobal mode) the
// launch id.
type Global struct {
	ptx.Global
	Program string   // the program that reads it
	MapDef  *jit.Map // for map globals: the map (shared by the programs of one object)
}

// Inject patches a PTX module: it verifies and compiles every GPU program
// of progs, splices each program's .func and globals into the module once,
// and calls them from the kernels they target: entry programs at the top
// of the body, exit programs before every ret and exit, memcapture
// programs after every ld/st.global. Kernels no program targets stay
// byte-identical, and so does every other byte outside the edits.
func Inject(module []byte, progs []*jit.Program, opts Options) ([]byte, *Report, error) {
	lim := opts.Limits
	if lim == (ptxmod.Limits{}) {
		lim = ptxmod.DefaultLimits
	}
	m, err := ptxmod.ParseLimits(module, lim)
	if err != nil {
		return nil, nil, fmt.Errorf("inject: parse module: %w", err)
	}
	if m.AddressSize != 64 {
		return nil, nil, fmt.Errorf("inject: module has .address_size %d; only 64-bit modules can be patched", m.AddressSize)
	}
	for _, k := range opts.Kernels {
		if err := validPattern(k); err != nil {
			return nil, nil, fmt.Errorf("inject: Options.Kernels: pattern %q: %w", k, err)
		}
	}
	rep := &Report{}
	target, err := reconcileTarget(m, opts, rep)
	if err != nil {
		return nil, nil, err
	}

	// Which kernels each program runs in.
	kernels := m.Kernels()
	var (
		gpu       []*jit.Program
		calls     = make([][]*ptxmod.Func, len(progs))
		unmatched []string
	)
	for i, p := range progs {
		if p == nil {
			return nil, nil, fmt.Errorf("inject: program %d is nil", i)
		}
		if !p.IsGPU() {
			return nil, nil, fmt.Errorf("inject: program %s (section %q) is a %s program, not a GPU probe", p.Name, p.Section, p.Kind)
		}
		t := p.Target
		if p.Kind == jit.ProbeMemCapture && t == "" {
			t = "*"
		}
		if err := validPattern(t); err != nil {
			return nil, nil, fmt.Errorf("inject: program %s: target %q: %w", p.Name, t, err)
		}
		for _, k := range kernels {
			if matchKernel(t, k.Name) && selected(opts.Kernels, k.Name) {
				calls[i] = append(calls[i], k)
			}
		}
		if len(calls[i]) == 0 {
			unmatched = append(unmatched, p.Name)
			continue
		}
		gpu = append(gpu, p)
	}
	if len(gpu) == 0 || (opts.Strict && len(unmatched) > 0) {
		return nil, nil, noKernel(progs, calls, kernels, opts.Kernels)
	}
	rep.Unmatched = unmatched

	s := &splicer{m: m, opts: opts, target: target, kernels: map[*ptxmod.Func]*kernelPlan{}, shared: map[string]uint64{},
		inlines: map[string]*inlineBody{}}
	if err := s.compile(progs, calls, rep); err != nil {
		return nil, nil, err
	}
	if err := s.patchKernels(kernels, rep); err != nil {
		return nil, nil, err
	}
	if err := m.InsertAfterHeader(s.moduleText.String()); err != nil {
		return nil, nil, fmt.Errorf("inject: %w", err)
	}
	out, err := m.Bytes()
	if err != nil {
		return nil, nil, fmt.Errorf("inject: apply edits: %w", err)
	}
	return out, rep, nil
}

// selected reports whether the kernel passes Options.Kernels.
func selected(only []string, symbol string) bool {
	if len(only) == 0 {
		return true
	}
	for _, k := range only {
		if matchKernel(k, symbol) {
			return true
		}
	}
	return false
}

// noKernel builds the error for programs that matched no kernel.
func noKernel(progs []*jit.Program, calls [][]*ptxmod.Func, kernels []*ptxmod.Func, only []string) error {
	e := &NoKernelError{}
	for i, p := range progs {
		if len(calls[i]) == 0 {
			t := p.Target
			if t == "" {
				t = "*"
			}
			e.Targets = append(e.Targets, strconv.Quote(t)+" (program "+p.Name+")")
		}
	}
	e.Selected = only
	for _, k := range kernels {
		names := kernelNames(k.Name)
		if len(names) > 1 {
			e.Kernels = append(e.Kernels, k.Name+" ("+names[1]+")")
		} else {
			e.Kernels = append(e.Kernels, k.Name)
		}
	}
	return e
}

// reconcileTarget raises .version to what the probes need and checks (or,
// with RaiseTarget, raises) .target. It returns the sm_NN target the
// programs are compiled for.
func reconcileTarget(m *ptxmod.Module, opts Options, rep *Report) (string, error) {
	var sm string
	for _, t := range m.Target {
		if strings.HasPrefix(t, "sm_") {
			sm = t
			break
		}
	}
	if sm == "" {
		return "", fmt.Errorf("inject: module .target %q names no sm_NN architecture", strings.Join(m.Target, ", "))
	}
	n, err := smNumber(sm)
	if err != nil {
		return "", fmt.Errorf("inject: module .target: %w", err)
	}
	if n < MinSM {
		if !opts.RaiseTarget || opts.Arch == "" {
			return "", fmt.Errorf("inject: module targets %s; the probes need sm_%d or newer (activemask, shfl.sync); set RaiseTarget and Arch (the device) to raise it", sm, MinSM)
		}
		an, err := smNumber(opts.Arch)
		if err != nil {
			return "", fmt.Errorf("inject: Options.Arch: %w", err)
		}
		if an < MinSM {
			return "", fmt.Errorf("inject: Options.Arch %s: the probes need sm_%d or newer", opts.Arch, MinSM)
		}
		rest := []string{opts.Arch}
		for _, t := range m.Target {
			if t != sm {
				rest = append(rest, t)
			}
		}
		if err := m.SetTarget(strings.Join(rest, ", ")); err != nil {
			return "", fmt.Errorf("inject: %w", err)
		}
		sm, rep.TargetRaised = opts.Arch, true
	}
	major, minor, err := parseVersion(ptx.PTXVersion)
	if err != nil {
		return "", fmt.Errorf("inject: %w", err)
	}
	raised, err := m.ReconcileVersion(major, minor)
	if err != nil {
		return "", fmt.Errorf("inject: %w", err)
	}
	rep.VersionRaised = raised
	if raised {
		rep.Version = ptx.PTXVersion
	} else {
		rep.Version = fmt.Sprintf("%d.%d", m.Major, m.Minor)
	}
	rep.Target = sm
	return sm, nil
}

// smNumber parses "sm_90", "sm_90a" into 90.
func smNumber(arch string) (int, error) {
	s, ok := strings.CutPrefix(arch, "sm_")
	if !ok {
		return 0, fmt.Errorf("arch %q: want sm_NN", arch)
	}
	n, err := strconv.Atoi(strings.TrimRight(s, "af"))
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("arch %q: want sm_NN", arch)
	}
	return n, nil
}

// parseVersion parses "7.8".
func parseVersion(v string) (int, int, error) {
	a, b, ok := strings.Cut(v, ".")
	major, err1 := strconv.Atoi(a)
	minor, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("bad PTX version %q", v)
	}
	return major, minor, nil
}

// ctxSize is the context a GPU program of this kind gets in r1.
func ctxSize(k jit.ProbeKind) int {
	if k == jit.ProbeMemCapture {
		return jit.MemCtxSize
	}
	return 0
}

// compile verifies and compiles the programs that run somewhere, and
// queues their module-scope text.
func (s *splicer) compile(progs []*jit.Program, calls [][]*ptxmod.Func, rep *Report) error {
	used := map[string]bool{}
	for _, d := range s.m.Decls {
		if d.Name != "" {
			used[d.Name] = true
		}
	}
	for _, f := range s.m.Funcs {
		used[f.Name] = true
	}
	prefixes := map[string]bool{}
	for i, p := range progs {
		if len(calls[i]) == 0 {
			continue
		}
		res, err := verifier.Verify(p, verifier.Options{CtxSize: ctxSize(p.Kind)})
		if err != nil {
			return &ProgramError{Index: i, Program: p.Name, Err: fmt.Errorf("verifier: %w", err)}
		}
		prefix := "gpuprobe_" + ptx.Sanitize(p.Name)
		for n := 2; prefixes[prefix]; n++ {
			prefix = "gpuprobe_" + ptx.Sanitize(p.Name) + "_" + strconv.Itoa(n)
		}
		prefixes[prefix] = true
		for name := range used {
			if strings.HasPrefix(name, prefix) {
				return fmt.Errorf("inject: module already has a symbol %s with the prefix of program %s (was it patched already?)", name, p.Name)
			}
		}
		po := s.opts.PTX
		po.Arch, po.Prefix = s.target, prefix
		po.Verified = res // its alignment proofs drop run-time checks
		f, err := ptx.Compile(p, po)
		if err != nil {
			return &ProgramError{Index: i, Program: p.Name, Err: err}
		}
		if s.opts.LaunchID == LaunchIDParam {
			if f, err = BindLaunchParam(f); err != nil {
				return &ProgramError{Index: i, Program: p.Name, Err: err}
			}
		}
		sh, err := ptx.SharedDecls(s.shared, f)
		if err != nil {
			return &ProgramError{Index: i, Program: p.Name, Err: err}
		}
		if p.Kind != jit.ProbeMemCapture && !s.opts.NoInline {
			// A body the inliner does not recognise is called instead.
			if b, err := newInlineBody(f); err == nil {
				s.inlines[f.Name] = b
			}
		}
		fmt.Fprintf(&s.moduleText, "\n// gpuprobe: program %s (%s)\n", p.Name, p.Section)
		s.moduleText.WriteString(sh + f.Decls + f.Body)
		pr := ProgramReport{Name: p.Name, Kind: p.Kind, Func: f.Name, Inlined: s.inlines[f.Name] != nil}
		for _, k := range calls[i] {
			pr.Kernels = append(pr.Kernels, k.Name)
			s.plan(k).add(p.Kind, p.Name, f.Name)
		}
		rep.Programs = append(rep.Programs, pr)
		for _, g := range f.Globals {
			gl := Global{Global: g, Program: p.Name}
			if g.Map != "" {
				for _, md := range p.Maps {
					if md.Name == g.Map {
						gl.MapDef = md
					}
				}
			}
			rep.Globals = append(rep.Globals, gl)
		}
	}
	return nil
}
