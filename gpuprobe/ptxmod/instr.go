package ptxmod

import "strings"

// declDirectives are the directives that may open a body before its
// first instruction: the entry probe goes after them.
var declDirectives = map[string]bool{
	".reg": true, ".local": true, ".shared": true, ".param": true, ".const": true, ".global": true,
}

// analyse fills a function's Top, Exits and Mem.
func analyse(f *Func) {
	for _, s := range f.Body {
		if s.Kind == StmtDirective && declDirectives[s.Directive] {
			continue
		}
		f.Top = s
		break
	}
	walk(f.Body, func(s *Stmt) {
		if s.Kind != StmtInstr {
			return
		}
		if IsExit(s.Opcode) {
			f.Exits = append(f.Exits, s)
		}
		if m, ok := memAccess(s); ok {
			f.Mem = append(f.Mem, m)
		}
	})
}

// walk calls fn for every statement, depth first, in source order.
func walk(body []*Stmt, fn func(*Stmt)) {
	for _, s := range body {
		fn(s)
		if s.Kind == StmtBlock {
			walk(s.Body, fn)
		}
	}
}

// Walk calls fn for every statement of the function body, nested ones
// included, in source order.
func (f *Func) Walk(fn func(*Stmt)) { walk(f.Body, fn) }

// IsExit reports whether an opcode ends the thread or returns from the
// function: ret, ret.uni, exit.
func IsExit(opcode string) bool {
	op, _, _ := strings.Cut(opcode, ".")
	return op == "ret" || op == "exit"
}

// typeSizes are the sizes in bytes of PTX fundamental types.
var typeSizes = map[string]int{
	"b8": 1, "u8": 1, "s8": 1, "e4m3": 1, "e5m2": 1,
	"b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2, "e4m3x2": 2, "e5m2x2": 2,
	"b32": 4, "u32": 4, "s32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4, "tf32": 4,
	"b64": 8, "u64": 8, "s64": 8, "f64": 8,
	"b128": 16,
}

// stateSpaces are the state-space qualifiers of ld and st.
var stateSpaces = map[string]bool{"global": true, "shared": true, "local": true, "const": true, "param": true}

// memAccess describes an ld, ldu or st instruction.
func memAccess(s *Stmt) (MemAccess, bool) {
	parts := strings.Split(s.Opcode, ".")
	m := MemAccess{Stmt: s, Vec: 1}
	switch parts[0] {
	case "ld", "ldu":
	case "st":
		m.Store = true
	default:
		return m, false
	}
	for _, q := range parts[1:] {
		base, _, _ := strings.Cut(q, "::") // shared::cta, param::entry
		switch {
		case stateSpaces[base]:
			m.Space = base
		case q == "v2" || q == "v4" || q == "v8":
			m.Vec = int(q[1] - '0')
		case typeSizes[q] > 0:
			m.Type = q
		}
	}
	if m.Type != "" {
		m.Size = m.Vec * typeSizes[m.Type]
	}
	i := 1
	if m.Store {
		i = 0
	}
	if i < len(s.Operands) {
		m.Addr = s.Operands[i]
	}
	return m, true
}

// GlobalAccesses returns the loads and stores that name the global state
// space; with generic set, also those with no state space, which reach
// global memory through a generic address.
func (f *Func) GlobalAccesses(generic bool) []MemAccess {
	var out []MemAccess
	for _, m := range f.Mem {
		if m.Global() || (generic && m.Generic()) {
			out = append(out, m)
		}
	}
	return out
}
