package ptxmod

import (
	"fmt"
	"strconv"
	"strings"
)

// Module is a parsed PTX module. It keeps the source it was parsed from
// and refers to it by byte offsets; edits are recorded against those
// offsets and applied by Bytes, so that everything not edited stays
// byte-identical.
type Module struct {
	src   []byte
	lines []int32
	edits []edit
	seq   int

	Decls []*Decl // module-scope statements other than functions, in order
	Funcs []*Func // .entry and .func definitions and declarations, in order

	Major, Minor int      // from .version
	Target       []string // from .target: "sm_90", maybe "debug", ...
	AddressSize  int      // from .address_size; 0 when absent

	version, target *Decl
	versionNum      Span // the "7.8" token
	targetArgs      Span // what follows .target on its line
	header          int  // offset just past the last header directive's line
}

// Source returns the text the module was parsed from.
func (m *Module) Source() []byte { return m.src }

// Position returns the 1-based line and column of a byte offset.
func (m *Module) Position(off int) (line, col int) { return position(m.lines, off) }

// Kernels returns the .entry functions that have a body.
func (m *Module) Kernels() []*Func {
	var out []*Func
	for _, f := range m.Funcs {
		if f.Entry && f.HasBody {
			out = append(out, f)
		}
	}
	return out
}

// Func returns the function definition (or, failing that, declaration)
// with the given name, or nil.
func (m *Module) Func(name string) *Func {
	var decl *Func
	for _, f := range m.Funcs {
		if f.Name == name {
			if f.HasBody {
				return f
			}
			decl = f
		}
	}
	return decl
}

// parser turns tokens into a Module.
type parser struct {
	lx       lexer
	toks     []token
	i        int
	m        *Module
	maxFuncs int // Limits.MaxFuncs
}

// Parse parses a PTX module under DefaultLimits. src must not be
// modified while the Module is in use.
func Parse(src []byte) (*Module, error) { return ParseLimits(src, DefaultLimits) }

// ParseLimits parses a PTX module under limits l: past one, it stops with
// a *LimitError.
func ParseLimits(src []byte, l Limits) (*Module, error) {
	if len(src) > l.MaxBytes {
		return nil, &LimitError{Line: 1, Col: 1, Limit: "Limits.MaxBytes",
			What: fmt.Sprintf("%d bytes of PTX, more than %d", len(src), l.MaxBytes)}
	}
	p := &parser{lx: lexer{src: src, lines: newLineTable(src), maxTokens: l.MaxTokens}, maxFuncs: l.MaxFuncs}
	toks, err := p.lx.tokenize()
	if err != nil {
		return nil, err
	}
	p.toks = toks
	p.m = &Module{src: src, lines: p.lx.lines}
	if err := p.module(); err != nil {
		return nil, err
	}
	return p.m, nil
}

func (p *parser) peek() token        { return p.toks[p.i] }
func (p *parser) peekAt(n int) token { return p.toks[min(p.i+n, len(p.toks)-1)] }
func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tokEOF {
		p.i++
	}
	return t
}
func (p *parser) text(t token) string { return string(p.lx.src[t.pos:t.end]) }
func (p *parser) is(t token, s string) bool {
	return t.end-t.pos == len(s) && string(p.lx.src[t.pos:t.end]) == s
}
func (p *parser) isPunct(t token, c byte) bool {
	return t.kind == tokPunct && p.lx.src[t.pos] == c
}
func (p *parser) errorf(t token, format string, args ...any) error {
	return p.lx.errorf(t.pos, format, args...)
}
func (p *parser) describe(t token) string {
	if t.kind == tokEOF {
		return "the end of the file"
	}
	return strconv.Quote(p.text(t))
}

// lineDirectives end at the end of their line rather than at a ';'.
var lineDirectives = map[string]bool{
	".version": true, ".target": true, ".address_size": true, ".file": true, ".loc": true,
}

var linkages = map[string]bool{".visible": true, ".extern": true, ".weak": true, ".common": true}

