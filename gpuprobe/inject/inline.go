package inject

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpuprobe/gpuprobe/jit/ptx"
)

// Entry and exit programs are spliced into the kernel (inlined), not
// called: ptxas does not inline a .func, and a call keeps the probe's
// instructions out of the kernel's schedule. Inlined, ptxas can schedule
// the probe's instructions with the kernel's own, so a warp's life grows
// less. Measured on the H100, same run: kernel_phases' logic written in
// CUDA C around vectorAdd (2^24 threads), 1.357x called and 1.160x
// inlined; kernel_phases injected into vectorAddN, 1.387x called and
// 1.221x inlined (scripts/gpu/bench.sh).
//
// An inlined program is its .func's body in a nested block of the kernel:
// PTX scopes the block's .reg and .local declarations (the program's
// registers shadow the kernel's), its parameters become moves of the call
// site's arguments, its labels get a per-site prefix, and its ret a branch
// to the block's end. Calls inside the body (bpf-to-bpf subprograms,
// support functions) stay calls. Memcapture programs, which run after
// every global access, stay calls: a copy per access would grow the kernel
// by the program's size each time.

// inlineBody is a program prepared for splicing.
type inlineBody struct {
	lines  []string        // the .func body between its braces
	labels map[string]bool // labels it defines, without the $
}

// Parameter names of a compiled program's entry .func (ptx.Func).
const (
	paramCtx    = "[__ctx]"
	paramLen    = "[__len]"
	paramLaunch = "[__launch]"
	paramRet    = "[__ret]"
)

// newInlineBody extracts the entry .func of f from its Body. It fails on a
// body it does not recognise, and the caller then calls the .func instead.
func newInlineBody(f *ptx.Func) (*inlineBody, error) {
	head := ".func (.param .b64 __ret) " + f.Name + "("
	start := strings.Index(f.Body, head)
	if start < 0 {
		return nil, fmt.Errorf("program .func %s: definition not found", f.Name)
	}
	open := strings.Index(f.Body[start:], "\n{\n")
	if open < 0 {
		return nil, fmt.Errorf("program .func %s: body not found", f.Name)
	}
	open += start + len("\n{\n")
	end := strings.Index(f.Body[open:], "\n}\n")
	if end < 0 {
		return nil, fmt.Errorf("program .func %s: end of body not found", f.Name)
	}
	b := &inlineBody{lines: strings.Split(f.Body[open:open+end], "\n"), labels: map[string]bool{}}
	rets := 0
	for i, l := range b.lines {
		t := strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(t, "$") && strings.HasSuffix(t, ":"):
			b.labels[strings.TrimSuffix(t[1:], ":")] = true
		case t == "ret;":
			rets++
		case strings.Contains(t, "ret;"):
			return nil, fmt.Errorf("program .func %s: line %d: a ret other than the function's own: %q", f.Name, i+1, t)
		}
	}
	if rets == 0 {
		return nil, fmt.Errorf("program .func %s: no ret", f.Name)
	}
	return b, nil
}

// write splices the body at site n (unique in the module) with the call's
// arguments ctx and size (registers or immediates) and the launch id
// register launch.
func (b *inlineBody) write(sb *strings.Builder, prog string, n int, ctx, size, launch string) {
	pre := "gpuprobe_i" + strconv.Itoa(n) + "_"
	done := "$" + pre + "ret"
	fmt.Fprintf(sb, "\t{ // gpuprobe: %s (inlined)\n", prog)
	for _, l := range b.lines {
		t := strings.TrimSpace(l)
		switch {
		case t == "ret;":
			fmt.Fprintf(sb, "\tbra.uni %s;\n", done)
			continue
		case strings.HasPrefix(t, "st.param.b64 "+paramRet):
			continue // the return value is not used
		case strings.HasPrefix(t, "ld.param.b64 "):
			if reg, arg, ok := paramLoad(t); ok {
				v := ""
				switch arg {
				case paramCtx:
					v = ctx
				case paramLen:
					v = size
				case paramLaunch:
					v = launch
				}
				if v != "" {
					fmt.Fprintf(sb, "\tmov.b64 %s, %s;\n", reg, v)
					continue
				}
			}
		}
		sb.WriteString(b.relabel(l, pre))
		sb.WriteByte('\n')
	}
	fmt.Fprintf(sb, "%s:\n\t}\n", done)
}

// paramLoad splits "ld.param.b64 %rX, [__name];" into its register and
// its [__name].
func paramLoad(t string) (reg, arg string, ok bool) {
	rest := strings.TrimSuffix(strings.TrimPrefix(t, "ld.param.b64 "), ";")
	reg, arg, ok = strings.Cut(rest, ", ")
	return strings.TrimSpace(reg), strings.TrimSpace(arg), ok
}

// relabel prefixes the body's own labels in line l.
func (b *inlineBody) relabel(l, pre string) string {
	if !strings.Contains(l, "$") {
		return l
	}
	var out strings.Builder
	for i := 0; i < len(l); i++ {
		if l[i] != '$' {
			out.WriteByte(l[i])
			continue
		}
		j := i + 1
		for j < len(l) && (l[j] == '_' || l[j] >= '0' && l[j] <= '9' || l[j] >= 'a' && l[j] <= 'z' || l[j] >= 'A' && l[j] <= 'Z') {
			j++
		}
		out.WriteByte('$')
		if b.labels[l[i+1:j]] {
			out.WriteString(pre)
		}
		out.WriteString(l[i+1 : j])
		i = j - 1
	}
	return out.String()
}
