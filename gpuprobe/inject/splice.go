package inject

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpuprobe/gpuprobe/gpuprobe/ptxmod"
	"github.com/gpuprobe/gpuprobe/jit"
)

// Names the injector adds inside a patched kernel. They start with
// "gpuprobe_" like everything else it adds; Inject refuses a module that
// already uses the programs' prefixes.
const (
	regLaunch  = "%gpuprobe_lid"   // .b64: the launch id (0 in LaunchIDGlobal mode)
	regTmp     = "%gpuprobe_t"     // .b64: scratch for call arguments
	regAddr    = "%gpuprobe_maddr" // .b64: address of the current memory access
	regCtx     = "%gpuprobe_mctx"  // .b64: generic address of memCtxVar
	regPred    = "%gpuprobe_mp"    // .pred: isspacep.global of a generic access
	memCtxVar  = "gpuprobe_memctx" // .local .b8[16]: the memcapture context
	exitLabel  = "$gpuprobe_exit"  // the common exit block
	skipLabelP = "$gpuprobe_ms"    // + n: skips a memcapture call
	regNoID    = "%gpuprobe_noid"  // .pred: the launch id is 0 (Options.SkipUnidentified)
	skipEntry  = "$gpuprobe_se"    // past the entry probes
	skipExit   = "$gpuprobe_sx"    // past the exit probes
)

// probeCall is one program called at a probe point.
type probeCall struct {
	prog string // program name
	fn   string // PTX .func name
}

// kernelPlan is what runs where in one kernel.
type kernelPlan struct {
	entry, exit, mem []probeCall
}

func (k *kernelPlan) add(kind jit.ProbeKind, prog, fn string) {
	c := probeCall{prog: prog, fn: fn}
	switch kind {
	case jit.ProbeEntry:
		k.entry = append(k.entry, c)
	case jit.ProbeExit:
		// Exit probes run in reverse order, like deferred calls: the
		// first program (kernel_phases, which brackets the others)
		// enters first and leaves last, so its warp window covers the
		// other programs' probes.
		k.exit = append([]probeCall{c}, k.exit...)
	case jit.ProbeMemCapture:
		k.mem = append(k.mem, c)
	}
}

// splicer accumulates the edits of one injection.
type splicer struct {
	m          *ptxmod.Module
	opts       Options
	target     string
	kernels    map[*ptxmod.Func]*kernelPlan
	moduleText strings.Builder
	shared     map[string]uint64      // .shared variables declared in moduleText (ptx.SharedDecls)
	inlines    map[string]*inlineBody // entry and exit programs spliced at their sites, by .func name
	skips      int
	sites      int // inlined sites so far (their labels' prefix)
}

func (s *splicer) plan(f *ptxmod.Func) *kernelPlan {
	k := s.kernels[f]
	if k == nil {
		k = &kernelPlan{}
		s.kernels[f] = k
	}
	return k
}

// patchKernels edits every kernel that has a plan, in module order.
func (s *splicer) patchKernels(kernels []*ptxmod.Func, rep *Report) error {
	for _, f := range kernels {
		k := s.kernels[f]
		if k == nil {
			continue
		}
		kr, err := s.patchKernel(f, k)
		if err != nil {
			return fmt.Errorf("inject: kernel %s: %w", f.Name, err)
		}
		rep.Kernels = append(rep.Kernels, kr)
	}
	return nil
}

