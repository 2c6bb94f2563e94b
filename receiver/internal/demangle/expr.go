package demangle

import (
	"strconv"
	"strings"
)

// opInfo describes one two-letter operator code.
type opInfo struct {
	code  string
	name  string // as printed after "operator" and in expressions
	arity int
	kind  exprKind
}

var operators = map[string]*opInfo{}

func init() {
	for _, o := range []opInfo{
		{"aa", "&&", 2, exBinary}, {"ad", "&", 1, exUnary}, {"an", "&", 2, exBinary},
		{"aN", "&=", 2, exBinary}, {"aS", "=", 2, exBinary}, {"aw", "co_await", 1, exPrefix},
		{"cm", ",", 2, exBinary}, {"co", "~", 1, exUnary}, {"dV", "/=", 2, exBinary},
		{"da", "delete[]", 1, exPrefix}, {"de", "*", 1, exUnary}, {"dl", "delete", 1, exPrefix},
		{"dv", "/", 2, exBinary}, {"eO", "^=", 2, exBinary}, {"eo", "^", 2, exBinary},
		{"eq", "==", 2, exBinary}, {"ge", ">=", 2, exBinary}, {"gt", ">", 2, exBinary},
		{"ix", "[]", 2, exBinary}, {"lS", "<<=", 2, exBinary}, {"le", "<=", 2, exBinary},
		{"ls", "<<", 2, exBinary}, {"lt", "<", 2, exBinary}, {"mI", "-=", 2, exBinary},
		{"mL", "*=", 2, exBinary}, {"mi", "-", 2, exBinary}, {"ml", "*", 2, exBinary},
		{"mm", "--", 1, exPostfix}, {"na", "new[]", 3, exNew}, {"ne", "!=", 2, exBinary},
		{"ng", "-", 1, exUnary}, {"nt", "!", 1, exUnary}, {"nw", "new", 3, exNew},
		{"oR", "|=", 2, exBinary}, {"oo", "||", 2, exBinary}, {"or", "|", 2, exBinary},
		{"pL", "+=", 2, exBinary}, {"pl", "+", 2, exBinary}, {"pm", "->*", 2, exBinary},
		{"pp", "++", 1, exPostfix}, {"ps", "+", 1, exUnary}, {"pt", "->", 2, exMember},
		{"qu", "?", 3, exTernary}, {"rM", "%=", 2, exBinary}, {"rS", ">>=", 2, exBinary},
		{"rm", "%", 2, exBinary}, {"rs", ">>", 2, exBinary}, {"ss", "<=>", 2, exBinary},
		{"cl", "()", 2, exCall}, {"dt", ".", 2, exMember}, {"ds", ".*", 2, exBinary},
		{"sz", "sizeof ", 1, exPrefix}, {"az", "alignof ", 1, exPrefix},
		{"st", "sizeof ", 1, exSizeofT}, {"at", "alignof ", 1, exSizeofT},
		{"tw", "throw ", 1, exPrefix},
		{"fl", "...", 2, exFold}, {"fr", "...", 2, exFold}, {"fL", "...", 3, exFold}, {"fR", "...", 3, exFold},
	} {
		o := o
		operators[o.code] = &o
	}
}

// namedCasts maps the first letter of dc, sc, cc and rc to the cast.
var namedCasts = [256]string{'d': "dynamic_cast", 's': "static_cast", 'c': "const_cast", 'r': "reinterpret_cast"}

// operatorName parses <operator-name> in a name (operator+, operator new,
// conversion and literal operators).
func (p *parser) operatorName(info *nameInfo) node {
	code := p.in.s[p.in.pos:min(len(p.in.s), p.in.pos+2)]
	switch code {
	case "cv":
		p.in.pos += 2
		p.convType++
		t := p.typ()
		p.convType--
		if t == nil {
			return nil
		}
		info.ctorConv = true
		return &convN{typ: t}
	case "li":
		p.in.pos += 2
		s := p.sourceName()
		if s == nil {
			return nil
		}
		return &litOpN{suffix: s.(*nameN).s}
	}
	if len(code) == 2 && code[0] == 'v' && isDigit(code[1]) {
		p.in.pos += 2
		s := p.sourceName()
		if s == nil {
			return nil
		}
		return &opN{op: &opInfo{name: " " + s.(*nameN).s}}
	}
	o, ok := operators[code]
	if !ok || code == "dt" || code == "ds" || code == "st" || code == "at" || code == "tw" {
		return p.in.fail("unknown operator %q", code)
	}
	p.in.pos += 2
	return &opN{op: o}
}

