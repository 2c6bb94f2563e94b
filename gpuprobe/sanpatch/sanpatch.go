// Package sanpatch builds a Compute Sanitizer patch module from GPU programs:
// the second route of one program, two routes. gpuprobe/inject splices a
// verified program into a kernel's PTX; sanpatch wraps the same compiled
// program (jit/ptx) in the patch functions NVIDIA's Sanitizer API calls from
// a kernel's SASS (sanitizerPatchInstructions), for kernels that have no
// PTX:
//
//	__gpuprobe_sp_enter(userdata, pc)                 BLOCK_ENTER: the entry programs
//	__gpuprobe_sp_exit(userdata, pc)                  BLOCK_EXIT: the exit programs
//	__gpuprobe_sp_mem(userdata, pc, ptr, size, flags, new)
//	                                                  GLOBAL_MEMORY_ACCESS: the memcapture programs
//
// userdata is the launch id (helper 606), 0 for a launch that is not
// sampled: the wrappers then return at once. A memcapture program gets the
// context inject gives it ({address, size | store << 32}, jit.MemCtxSize).
//
// A patch module has no handle to write a global through, so every global
// a program reads (map regions, mailbox, clock; ptx.GlobalKind) is a
// .global whose initial value is a distinct magic (Module.Globals): the
// loader replaces each magic in the compiled image with the address it
// binds, as the shim does for its built-in patch image (shim/src/sass.c).
// The module must be compiled with ptxas --compile-as-tools-patch, held to
// 24 registers (-maxrregcount=24 with CUDA 11.8's ptxas: warp-specialized
// kernels lower their registers with setmaxnreg, and more faulted cuBLAS's
// nvjet GEMM on the H200).
//
// The shim patches a CUDA context with one patch image, so a module of
// user programs that runs beside kernel_phases carries kernel_phases' patch
// functions too (Options.Phases; phases.ptx, built from
// shim/patch/sass_phases.cu by shim/patch/gen.go): EnterFunc and ExitFunc
// then call PhasesEnterFunc and PhasesExitFunc before the programs, and
// kernel_phases' globals (PhasesGlobals) keep the built-in image's magics.
package sanpatch

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/inject"
	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/ptx"
	"github.com/gpuprobe/gpuprobe/jit/verifier"
)

// Names of the patch functions, for sanitizerPatchInstructions.
const (
	EnterFunc = "__gpuprobe_sp_enter" // SANITIZER_INSTRUCTION_BLOCK_ENTER (1)
	ExitFunc  = "__gpuprobe_sp_exit"  // SANITIZER_INSTRUCTION_BLOCK_EXIT (2)
	MemFunc   = "__gpuprobe_sp_mem"   // SANITIZER_INSTRUCTION_GLOBAL_MEMORY_ACCESS (3)
)

// MagicBase is the first global's initial value; global i starts as
// MagicBase + i. The values are far from any address a driver hands out
// and from the built-in image's (0x475053505343523x). The wire protocol
// documents it (agentwire.APISASS), and defines it.
const MagicBase = agentwire.SASSMagicBase

// sanitizerWrite is SANITIZER_MEMORY_DEVICE_FLAG_WRITE of the memory
// access callback's flags.
const sanitizerWrite = 2

// Global is one global of the module: what a program reads there (with
// the program that declared it and, for a map global, the map), and the
// magic its initial value is until the loader binds it.
type Global struct {
	inject.Global
	Magic uint64 // its initial value in the module
}

// Module is a patch module: PTX for ptxas --compile-as-tools-patch, and the
// patch functions it defines.
type Module struct {
	PTX     string
	Globals []Global
	Enter   bool // EnterFunc is defined (some entry program, or Phases)
	Exit    bool // ExitFunc is defined (some exit program, or Phases)
	Mem     bool // MemFunc is defined
	// Targets are the programs' kernel targets (the section's kernel
	// name or pattern, "*" for every kernel), by program bit: program i
	// runs only in launches whose userdata has bit
	// agentwire.SASSTargetShift + i set (the loader matches kernel names).
	Targets []string
	// Phases: kernel_phases' patch functions and globals are in the
	// module (Options.Phases), not in Globals: PhasesGlobals, which start
	// as PhasesMagicBase + i.
	Phases bool
}

// Options are the build's options.
type Options struct {
	Arch string      // the .target (default sm_90)
	PTX  ptx.Options // code generation options; Arch, Prefix and Verified are set per program
	// Phases links kernel_phases' patch functions into the module: both
	// block wrappers are defined and call them before the programs.
	Phases bool
}

