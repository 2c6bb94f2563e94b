package demangle

import (
	"fmt"
	"strconv"
)

// printer renders a node tree. It stops (and reports failure) when the
// output passes maxOutput bytes or the tree nests deeper than maxDepth*4,
// which bounds time and memory on names built to explode through
// substitutions.
type printer struct {
	b       []byte
	depth   int
	failed  bool
	why     *Error   // the first reason printing failed, when known
	stale   bool     // a ", " was taken back: c++filt then sees ' ' as the last char
	tmpls   [][]node // template argument lists T_ refers to, innermost last
	lambda  bool     // printing a lambda's parameters: T_ prints as auto:N
	packIdx int      // element of the pack being expanded; -1 while finding packs
}

// newPrinter returns a printer. Like c++filt, a template parameter that
// names a pack outside any expansion prints the pack's first element.
func newPrinter() *printer { return &printer{b: make([]byte, 0, 256)} }

func (p *printer) result() (string, bool) { return string(p.b), !p.failed }

// error says why printing failed.
func (p *printer) error() *Error {
	if p.why != nil {
		return p.why
	}
	if len(p.b) >= maxOutput-maxOutput/8 {
		return &Error{Offset: 0, Reason: fmt.Sprintf("demangled name longer than %d bytes", maxOutput)}
	}
	return &Error{Offset: 0, Reason: "name nests too deeply to print"}
}

func (p *printer) str(s string) {
	if p.failed {
		return
	}
	if len(p.b)+len(s) > maxOutput {
		p.failed = true
		return
	}
	if s != "" {
		p.stale = false
	}
	p.b = append(p.b, s...)
}

func (p *printer) last() byte {
	if p.stale {
		return ' '
	}
	if len(p.b) == 0 {
		return 0
	}
	return p.b[len(p.b)-1]
}

func (p *printer) print(n node) {
	p.left(n)
	p.right(n)
}

func (p *printer) enter() bool {
	p.depth++
	if p.depth > maxDepth*4 {
		p.failed = true
	}
	return !p.failed
}

// lookup returns the argument a template parameter names and the template
// stack to print it with (the parameter's own list popped, since an
// argument may itself refer to an outer template's parameters).
func (p *printer) lookup(t *tparamN, stack [][]node) (node, [][]node, bool) {
	if len(stack) == 0 {
		return nil, nil, false
	}
	args := stack[len(stack)-1]
	if t.idx >= len(args) {
		return nil, nil, false
	}
	a := args[t.idx]
	if pk, ok := a.(*packN); ok && p.packIdx >= 0 {
		if p.packIdx >= len(pk.elems) {
			return nil, nil, false
		}
		a = pk.elems[p.packIdx]
	}
	return a, stack[:len(stack)-1], true
}

// resolve follows template parameters to the node they stand for.
func (p *printer) resolve(n node) node {
	stack := p.tmpls
	for i := 0; i < maxDepth; i++ {
		t, ok := n.(*tparamN)
		if !ok || p.lambda {
			return n
		}
		a, rest, ok := p.lookup(t, stack)
		if !ok {
			return n
		}
		n, stack = a, rest
	}
	return n
}

// param prints template parameter t with half (left or right).
func (p *printer) param(t *tparamN, half func(node)) {
	if p.lambda {
		if half != nil {
			p.str("auto:" + strconv.Itoa(t.idx+1))
		}
		return
	}
	a, rest, ok := p.lookup(t, p.tmpls)
	if !ok {
		p.failed = true
		if p.why == nil {
			p.why = &Error{Offset: t.off, Reason: "template parameter has no argument here"}
		}
		return
	}
	saved := p.tmpls
	p.tmpls = rest
	half(a)
	p.tmpls = saved
}

// hasRight reports whether n prints a declarator part after the name
// (functions and arrays, also through pointers and qualifiers).
func (p *printer) hasRight(n node) bool {
	for i := 0; i < maxDepth; i++ {
		switch v := p.resolve(n).(type) {
		case *funcTypeN, *arrayN:
			return true
		case *ptrN:
			n = v.child
		case *qualTypeN:
			n = v.child
		case *ptrMemN:
			n = v.mem
		default:
			return false
		}
	}
	return false
}