func (p *parser) module() error {
	for {
		t := p.peek()
		if t.kind == tokEOF {
			return nil
		}
		if t.kind != tokWord || p.lx.src[t.pos] != '.' {
			return p.errorf(t, "expected a directive at module scope, found %s", p.describe(t))
		}
		start := p.i
		linkage := ""
		for w := p.peek(); w.kind == tokWord && linkages[p.text(w)]; w = p.peek() {
			linkage = p.text(w)
			p.next()
		}
		if w := p.peek(); p.is(w, ".entry") || p.is(w, ".func") {
			if len(p.m.Funcs) >= p.maxFuncs {
				line, col := position(p.lx.lines, p.toks[start].pos)
				return &LimitError{Line: line, Col: col, Limit: "Limits.MaxFuncs",
					What: fmt.Sprintf("more than %d functions", p.maxFuncs)}
			}
			f, err := p.function(start, linkage)
			if err != nil {
				return err
			}
			p.m.Funcs = append(p.m.Funcs, f)
			continue
		}
		d, err := p.decl(start, linkage)
		if err != nil {
			return err
		}
		p.m.Decls = append(p.m.Decls, d)
	}
}

// decl parses a module-scope directive statement whose first token
// (after linkage attributes) is at p.i; start is its first token.
func (p *parser) decl(start int, linkage string) (*Decl, error) {
	first := p.toks[start]
	w := p.next()
	if w.kind != tokWord || p.lx.src[w.pos] != '.' {
		return nil, p.errorf(w, "expected a directive after %s, found %s", linkage, p.describe(w))
	}
	dir := p.text(w)
	d := &Decl{Directive: dir, Linkage: linkage}
	d.Line, d.Col = position(p.lx.lines, first.pos)
	last := w
	switch {
	case lineDirectives[dir]:
		argStart := p.i
		for t := p.peek(); t.kind != tokEOF && !t.nl; t = p.peek() {
			last = p.next()
		}
		if err := p.header(d, dir, argStart); err != nil {
			return nil, err
		}
	case dir == ".section":
		for t := p.peek(); !p.isPunct(t, '{'); t = p.peek() {
			if t.kind == tokEOF || p.isPunct(t, ';') || p.isPunct(t, '}') {
				return nil, p.errorf(t, ".section at %d:%d: expected '{', found %s", d.Line, d.Col, p.describe(t))
			}
			p.next()
		}
		open := p.next()
		end, err := p.skipBalanced(open)
		if err != nil {
			return nil, err
		}
		last = end
	default:
		var err error
		if last, err = p.untilSemicolon(first, "declaration"); err != nil {
			return nil, err
		}
		d.Name = p.declName(start, p.i)
	}
	d.Span = Span{first.pos, last.end}
	return d, nil
}

// header records .version, .target and .address_size.
func (p *parser) header(d *Decl, dir string, argStart int) error {
	args := p.toks[argStart:p.i]
	switch dir {
	case ".version":
		if len(args) != 1 || args[0].kind != tokNumber {
			return p.errorf(p.toks[argStart-1], ".version needs one number like 7.8")
		}
		s := p.text(args[0])
		maj, min, ok := strings.Cut(s, ".")
		a, err1 := strconv.Atoi(maj)
		b, err2 := strconv.Atoi(min)
		if !ok || err1 != nil || err2 != nil || a > 1000 || b > 1000 {
			return p.errorf(args[0], ".version %q is not MAJOR.MINOR", s)
		}
		if p.m.version != nil {
			return p.errorf(p.toks[argStart-1], "second .version (the first is at %d:%d)", p.m.version.Line, p.m.version.Col)
		}
		p.m.Major, p.m.Minor, p.m.version = a, b, d
		p.m.versionNum = Span{args[0].pos, args[0].end}
	case ".target":
		if len(args) == 0 {
			return p.errorf(p.toks[argStart-1], ".target needs a target such as sm_90")
		}
		for _, t := range args {
			if t.kind == tokWord {
				p.m.Target = append(p.m.Target, p.text(t))
			} else if !p.isPunct(t, ',') {
				return p.errorf(t, "unexpected %s in .target", p.describe(t))
			}
		}
		p.m.target = d
		p.m.targetArgs = Span{args[0].pos, args[len(args)-1].end}
	case ".address_size":
		if len(args) != 1 || args[0].kind != tokNumber {
			return p.errorf(p.toks[argStart-1], ".address_size needs 32 or 64")
		}
		n, err := strconv.Atoi(p.text(args[0]))
		if err != nil || (n != 32 && n != 64) {
			return p.errorf(args[0], ".address_size %s: want 32 or 64", p.text(args[0]))
		}
		p.m.AddressSize = n
	default:
		return nil
	}
	p.m.header = lineEnd(p.lx.src, p.toks[p.i-1].end)
	return nil
}