// Build verifies and compiles programs (entry, exit and memcapture ones;
// each runs in the launches the loader sets its bit for, Module.Targets) and
// wraps them in patch functions; host programs (uprobe/...) are left to
// the host probes. A program that needs what a patch function cannot have
// (a per-block map: shared memory belongs to the kernel) is an error
// naming it.
func Build(progs []*jit.Program, o Options) (*Module, error) {
	if o.Arch == "" {
		o.Arch = "sm_90"
	}
	m := &Module{Phases: o.Phases}
	body, calls, err := programs(m, progs, o)
	if err != nil {
		return nil, err
	}
	if len(calls) == 0 && !o.Phases {
		return nil, fmt.Errorf("sanpatch: no entry, exit or memcapture program among %d", len(progs))
	}
	version, phasesBody := "7.8", ""
	if o.Phases {
		v, pb, err := phases()
		if err != nil {
			return nil, err
		}
		if version, err = maxVersion(version, v); err != nil {
			return nil, err
		}
		phasesBody = "\n// gpuprobe: kernel_phases (shim/patch/sass_phases.cu)\n" + pb
	}
	var b strings.Builder
	fmt.Fprintf(&b, ".version %s\n.target %s\n.address_size 64\n", version, o.Arch)
	b.WriteString(phasesBody)
	b.WriteString(body)
	if n := calls[jit.ProbeEntry]; len(n) > 0 || o.Phases {
		blockWrapper(&b, EnterFunc, phasesFunc(o.Phases, PhasesEnterFunc), n)
		m.Enter = true
	}
	if n := calls[jit.ProbeExit]; len(n) > 0 || o.Phases {
		blockWrapper(&b, ExitFunc, phasesFunc(o.Phases, PhasesExitFunc), n)
		m.Exit = true
	}
	if n := calls[jit.ProbeMemCapture]; len(n) > 0 {
		memWrapper(&b, n)
		m.Mem = true
	}
	m.PTX = b.String()
	return m, nil
}

// phasesFunc is f when on, else "".
func phasesFunc(on bool, f string) string {
	if on {
		return f
	}
	return ""
}

// programs compiles the GPU programs of progs into PTX text, adds their
// globals to m.Globals (each a .global holding its magic) and returns the
// text and the program functions to call by kind.
func programs(m *Module, progs []*jit.Program, o Options) (string, map[jit.ProbeKind][]progCall, error) {
	var body strings.Builder
	calls := map[jit.ProbeKind][]progCall{}
	for i, p := range progs {
		if p.Kind == jit.ProbeUprobe {
			continue
		}
		if len(m.Targets) == agentwire.SASSMaxPrograms {
			return "", nil, fmt.Errorf("sanpatch: program %d (%s): at most %d GPU programs run on the SASS route", i, p.Name, agentwire.SASSMaxPrograms)
		}
		f, err := compile(p, i, o)
		if err != nil {
			return "", nil, fmt.Errorf("sanpatch: program %d (%s): %w", i, p.Name, err)
		}
		decls := f.Decls
		for _, g := range f.Globals {
			gl := Global{Global: inject.Global{Global: g, Program: p.Name, MapDef: mapDef(p, g.Map)},
				Magic: MagicBase + uint64(len(m.Globals))}
			m.Globals = append(m.Globals, gl)
			decl := ptx.GlobalDecl(g.Name)
			if !strings.Contains(decls, decl) {
				return "", nil, fmt.Errorf("sanpatch: program %s: declaration of %s not found", p.Name, g.Name)
			}
			// The kernel's constant banks are not the patch module's: a
			// global of ours is read through global memory.
			decls = strings.Replace(decls, decl, ".global .align 8 .u64 "+g.Name+" = "+strconv.FormatUint(gl.Magic, 10)+";\n", 1)
		}
		code := strings.ReplaceAll(decls+f.Body, "ld.const.u64 ", "ld.global.u64 ")
		fmt.Fprintf(&body, "\n// gpuprobe: program %s (%s)\n%s", p.Name, p.Section, code)
		calls[p.Kind] = append(calls[p.Kind], progCall{f.Name, len(m.Targets)})
		t := p.Target
		if t == "" {
			t = "*"
		}
		m.Targets = append(m.Targets, t)
	}
	return body.String(), calls, nil
}

// progCall is a program function and its bit.
type progCall struct {
	name string
	bit  int
}

// mapDef returns program p's map of that name, nil for none.
func mapDef(p *jit.Program, name string) *jit.Map {
	if name == "" {
		return nil
	}
	for _, md := range p.Maps {
		if md.Name == name {
			return md
		}
	}
	return nil
}

// compile verifies and compiles program p (the i-th) with helper 606
// reading the launch id from a parameter.
func compile(p *jit.Program, i int, o Options) (*ptx.Func, error) {
	var ctx int
	switch p.Kind {
	case jit.ProbeEntry, jit.ProbeExit:
	case jit.ProbeMemCapture:
		ctx = jit.MemCtxSize
	default:
		return nil, fmt.Errorf("section %s: not an entry, exit or memcapture program", p.Section)
	}
	res, err := verifier.Verify(p, verifier.Options{CtxSize: ctx})
	if err != nil {
		return nil, fmt.Errorf("verifier: %w", err)
	}
	po := o.PTX
	po.Arch, po.Prefix, po.Verified = o.Arch, "gpuprobe_sp"+strconv.Itoa(i)+"_"+ptx.Sanitize(p.Name), res
	f, err := ptx.Compile(p, po)
	if err != nil {
		return nil, err
	}
	if len(f.Shared) > 0 {
		return nil, fmt.Errorf("per-block map %q: a patch function has no shared memory of its own (the kernel's is the kernel's)", f.Shared[0].Map)
	}
	return inject.BindLaunchParam(f)
}