// call writes a call of fn(ctx, len[, launch]) as a nested block, or
// the program's body in its place (inline.go).
func (s *splicer) call(b *strings.Builder, c probeCall, ctx, size string) {
	if ib := s.inlines[c.fn]; ib != nil {
		s.sites++
		ib.write(b, c.prog, s.sites, ctx, size, regLaunch)
		return
	}
	param := s.opts.LaunchID == LaunchIDParam
	fmt.Fprintf(b, "\t{ // gpuprobe: %s\n", c.prog)
	b.WriteString("\t.param .b64 gpuprobe_r;\n\t.param .b64 gpuprobe_a0;\n\t.param .b64 gpuprobe_a1;\n")
	if param {
		b.WriteString("\t.param .b64 gpuprobe_a2;\n")
	}
	fmt.Fprintf(b, "\tmov.u64 %s, %s;\n\tst.param.b64 [gpuprobe_a0], %s;\n", regTmp, ctx, regTmp)
	fmt.Fprintf(b, "\tmov.u64 %s, %s;\n\tst.param.b64 [gpuprobe_a1], %s;\n", regTmp, size, regTmp)
	if param {
		fmt.Fprintf(b, "\tst.param.b64 [gpuprobe_a2], %s;\n", regLaunch)
		fmt.Fprintf(b, "\tcall (gpuprobe_r), %s, (gpuprobe_a0, gpuprobe_a1, gpuprobe_a2);\n", c.fn)
	} else {
		fmt.Fprintf(b, "\tcall (gpuprobe_r), %s, (gpuprobe_a0, gpuprobe_a1);\n", c.fn)
	}
	b.WriteString("\t}\n")
}

// patchKernel adds the declarations, the launch id load and the entry
// calls at the top of the body, routes every exit through a common exit
// block that calls the exit programs, and follows memory accesses with the
// memcapture calls.
func (s *splicer) patchKernel(f *ptxmod.Func, k *kernelPlan) (KernelReport, error) {
	kr := KernelReport{Name: f.Name}
	for _, c := range k.entry {
		kr.Entry = append(kr.Entry, c.prog)
	}
	for _, c := range k.exit {
		kr.Exit = append(kr.Exit, c.prog)
	}
	for _, c := range k.mem {
		kr.MemCapture = append(kr.MemCapture, c.prog)
	}
	for _, p := range f.Params {
		if p.Name == LaunchParamName {
			return kr, fmt.Errorf("already has the parameter %s (was it patched already?)", LaunchParamName)
		}
	}

	var top strings.Builder
	top.WriteString("\t// gpuprobe: begin\n")
	fmt.Fprintf(&top, "\t.reg .b64 %s;\n\t.reg .b64 %s;\n", regLaunch, regTmp)
	if len(k.mem) > 0 {
		fmt.Fprintf(&top, "\t.reg .b64 %s;\n\t.reg .b64 %s;\n\t.reg .pred %s;\n", regAddr, regCtx, regPred)
		fmt.Fprintf(&top, "\t.local .align 8 .b8 %s[%d];\n", memCtxVar, jit.MemCtxSize)
		fmt.Fprintf(&top, "\tmov.u64 %s, %s;\n\tcvta.local.u64 %s, %s;\n", regCtx, memCtxVar, regCtx, regCtx)
	}
	if s.opts.LaunchID == LaunchIDParam {
		lp, err := launchParam(f)
		if err != nil {
			return kr, err
		}
		kr.Launch = lp
		s.m.AppendParam(f, ".param .u64 "+LaunchParamName)
		fmt.Fprintf(&top, "\tld.param.u64 %s, [%s];\n", regLaunch, LaunchParamName)
	} else {
		fmt.Fprintf(&top, "\tmov.u64 %s, 0;\n", regLaunch)
	}
	skip := s.opts.SkipUnidentified && s.opts.LaunchID == LaunchIDParam
	if skip {
		fmt.Fprintf(&top, "\t.reg .pred %s;\n\tsetp.eq.u64 %s, %s, 0;\n", regNoID, regNoID, regLaunch)
	}
	if skip && len(k.entry) > 0 {
		fmt.Fprintf(&top, "\t@%s bra %s;\n", regNoID, skipEntry)
	}
	for _, c := range k.entry {
		s.call(&top, c, "0", "0")
	}
	if skip && len(k.entry) > 0 {
		top.WriteString(skipEntry + ":\n")
	}
	top.WriteString("\t// gpuprobe: end\n")
	if err := s.m.InsertTop(f, top.String()); err != nil {
		return kr, err
	}

	if len(k.mem) > 0 {
		for _, a := range f.Mem {
			if !(a.Global() || (s.opts.Generic && a.Generic())) {
				continue
			}
			if err := s.memSite(a, k.mem, skip); err != nil {
				return kr, err
			}
			kr.MemSites++
		}
	}

	if len(k.exit) > 0 {
		for _, st := range f.Exits {
			guard := ""
			if st.Guard != "" {
				guard = "@" + st.Guard + " "
				if st.GuardNot {
					guard = "@!" + st.Guard + " "
				}
			}
			s.m.Replace(st.Span, guard+"bra "+exitLabel+"; // gpuprobe: was "+oneLine(s.m.Text(st.Span)))
			kr.ExitSites++
		}
		var b strings.Builder
		b.WriteString(exitLabel + ":\n\t// gpuprobe: exit probes\n")
		if skip {
			fmt.Fprintf(&b, "\t@%s bra %s;\n", regNoID, skipExit)
		}
		for _, c := range k.exit {
			s.call(&b, c, "0", "0")
		}
		if skip {
			b.WriteString(skipExit + ":\n")
		}
		b.WriteString("\tret;\n")
		s.m.Insert(f.BodyClose, b.String())
	}
	return kr, nil
}