// lineEnd returns the offset just past the newline that ends the line
// containing off (or len(src)).
func lineEnd(src []byte, off int) int {
	for i := off; i < len(src); i++ {
		if src[i] == '\n' {
			return i + 1
		}
	}
	return len(src)
}

// declName returns the name declared by the tokens [from, to): the last
// plain word before an initializer, an array size or the ';'.
func (p *parser) declName(from, to int) string {
	name := ""
	for _, t := range p.toks[from:to] {
		if p.isPunct(t, '=') || p.isPunct(t, '[') || p.isPunct(t, '<') || p.isPunct(t, ';') {
			break
		}
		if t.kind == tokWord && p.lx.src[t.pos] != '.' {
			name = p.text(t)
		}
	}
	return name
}

// untilSemicolon consumes tokens up to and including a ';' that is not
// inside brackets, and returns the ';'.
func (p *parser) untilSemicolon(first token, what string) (token, error) {
	var stack []byte
	for {
		t := p.next()
		switch {
		case t.kind == tokEOF:
			line, col := position(p.lx.lines, first.pos)
			return t, p.errorf(t, "%s at %d:%d is not terminated by ';'", what, line, col)
		case t.kind != tokPunct:
		case p.isPunct(t, '(') || p.isPunct(t, '[') || p.isPunct(t, '{'):
			stack = append(stack, closer(p.lx.src[t.pos]))
		case p.isPunct(t, ')') || p.isPunct(t, ']') || p.isPunct(t, '}'):
			if len(stack) == 0 || stack[len(stack)-1] != p.lx.src[t.pos] {
				return t, p.errorf(t, "unbalanced %q in %s", p.lx.src[t.pos], what)
			}
			stack = stack[:len(stack)-1]
		case p.isPunct(t, ';') && len(stack) == 0:
			return t, nil
		}
	}
}

func closer(c byte) byte {
	switch c {
	case '(':
		return ')'
	case '[':
		return ']'
	}
	return '}'
}

// skipBalanced consumes tokens after an opening '{' up to its matching
// '}' and returns the '}'.
func (p *parser) skipBalanced(open token) (token, error) {
	depth := 1
	for {
		t := p.next()
		switch {
		case t.kind == tokEOF:
			return t, p.errorf(open, "'{' is not closed before the end of the file")
		case p.isPunct(t, '{'):
			depth++
		case p.isPunct(t, '}'):
			if depth--; depth == 0 {
				return t, nil
			}
		}
	}
}

// function parses a .entry or .func whose attributes start at token
// start; p.i is at the .entry/.func word.
func (p *parser) function(start int, linkage string) (*Func, error) {
	first := p.toks[start]
	f := &Func{Linkage: linkage}
	f.Line, f.Col = position(p.lx.lines, first.pos)
	kw := p.next()
	f.Entry = p.is(kw, ".entry")
	if !f.Entry && p.isPunct(p.peek(), '(') {
		ret, _, err := p.params()
		if err != nil {
			return nil, err
		}
		f.Returns = ret
	}
	name := p.next()
	if name.kind != tokWord || p.lx.src[name.pos] == '.' {
		return nil, p.errorf(name, "expected a function name after %s, found %s", p.text(kw), p.describe(name))
	}
	f.Name, f.NameSpan = p.text(name), Span{name.pos, name.end}
	if p.isPunct(p.peek(), '(') {
		ps, span, err := p.params()
		if err != nil {
			return nil, err
		}
		f.Params, f.ParamList = ps, span
	}
	// Performance directives and attributes up to the body or the ';'.
	for {
		t := p.peek()
		if p.isPunct(t, '{') || p.isPunct(t, ';') {
			break
		}
		if t.kind != tokWord || p.lx.src[t.pos] != '.' {
			return nil, p.errorf(t, "expected '{', ';' or a directive after the header of %s, found %s", f.Name, p.describe(t))
		}
		from := p.next()
		to := from
		for u := p.peek(); !p.isPunct(u, '{') && !p.isPunct(u, ';') && u.kind != tokEOF &&
			!(u.kind == tokWord && p.lx.src[u.pos] == '.'); u = p.peek() {
			to = p.next()
		}
		f.Performance = append(f.Performance, string(p.lx.src[from.pos:to.end]))
	}
	t := p.next()
	if p.isPunct(t, ';') {
		f.Span = Span{first.pos, t.end}
		return f, nil
	}
	f.HasBody, f.BodyOpen = true, t.pos
	body, end, err := p.block(0, t)
	if err != nil {
		return nil, err
	}
	f.Body, f.BodyClose = body, end.pos
	f.Span = Span{first.pos, end.end}
	analyse(f)
	return f, nil
}