// expression parses <expression>.
func (p *parser) expression() node {
	if !p.in.enter() {
		return nil
	}
	defer p.in.leave()
	c := p.in.peek()
	code := p.in.s[p.in.pos:min(len(p.in.s), p.in.pos+2)]
	switch {
	case c == 'L':
		return p.exprPrimary()
	case c == 'T':
		return p.templateParam()
	case code == "fp":
		p.in.pos += 2
		if p.in.consume('_') {
			return &nameN{"{parm#1}"}
		}
		n, _ := p.in.number()
		if p.in.err != nil || !p.in.expect('_', "function parameter") {
			return nil
		}
		return &nameN{"{parm#" + strconv.Itoa(n+2) + "}"}
	case code == "fL":
		p.in.pos += 2
		p.in.number()
		if !p.in.expect('p', "function parameter level") {
			return nil
		}
		p.in.cvQualifiers()
		n := 1
		if !p.in.consume('_') {
			v, _ := p.in.number()
			if !p.in.expect('_', "function parameter") {
				return nil
			}
			n = v + 2
		}
		return &nameN{"{parm#" + strconv.Itoa(n) + "}"}
	case code == "pp" && p.in.peekAt(2) == '_', code == "mm" && p.in.peekAt(2) == '_':
		p.in.pos += 3
		a := p.expression()
		if a == nil {
			return nil
		}
		return &exprN{kind: exUnary, op: operators[code].name, args: []node{a}}
	case code == "cl":
		p.in.pos += 2
		args, ok := p.listToE(p.expression)
		if !ok {
			return nil
		}
		if len(args) == 0 {
			return p.in.fail("call expression without a callee")
		}
		return &exprN{kind: exCall, args: args}
	case code == "cv":
		p.in.pos += 2
		p.convType++
		t := p.typ()
		p.convType--
		if t == nil {
			return nil
		}
		e := &exprN{kind: exCast, typ: t}
		if p.in.consume('_') {
			e.op = "list"
			var ok bool
			if e.args, ok = p.listToE(p.expression); !ok {
				return nil
			}
			return e
		}
		a := p.expression()
		if a == nil {
			return nil
		}
		e.args = []node{a}
		return e
	case code == "tl", code == "il":
		p.in.pos += 2
		e := &exprN{kind: exBraced}
		if code == "tl" {
			if e.typ = p.typ(); e.typ == nil {
				return nil
			}
		}
		var ok bool
		if e.args, ok = p.listToE(p.expression); !ok {
			return nil
		}
		return e
	case code == "dc", code == "sc", code == "cc", code == "rc":
		p.in.pos += 2
		t := p.typ()
		if t == nil {
			return nil
		}
		a := p.expression()
		if a == nil {
			return nil
		}
		name := namedCasts[code[0]]
		return &exprN{kind: exNamedCast, op: name, typ: t, args: []node{a}}
	case code == "sZ":
		p.in.pos += 2
		var a node
		if p.in.peek() == 'T' {
			a = p.templateParam()
		} else {
			a = p.expression()
		}
		if a == nil {
			return nil
		}
		return &exprN{kind: exSizeofPack, args: []node{a}}
	case code == "sp":
		p.in.pos += 2
		a := p.expression()
		if a == nil {
			return nil
		}
		return &expandN{child: a}
	case code == "fl", code == "fr", code == "fL", code == "fR":
		p.in.pos += 2
		ocode := p.in.s[p.in.pos:min(len(p.in.s), p.in.pos+2)]
		o, ok := operators[ocode]
		if !ok {
			return p.in.fail("unknown operator %q in fold expression", ocode)
		}
		p.in.pos += 2
		e := &exprN{kind: exFold, op: code + o.name}
		n := 1
		if code[1] == 'L' || code[1] == 'R' {
			n = 2
		}
		for i := 0; i < n; i++ {
			a := p.expression()
			if a == nil {
				return nil
			}
			e.args = append(e.args, a)
		}
		return e
	case code == "tr":
		p.in.pos += 2
		return &nameN{"throw"}
	case code == "nw", code == "na":
		return p.newExpr(code)
	case code == "sr", code == "gs", code == "on", code == "dn", isDigit(c):
		return p.unresolvedName()
	}
	o, ok := operators[code]
	if !ok {
		return p.in.fail("unknown expression %q", code)
	}
	p.in.pos += 2
	e := &exprN{kind: o.kind, op: o.name}
	if o.kind == exSizeofT {
		if e.typ = p.typ(); e.typ == nil {
			return nil
		}
		return e
	}
	if o.kind == exMember {
		a := p.expression()
		if a == nil {
			return nil
		}
		b := p.unresolvedName()
		if b == nil {
			return nil
		}
		e.args = []node{a, b}
		return e
	}
	for i := 0; i < o.arity; i++ {
		a := p.expression()
		if a == nil {
			return nil
		}
		e.args = append(e.args, a)
	}
	return e
}

// newExpr parses [gs] nw <expression>* _ <type> [pi <expression>* E | il ...] E.
func (p *parser) newExpr(code string) node {
	p.in.pos += 2
	for p.in.peek() != '_' {
		if p.expression() == nil {
			return nil
		}
	}
	p.in.pos++
	t := p.typ()
	if t == nil {
		return nil
	}
	if p.in.peek() == 'p' && p.in.peekAt(1) == 'i' {
		p.in.pos += 2
		for p.in.peek() != 'E' {
			if p.expression() == nil {
				return nil
			}
		}
	}
	if !p.in.expect('E', "end of new expression") {
		return nil
	}
	return &exprN{kind: exNew, op: operators[code].name, typ: t}
}