func (p *printer) isFuncOrArray(n node) (fn, arr bool) {
	n = p.resolve(n)
	if q, ok := n.(*qualTypeN); ok {
		if _, isArr := p.resolve(q.child).(*arrayN); isArr {
			return false, true
		}
	}
	switch n.(type) {
	case *funcTypeN:
		return true, false
	case *arrayN:
		return false, true
	}
	return false, false
}

// list prints nodes separated by ", ". Like c++filt, a separator before an
// element that prints nothing (an empty pack) is taken back, one before the
// first element is not there to take back.
func (p *printer) list(ns []node) {
	for i, n := range ns {
		if i == 0 {
			p.print(n)
			continue
		}
		mark := len(p.b)
		p.str(", ")
		p.print(n)
		if p.failed {
			return
		}
		if len(p.b) == mark+2 {
			p.b = p.b[:mark]
			p.stale = true
		}
	}
}

func (p *printer) left(n node) {
	if !p.enter() {
		return
	}
	defer func() { p.depth-- }()
	switch v := n.(type) {
	case *tparamN:
		p.param(v, p.left)
	case *nameN:
		p.str(v.s)
	case *builtinN:
		p.str(v.s)
	case *qualN:
		p.print(v.scope)
		p.str("::")
		p.print(v.name)
	case *tmplN:
		p.print(v.name)
		if p.last() == '<' {
			p.str(" ")
		}
		p.str("<")
		p.list(v.args)
		if p.last() == '>' {
			p.str(" ")
		}
		p.str(">")
	case *abiN:
		p.print(v.name)
		p.str("[abi:" + v.tag + "]")
	case *ctorN:
		if v.dtor {
			p.str("~")
		}
		p.print(v.base)
	case *opN:
		p.str("operator")
		if c := v.op.name[0]; c >= 'a' && c <= 'z' {
			p.str(" ")
		}
		p.str(v.op.name)
	case *convN:
		p.str("operator ")
		p.print(v.typ)
	case *litOpN:
		p.str(`operator"" ` + v.suffix)
	case *specialN:
		p.str(v.prefix)
		p.print(v.child)
		p.str(v.suffix)
		if v.tail != nil {
			p.print(v.tail)
		}
	case *encN:
		p.printEncoding(v)
	case *localN:
		p.print(v.enc)
		p.str("::")
		p.print(v.entity)
	case *lambdaN:
		p.str("{lambda(")
		saved := p.lambda
		p.lambda = true
		p.list(v.params)
		p.lambda = saved
		p.str(")#" + strconv.Itoa(v.num) + "}")
	case *unnamedN:
		p.str("{unnamed type#" + strconv.Itoa(v.num) + "}")
	case *defaultArgN:
		p.str("{default arg#" + strconv.Itoa(v.num) + "}")
	case *bindingN:
		p.str("[")
		p.list(v.names)
		p.str("]")
	case *qualTypeN:
		p.left(v.child)
		p.str(v.q)
	case *ptrN:
		p.printPtrLeft(v)
	case *funcTypeN:
		p.left(v.ret)
		if !p.hasRight(v.ret) {
			p.str(" ")
		}
	case *arrayN:
		p.left(v.child)
	case *ptrMemN:
		p.left(v.mem)
		fn, arr := p.isFuncOrArray(v.mem)
		switch {
		case fn:
			p.str("(")
		case arr:
			p.str(" (")
		default:
			p.str(" ")
		}
		p.print(v.cls)
		p.str("::*")
	case *vectorN:
		p.print(v.child)
		p.str(" __vector(")
		if v.dim != nil {
			p.print(v.dim)
		}
		p.str(")")
	case *packN:
		p.list(v.elems)
	case *expandN:
		p.printExpansion(v)
	case *litN:
		p.printLiteral(v)
	case *exprN:
		p.printExpr(v)
	default:
		p.failed = true
	}
}