// blockWrapper writes a block enter or exit patch function that, unless
// the launch id is 0, calls the kernel_phases function kp (if not "") with
// (launch id, pc), then funcs with the launch id.
func blockWrapper(b *strings.Builder, name, kp string, funcs []progCall) {
	fmt.Fprintf(b, "\n.visible .func (.param .b32 __r) %s(.param .b64 __ud, .param .b64 __pc)\n{\n", name)
	b.WriteString("\t.reg .b64 %ud, %id, %pc, %bit;\n\t.reg .pred %off;\n")
	b.WriteString("\tld.param.b64 %ud, [__ud];\n\tsetp.eq.u64 %off, %ud, 0;\n\t@%off bra $done;\n")
	launchID(b)
	if kp != "" {
		b.WriteString("\tld.param.b64 %pc, [__pc];\n")
		b.WriteString("\t{\n\t\t.param .b32 __kr;\n\t\t.param .b64 __k0;\n\t\t.param .b64 __k1;\n")
		b.WriteString("\t\tst.param.b64 [__k0], %id;\n\t\tst.param.b64 [__k1], %pc;\n")
		fmt.Fprintf(b, "\t\tcall (__kr), %s, (__k0, __k1);\n\t}\n", kp)
	}
	for _, f := range funcs {
		call(b, f, "0", "0")
	}
	b.WriteString("$done:\n\tst.param.b32 [__r], 0;\n\tret;\n}\n")
}

// launchID writes %id: the userdata's launch id, without the program bits.
func launchID(b *strings.Builder) {
	fmt.Fprintf(b, "\tand.b64 %%id, %%ud, %d;\n", uint64(1)<<agentwire.SASSTargetShift-1)
}

// memWrapper writes the memory access patch function: the memcapture
// context in local memory, then each program.
func memWrapper(b *strings.Builder, funcs []progCall) {
	fmt.Fprintf(b, "\n.visible .func (.param .b32 __r) %s(.param .b64 __ud, .param .b64 __pc, .param .b64 __ptr, "+
		".param .b32 __size, .param .b32 __flags, .param .b64 __new)\n{\n", MemFunc)
	fmt.Fprintf(b, "\t.local .align 8 .b8 __memctx[%d];\n", jit.MemCtxSize)
	b.WriteString("\t.reg .b64 %ud, %id, %ctx, %w, %bit;\n\t.reg .b32 %size, %flags, %store;\n\t.reg .pred %off;\n")
	b.WriteString("\tld.param.b64 %ud, [__ud];\n\tsetp.eq.u64 %off, %ud, 0;\n\t@%off bra $done;\n")
	launchID(b)
	b.WriteString("\tld.param.b64 %w, [__ptr];\n\tst.local.u64 [__memctx], %w;\n")
	b.WriteString("\tld.param.b32 %size, [__size];\n\tld.param.b32 %flags, [__flags];\n")
	fmt.Fprintf(b, "\tand.b32 %%store, %%flags, %d;\n\tshr.u32 %%store, %%store, 1;\n", sanitizerWrite)
	b.WriteString("\tst.local.u32 [__memctx+8], %size;\n\tst.local.u32 [__memctx+12], %store;\n")
	b.WriteString("\tmov.u64 %ctx, __memctx;\n\tcvta.local.u64 %ctx, %ctx;\n")
	for _, f := range funcs {
		call(b, f, "%ctx", strconv.Itoa(jit.MemCtxSize))
	}
	b.WriteString("$done:\n\tst.param.b32 [__r], 0;\n\tret;\n}\n")
}

// call writes a call of program function f with (ctx, len, launch id),
// skipped unless the userdata has f's bit.
func call(b *strings.Builder, f progCall, ctx, n string) {
	fmt.Fprintf(b, "\tand.b64 %%bit, %%ud, %d;\n\tsetp.eq.u64 %%off, %%bit, 0;\n\t@%%off bra $skip%d;\n",
		uint64(1)<<(agentwire.SASSTargetShift+f.bit), f.bit)
	fmt.Fprintf(b, "\t{\n\t\t.param .b64 __rv;\n\t\t.param .b64 __a0;\n\t\t.param .b64 __a1;\n\t\t.param .b64 __a2;\n")
	fmt.Fprintf(b, "\t\tst.param.b64 [__a0], %s;\n\t\tst.param.b64 [__a1], %s;\n\t\tst.param.b64 [__a2], %%id;\n", ctx, n)
	fmt.Fprintf(b, "\t\tcall (__rv), %s, (__a0, __a1, __a2);\n\t}\n$skip%d:\n", f.name, f.bit)
}