// unresolvedName parses the dependent names of expressions: [gs] [sr ...]
// <base-unresolved-name>.
func (p *parser) unresolvedName() node {
	global := false
	if p.in.peek() == 'g' && p.in.peekAt(1) == 's' {
		p.in.pos += 2
		global = true
	}
	var n node
	if p.in.peek() == 's' && p.in.peekAt(1) == 'r' {
		p.in.pos += 2
		scope := p.unresolvedScope()
		if scope == nil {
			return nil
		}
		b := p.baseUnresolvedName()
		if b == nil {
			return nil
		}
		n = &qualN{scope: scope, name: b}
	} else {
		if n = p.baseUnresolvedName(); n == nil {
			return nil
		}
	}
	if global {
		n = &qualN{scope: &nameN{""}, name: n}
	}
	return n
}

// unresolvedScope parses the scope after "sr": N <type> <level>* E,
// <level>+ E (levels are simple ids) or, as older GCC emits, a plain <type>.
func (p *parser) unresolvedScope() node {
	if p.in.consume('N') {
		scope := p.typ()
		for scope != nil && p.in.peek() != 'E' {
			q := p.simpleID()
			if q == nil {
				return nil
			}
			scope = &qualN{scope: scope, name: q}
		}
		if scope == nil || !p.in.expect('E', "end of unresolved scope") {
			return nil
		}
		return scope
	}
	if !isDigit(p.in.peek()) {
		return p.typ()
	}
	pos, nsubs, last := p.in.pos, len(p.subs), p.lastName
	var scope node
	for isDigit(p.in.peek()) {
		q := p.simpleID()
		if q == nil {
			break
		}
		if scope == nil {
			scope = q
		} else {
			scope = &qualN{scope: scope, name: q}
		}
	}
	if p.in.err == nil && scope != nil && p.in.consume('E') {
		save := p.in.pos
		if b := p.baseUnresolvedName(); b != nil && p.in.err == nil {
			p.in.pos = save // the caller reads the base name
			return scope
		}
	}
	if p.retries >= maxRetries {
		return p.in.fail("too many ambiguous dependent names")
	}
	p.retries++
	p.in.pos, p.subs, p.lastName, p.in.err = pos, p.subs[:nsubs], last, nil
	return p.typ()
}

// simpleID parses <source-name> [<template-args>].
func (p *parser) simpleID() node {
	n := p.sourceName()
	if n == nil {
		return nil
	}
	if p.in.peek() == 'I' {
		args := p.templateArgs()
		if args == nil {
			return nil
		}
		return &tmplN{name: n, args: args}
	}
	return n
}

// baseUnresolvedName parses <simple-id>, on <operator-name> or dn <type>.
func (p *parser) baseUnresolvedName() node {
	switch {
	case p.in.peek() == 'o' && p.in.peekAt(1) == 'n':
		p.in.pos += 2
		var info nameInfo
		n := p.operatorName(&info)
		if n != nil && p.in.peek() == 'I' {
			args := p.templateArgs()
			if args == nil {
				return nil
			}
			return &tmplN{name: n, args: args}
		}
		return n
	case p.in.peek() == 'd' && p.in.peekAt(1) == 'n':
		p.in.pos += 2
		var t node
		if isDigit(p.in.peek()) {
			t = p.simpleID()
		} else {
			t = p.typ()
		}
		if t == nil {
			return nil
		}
		return &exprN{kind: exPrefix, op: "~", args: []node{t}}
	}
	return p.simpleID()
}

// exprPrimary parses L <type> <value> E, L <mangled-name> E and L_Z ... E.
func (p *parser) exprPrimary() node {
	p.in.pos++ // L
	if p.in.peek() == '_' && p.in.peekAt(1) == 'Z' || p.in.peek() == 'Z' {
		if p.in.peek() == '_' {
			p.in.pos++
		}
		p.in.pos++
		e := p.encoding()
		if e == nil || !p.in.expect('E', "end of external name literal") {
			return nil
		}
		return e
	}
	t := p.typ()
	if t == nil {
		return nil
	}
	l := &litN{typ: t}
	l.neg = p.in.consume('n')
	start := p.in.pos
	for p.in.pos < len(p.in.s) && p.in.s[p.in.pos] != 'E' {
		p.in.pos++
	}
	l.val = p.in.s[start:p.in.pos]
	if !p.in.expect('E', "end of literal") {
		return nil
	}
	if l.val == "" {
		if b, ok := t.(*builtinN); ok && b.code == "Dn" {
			return &nameN{"nullptr"}
		}
		return p.in.fail("literal without a value")
	}
	if strings.ContainsAny(l.val, "()") {
		return p.in.fail("bad literal value %q", l.val)
	}
	return l
}