// block parses statements after an opening '{' up to the matching '}',
// which it consumes and returns.
func (p *parser) block(depth int, open token) ([]*Stmt, token, error) {
	var out []*Stmt
	for {
		t := p.peek()
		switch {
		case t.kind == tokEOF:
			line, col := position(p.lx.lines, open.pos)
			return nil, t, p.errorf(t, "'{' at %d:%d is not closed before the end of the file", line, col)
		case p.isPunct(t, '}'):
			return out, p.next(), nil
		case p.isPunct(t, ';'):
			p.next() // an empty statement
			continue
		}
		s, err := p.stmt(depth)
		if err != nil {
			return nil, t, err
		}
		out = append(out, s)
	}
}

// stmt parses one statement of a body.
func (p *parser) stmt(depth int) (*Stmt, error) {
	first := p.peek()
	s := &Stmt{Depth: depth}
	s.Line, s.Col = position(p.lx.lines, first.pos)
	switch {
	case p.isPunct(first, '{'):
		p.next()
		body, end, err := p.block(depth+1, first)
		if err != nil {
			return nil, err
		}
		s.Kind, s.Body, s.Span = StmtBlock, body, Span{first.pos, end.end}
		return s, nil
	case first.kind == tokWord && p.isPunct(p.peekAt(1), ':') && p.lx.src[first.pos] != '.':
		p.next()
		colon := p.next()
		s.Kind, s.Label, s.Span = StmtLabel, p.text(first), Span{first.pos, colon.end}
		return s, nil
	case first.kind == tokWord && p.lx.src[first.pos] == '.':
		p.next()
		s.Kind, s.Directive = StmtDirective, p.text(first)
		last := first
		if lineDirectives[s.Directive] {
			for t := p.peek(); t.kind != tokEOF && !t.nl && !p.isPunct(t, '}'); t = p.peek() {
				last = p.next()
			}
		} else {
			var err error
			if last, err = p.untilSemicolon(first, s.Directive+" directive"); err != nil {
				return nil, err
			}
		}
		s.Span = Span{first.pos, last.end}
		return s, nil
	case p.isPunct(first, '@'):
		p.next()
		if p.isPunct(p.peek(), '!') {
			p.next()
			s.GuardNot = true
		}
		g := p.next()
		if g.kind != tokWord {
			return nil, p.errorf(g, "expected a predicate register after '@', found %s", p.describe(g))
		}
		s.Guard = p.text(g)
		return p.instr(s, first)
	case first.kind == tokWord:
		return p.instr(s, first)
	}
	return nil, p.errorf(first, "unexpected %s in a function body", p.describe(first))
}

// instr parses an instruction's opcode and operands, up to its ';'.
func (p *parser) instr(s *Stmt, first token) (*Stmt, error) {
	op := p.next()
	if op.kind != tokWord || p.lx.src[op.pos] == '.' || p.lx.src[op.pos] == '%' {
		return nil, p.errorf(op, "expected an instruction, found %s", p.describe(op))
	}
	s.Kind, s.Opcode = StmtInstr, p.text(op)
	from := p.i
	semi, err := p.untilSemicolon(first, "instruction "+s.Opcode)
	if err != nil {
		return nil, err
	}
	s.Operands = p.operands(p.toks[from : p.i-1])
	s.Span = Span{first.pos, semi.end}
	return s, nil
}

// String returns "name (.entry, L:C)" for messages.
func (f *Func) String() string {
	kind := ".func"
	if f.Entry {
		kind = ".entry"
	}
	return fmt.Sprintf("%s %s at %d:%d", kind, f.Name, f.Line, f.Col)
}
