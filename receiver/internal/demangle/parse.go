package demangle

import (
	"fmt"
	"strconv"
)

// parser is a recursive-descent parser for the Itanium C++ ABI grammar
// (https://itanium-cxx-abi.github.io/cxx-abi/abi.html#mangling).
type parser struct {
	s     string
	pos   int
	subs  []node // substitution candidates, S_ = subs[0]
	depth int
	nodes int
	err   *Error

	convType int  // >0 while parsing the type of a conversion operator
	lastName node // last source name outside template arguments (ctor names)
	retries  int  // re-parses of ambiguous "sr" scopes, at most maxRetries
}

// nameInfo reports facts about a parsed name that decide how the function
// type after it is read.
type nameInfo struct {
	template bool   // the name ends in template arguments
	ctorConv bool   // its last component is a ctor, dtor or conversion
	cv       string // member function qualifiers from N [K][V][r]
	ref      string // member function ref-qualifier
}

func (p *parser) fail(format string, args ...any) node {
	if p.err == nil {
		p.err = &Error{Offset: p.pos, Reason: fmt.Sprintf(format, args...)}
	}
	return nil
}

func (p *parser) peek() byte {
	if p.pos < len(p.s) {
		return p.s[p.pos]
	}
	return 0
}

func (p *parser) peekAt(i int) byte {
	if p.pos+i < len(p.s) {
		return p.s[p.pos+i]
	}
	return 0
}

func (p *parser) consume(c byte) bool {
	if p.peek() == c {
		p.pos++
		return true
	}
	return false
}

func (p *parser) expect(c byte, what string) bool {
	if p.consume(c) {
		return true
	}
	if p.pos >= len(p.s) {
		p.fail("name ends where %q (%s) was expected", c, what)
	} else {
		p.fail("expected %q (%s), found %q", c, what, p.s[p.pos])
	}
	return false
}

// enter guards recursion depth and the number of nodes built.
func (p *parser) enter() bool {
	p.depth++
	p.nodes++
	if p.depth > maxDepth {
		p.fail("nesting deeper than %d", maxDepth)
		return false
	}
	if p.nodes > maxNodes {
		p.fail("more than %d components", maxNodes)
		return false
	}
	return p.err == nil
}

func (p *parser) leave() { p.depth-- }

func (p *parser) addSub(n node) {
	if n != nil {
		p.subs = append(p.subs, n)
	}
}

// number reads [n] <decimal>, returning the value and whether it was negative.
func (p *parser) number() (int, bool) {
	neg := p.consume('n')
	start := p.pos
	for isDigit(p.peek()) {
		p.pos++
	}
	if start == p.pos {
		p.fail("expected a number")
		return 0, false
	}
	v, err := strconv.Atoi(p.s[start:p.pos])
	if err != nil || v > maxInput {
		p.pos = start
		p.fail("number %q out of range", p.s[start:p.pos])
		return 0, false
	}
	return v, neg
}

// seqID reads a base-36 <seq-id> up to '_' and returns it plus one; a bare
// '_' gives 0.
func (p *parser) seqID() int {
	if p.consume('_') {
		return 0
	}
	v := 0
	for {
		c := p.peek()
		switch {
		case isDigit(c):
			v = v*36 + int(c-'0')
		case isUpper(c):
			v = v*36 + int(c-'A') + 10
		case c == '_':
			p.pos++
			return v + 1
		default:
			p.fail("bad character in sequence id")
			return -1
		}
		if v > maxNodes {
			p.fail("sequence id out of range")
			return -1
		}
		p.pos++
	}
}

// encoding parses <encoding>: a function (name + types), data (name) or a
// special name.
func (p *parser) encoding() node {
	if !p.enter() {
		return nil
	}
	defer p.leave()
	c := p.peek()
	if c == 'T' || (c == 'G' && (p.peekAt(1) == 'V' || p.peekAt(1) == 'R' || p.peekAt(1) == 'T' || p.peekAt(1) == 'A')) {
		return p.specialName()
	}
	var info nameInfo
	name := p.name(&info)
	if name == nil {
		return nil
	}
	c = p.peek()
	if c == 0 || c == 'E' || c == '.' {
		if info.cv+info.ref != "" {
			return &qualTypeN{child: name, q: info.cv + info.ref}
		}
		return name
	}
	e := &encN{name: name, cv: info.cv, ref: info.ref}
	if info.template && !info.ctorConv {
		if e.ret = p.typ(); e.ret == nil {
			return nil
		}
	}
	params, ok := p.paramTypes()
	if !ok {
		return nil
	}
	e.params = params
	return e
}