// memSite computes the access's address before it and calls the
// memcapture programs after it, under the access's own guard (and, with
// noID, not in a launch whose id is 0).
func (s *splicer) memSite(a ptxmod.MemAccess, calls []probeCall, noID bool) error {
	st := a.Stmt
	line, col := st.Line, st.Col
	if a.Addr.Kind != ptxmod.OperandAddress || a.Addr.Base == "" {
		return fmt.Errorf("%d:%d: %s: cannot read the address of %q for the memcapture context", line, col, st.Opcode, a.Addr.Text)
	}
	var before strings.Builder
	fmt.Fprintf(&before, "\tmov.u64 %s, %s; // gpuprobe: address of the next access\n", regAddr, a.Addr.Base)
	if a.Addr.Offset != 0 {
		fmt.Fprintf(&before, "\tadd.s64 %s, %s, %d;\n", regAddr, regAddr, a.Addr.Offset)
	}
	s.m.InsertBefore(st, before.String())

	s.skips++
	skip := skipLabelP + strconv.Itoa(s.skips)
	var after strings.Builder
	after.WriteString("\t// gpuprobe: memcapture\n")
	jumps := false
	if noID {
		fmt.Fprintf(&after, "\t@%s bra %s;\n", regNoID, skip)
		jumps = true
	}
	if st.Guard != "" {
		neg := "!"
		if st.GuardNot {
			neg = ""
		}
		fmt.Fprintf(&after, "\t@%s%s bra %s;\n", neg, st.Guard, skip)
		jumps = true
	}
	if a.Generic() {
		fmt.Fprintf(&after, "\tisspacep.global %s, %s;\n\t@!%s bra %s;\n", regPred, regAddr, regPred, skip)
		jumps = true
	}
	flags := uint64(0)
	if a.Store {
		flags = jit.MemCtxStore
	}
	fmt.Fprintf(&after, "\tst.local.u64 [%s], %s;\n", memCtxVar, regAddr)
	fmt.Fprintf(&after, "\tmov.u64 %s, %d;\n\tst.local.u64 [%s+8], %s;\n", regTmp, uint64(a.Size)|flags<<32, memCtxVar, regTmp)
	for _, c := range calls {
		s.call(&after, c, regCtx, strconv.Itoa(jit.MemCtxSize))
	}
	if jumps {
		after.WriteString(skip + ":\n")
	}
	s.m.InsertAfter(st, after.String())
	return nil
}

// oneLine keeps a statement's text on one comment line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
