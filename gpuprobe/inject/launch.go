package inject

import (
	"fmt"
	"strings"

	"github.com/gpuprobe/gpuprobe/gpuprobe/ptxmod"
	"github.com/gpuprobe/gpuprobe/jit/ptx"
)

// LaunchIDMode says how a probe learns the id of the launch it runs in
// (helper 606, get_launch_id).
type LaunchIDMode int

// Launch id modes.
const (
	// LaunchIDParam (the default) appends a hidden .u64 parameter,
	// LaunchParamName, to every patched kernel; the shim passes the launch
	// id there at each launch (LaunchParam says where). The kernel loads it
	// once at entry and hands it to every probe call, so concurrent
	// launches of one kernel on several streams each see their own id.
	LaunchIDParam LaunchIDMode = iota
	// LaunchIDGlobal keeps the compiled programs' module-scope
	// PREFIX_launch_id globals, which the host must set before each
	// launch: racy when a module's kernels run concurrently on several
	// streams. For hosts that cannot change launch parameters.
	LaunchIDGlobal
)

// String names the mode.
func (m LaunchIDMode) String() string {
	switch m {
	case LaunchIDParam:
		return "param"
	case LaunchIDGlobal:
		return "global"
	}
	return fmt.Sprintf("LaunchIDMode(%d)", int(m))
}

// LaunchParamName is the hidden kernel parameter that carries the launch
// id in LaunchIDParam mode.
const LaunchParamName = "__gpuprobe_launch_id"

// LaunchParam says where the hidden launch-id parameter of a patched
// kernel is, so the shim can pass it: kernelParams[Index] (cuLaunchKernel's
// array of pointers, which gets one more element), or Offset bytes into the
// CU_LAUNCH_PARAM_BUFFER_POINTER buffer (which grows to Offset+Size).
type LaunchParam struct {
	Name   string // LaunchParamName
	Index  int    // number of the kernel's own parameters
	Offset int    // byte offset in the parameter buffer (8-aligned)
	Size   int    // 8
}

// paramSizes are the sizes of PTX parameter types.
var paramSizes = map[string]int{
	".b8": 1, ".u8": 1, ".s8": 1,
	".b16": 2, ".u16": 2, ".s16": 2, ".f16": 2, ".bf16": 2,
	".b32": 4, ".u32": 4, ".s32": 4, ".f32": 4, ".f16x2": 4, ".bf16x2": 4,
	".b64": 8, ".u64": 8, ".s64": 8, ".f64": 8,
	".b128": 16,
}

// launchParam computes where the hidden parameter goes: after the
// kernel's parameters, each at its alignment (.align N, else its type's
// size), as the driver lays them out.
func launchParam(f *ptxmod.Func) (*LaunchParam, error) {
	end := 0
	for i, p := range f.Params {
		size, ok := paramSizes[p.Type]
		if !ok {
			return nil, fmt.Errorf("kernel %s: parameter %d (%s): unknown type %q", f.Name, i, p.Name, p.Type)
		}
		align := p.Align
		if align == 0 {
			align = size
		}
		n := size
		if p.ArraySize > 0 {
			n *= p.ArraySize
		}
		end = alignUp(end, align) + n
	}
	return &LaunchParam{Name: LaunchParamName, Index: len(f.Params), Offset: alignUp(end, 8), Size: 8}, nil
}

func alignUp(v, a int) int {
	if a <= 1 {
		return v
	}
	return (v + a - 1) / a * a
}

// entryParams is the parameter list ptx.Compile gives a program's entry
// .func; withLaunch is the same with the launch id added.
const (
	entryParams = "(.param .b64 __ctx, .param .b64 __len)"
	withLaunch  = "(.param .b64 __ctx, .param .b64 __len, .param .b64 __launch)"
)

// BindLaunchParam rewrites a compiled program for LaunchIDParam mode: its
// entry .func takes a third parameter, the launch id, and helper 606 reads
// that parameter instead of the module-scope PREFIX_launch_id global, which
// is dropped. Helper 606 in a bpf-to-bpf subprogram cannot see the
// parameter and is an error.
func BindLaunchParam(f *ptx.Func) (*ptx.Func, error) {
	out := *f
	proto := f.Name + entryParams
	if strings.Count(f.Decls, proto) != 1 || strings.Count(f.Body, proto) != 1 {
		return nil, fmt.Errorf("program .func %s: entry signature %q not found once in the compiled PTX", f.Name, proto)
	}
	out.Decls = strings.Replace(f.Decls, proto, f.Name+withLaunch, 1)
	out.Body = strings.Replace(f.Body, proto, f.Name+withLaunch, 1)
	g, ok := f.Global(ptx.GlobalLaunchID, "")
	if !ok {
		return &out, nil
	}
	decl := ptx.GlobalDecl(g.Name)
	if !strings.Contains(out.Decls, decl) {
		return nil, fmt.Errorf("program .func %s: declaration of %s not found", f.Name, g.Name)
	}
	out.Decls = strings.Replace(out.Decls, decl, "", 1)
	// The entry .func runs from its header to the first "\n}\n".
	start := strings.Index(out.Body, f.Name+withLaunch)
	end := strings.Index(out.Body[start:], "\n}\n")
	if end < 0 {
		return nil, fmt.Errorf("program .func %s: end of the entry function not found", f.Name)
	}
	end += start
	load := "ld.const.u64 %r0, [" + g.Name + "];"
	entry := strings.ReplaceAll(out.Body[start:end], load, "ld.param.b64 %r0, [__launch];")
	out.Body = out.Body[:start] + entry + out.Body[end:]
	if strings.Contains(out.Body, g.Name) {
		return nil, fmt.Errorf("program .func %s: helper 606 (get_launch_id) is called from a bpf-to-bpf subprogram; with the launch id passed as a kernel parameter only the program's main function can call it", f.Name)
	}
	globals := make([]ptx.Global, 0, len(f.Globals))
	for _, x := range f.Globals {
		if x.Kind != ptx.GlobalLaunchID {
			globals = append(globals, x)
		}
	}
	out.Globals = globals
	return &out, nil
}