// paramTypes parses a <bare-function-type> up to the end of the encoding;
// a lone "v" is an empty list.
func (p *parser) paramTypes() ([]node, bool) {
	var params []node
	for {
		c := p.peek()
		if c == 0 || c == 'E' || c == '.' || (c == 'R' || c == 'O') && p.peekAt(1) == 'E' {
			break
		}
		t := p.typ()
		if t == nil {
			return nil, false
		}
		params = append(params, t)
	}
	if len(params) == 0 {
		p.fail("function has no parameter types")
		return nil, false
	}
	return dropVoid(params), true
}

// dropVoid turns the parameter list (void) into ().
func dropVoid(params []node) []node {
	if len(params) == 1 {
		if b, ok := params[0].(*builtinN); ok && b.code == "v" {
			return nil
		}
	}
	return params
}

// specialName parses virtual tables, typeinfo, guard variables and thunks.
func (p *parser) specialName() node {
	two := p.s[p.pos:min(len(p.s), p.pos+2)]
	p.pos += len(two)
	typeOf := func(prefix string) node {
		t := p.typ()
		if t == nil {
			return nil
		}
		return &specialN{prefix: prefix, child: t}
	}
	switch two {
	case "TV":
		return typeOf("vtable for ")
	case "TT":
		return typeOf("VTT for ")
	case "TI":
		return typeOf("typeinfo for ")
	case "TS":
		return typeOf("typeinfo name for ")
	case "Th", "Tv":
		if !p.callOffset(two[1]) {
			return nil
		}
		e := p.encoding()
		if e == nil {
			return nil
		}
		if two == "Th" {
			return &specialN{prefix: "non-virtual thunk to ", child: e}
		}
		return &specialN{prefix: "virtual thunk to ", child: e}
	case "Tc":
		if !p.callOffset(p.consumeAny()) || !p.callOffset(p.consumeAny()) {
			return nil
		}
		e := p.encoding()
		if e == nil {
			return nil
		}
		return &specialN{prefix: "covariant return thunk to ", child: e}
	case "TC":
		derived := p.typ()
		if derived == nil {
			return nil
		}
		p.number()
		if !p.expect('_', "construction vtable") {
			return nil
		}
		base := p.typ()
		if base == nil {
			return nil
		}
		return &specialN{prefix: "construction vtable for ", child: base, suffix: "-in-", tail: derived}
	case "TH", "TW":
		var info nameInfo
		n := p.name(&info)
		if n == nil {
			return nil
		}
		if two == "TH" {
			return &specialN{prefix: "TLS init function for ", child: n}
		}
		return &specialN{prefix: "TLS wrapper function for ", child: n}
	case "GV":
		var info nameInfo
		n := p.name(&info)
		if n == nil {
			return nil
		}
		return &specialN{prefix: "guard variable for ", child: n}
	case "GR":
		var info nameInfo
		n := p.name(&info)
		if n == nil {
			return nil
		}
		id := 0
		if p.peek() != '_' {
			id = p.seqID()
		} else {
			p.pos++
		}
		return &specialN{prefix: fmt.Sprintf("reference temporary #%d for ", id), child: n}
	case "GA":
		e := p.encoding()
		if e == nil {
			return nil
		}
		return &specialN{prefix: "hidden alias for ", child: e}
	case "GT":
		k := p.consumeAny()
		e := p.encoding()
		if e == nil {
			return nil
		}
		if k == 'n' {
			return &specialN{prefix: "non-transaction clone for ", child: e}
		}
		return &specialN{prefix: "transaction clone for ", child: e}
	}
	p.pos -= len(two)
	return p.fail("unknown special name %q", two)
}

func (p *parser) consumeAny() byte {
	c := p.peek()
	if c != 0 {
		p.pos++
	}
	return c
}

// callOffset parses h <number> _ or v <number> _ <number> _ (after the
// kind letter, which the caller consumed).
func (p *parser) callOffset(kind byte) bool {
	switch kind {
	case 'h':
		p.number()
		return p.expect('_', "call offset")
	case 'v':
		p.number()
		if !p.expect('_', "call offset") {
			return false
		}
		p.number()
		return p.expect('_', "call offset")
	}
	p.fail("bad call offset kind %q", kind)
	return false
}