func (p *printer) right(n node) {
	if !p.enter() {
		return
	}
	defer func() { p.depth-- }()
	switch v := n.(type) {
	case *tparamN:
		if !p.lambda {
			p.param(v, p.right)
		}
	case *qualTypeN:
		p.right(v.child)
	case *ptrN:
		c := p.collapse(v)
		fn, arr := p.isFuncOrArray(c.child)
		if fn || arr {
			p.str(")")
		}
		p.right(c.child)
	case *funcTypeN:
		p.str("(")
		p.list(v.params)
		p.str(")")
		p.str(v.cv)
		p.str(v.ref)
		p.str(v.exc)
		p.right(v.ret)
	case *arrayN:
		if p.last() != ']' {
			p.str(" ")
		}
		p.str("[")
		if v.dim != nil {
			p.print(v.dim)
		}
		p.str("]")
		p.right(v.child)
	case *ptrMemN:
		fn, arr := p.isFuncOrArray(v.mem)
		if fn || arr {
			p.str(")")
		}
		p.right(v.mem)
	}
}

// collapse applies reference collapsing: & to && gives &, && to & gives &.
func (p *printer) collapse(v *ptrN) *ptrN {
	if v.sym == "*" {
		return v
	}
	c := v
	for i := 0; i < maxDepth; i++ {
		inner, ok := p.resolve(c.child).(*ptrN)
		if !ok || inner.sym == "*" {
			break
		}
		sym := inner.sym
		if c.sym == "&" || sym == "&" {
			sym = "&"
		}
		c = &ptrN{child: inner.child, sym: sym}
	}
	return c
}

func (p *printer) printPtrLeft(v *ptrN) {
	c := p.collapse(v)
	p.left(c.child)
	fn, arr := p.isFuncOrArray(c.child)
	switch {
	case fn:
		p.str("(")
	case arr:
		p.str(" (")
	}
	p.str(c.sym)
}

func (p *printer) printEncoding(v *encN) {
	typed := v.name
	if l, ok := typed.(*localN); ok {
		typed = l.entity
	}
	if t, ok := typed.(*tmplN); ok {
		saved := p.tmpls
		p.tmpls = append(p.tmpls[:len(p.tmpls):len(p.tmpls)], t.args)
		defer func() { p.tmpls = saved }()
	}
	if v.ret != nil {
		p.left(v.ret)
		if !p.hasRight(v.ret) {
			p.str(" ")
		}
	}
	p.print(v.name)
	p.str("(")
	p.list(v.params)
	p.str(")")
	p.str(v.cv)
	p.str(v.ref)
	if v.ret != nil {
		p.right(v.ret)
	}
}

// findPack returns the first argument pack a template parameter inside n
// stands for.
func (p *printer) findPack(n node, depth int) *packN {
	if depth > maxDepth || n == nil {
		return nil
	}
	d := depth + 1
	switch v := n.(type) {
	case *tparamN:
		saved := p.packIdx
		p.packIdx = -1
		a, _, ok := p.lookup(v, p.tmpls)
		p.packIdx = saved
		if pk, isPack := a.(*packN); ok && isPack {
			return pk
		}
	case *qualTypeN:
		return p.findPack(v.child, d)
	case *ptrN:
		return p.findPack(v.child, d)
	case *arrayN:
		return p.findFirst(d, v.dim, v.child)
	case *vectorN:
		return p.findFirst(d, v.dim, v.child)
	case *ptrMemN:
		return p.findFirst(d, v.cls, v.mem)
	case *funcTypeN:
		return p.findFirst(d, append([]node{v.ret}, v.params...)...)
	case *tmplN:
		return p.findFirst(d, append([]node{v.name}, v.args...)...)
	case *qualN:
		return p.findFirst(d, v.scope, v.name)
	case *expandN:
		return p.findPack(v.child, d)
	case *exprN:
		return p.findFirst(d, append([]node{v.typ}, v.args...)...)
	}
	return nil
}

func (p *printer) findFirst(depth int, ns ...node) *packN {
	for _, n := range ns {
		if pk := p.findPack(n, depth); pk != nil {
			return pk
		}
	}
	return nil
}

// printExpansion prints a pack expansion once per element of the pack it
// expands, or as "pattern..." when no pack is known.
func (p *printer) printExpansion(v *expandN) {
	pk := p.findPack(v.child, 0)
	if pk == nil {
		p.sub(v.child)
		p.str("...")
		return
	}
	saved := p.packIdx
	for i := range pk.elems {
		if i > 0 {
			p.str(", ")
		}
		p.packIdx = i
		p.print(v.child)
	}
	p.packIdx = saved
}
