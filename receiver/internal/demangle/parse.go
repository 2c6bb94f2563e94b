package demangle

import (
	"fmt"
	"strconv"
)

// parser is a recursive-descent parser for the Itanium C++ ABI grammar
// (https://itanium-cxx-abi.github.io/cxx-abi/abi.html#mangling).
type parser struct {
	in   cursor
	subs []node // substitution candidates, S_ = subs[0]

	convType int  // >0 while parsing the type of a conversion operator
	lastName node // last source name outside template arguments (ctor names)
	retries  int  // re-parses of ambiguous "sr" scopes, at most maxRetries
}

// cursor is the position in the mangled name, the limits on the work
// spent on it, and the first error: the lexical layer the parser's
// productions read through.
type cursor struct {
	s     string
	pos   int
	depth int
	nodes int
	err   *Error
}

// nameInfo reports facts about a parsed name that decide how the function
// type after it is read.
type nameInfo struct {
	template bool   // the name ends in template arguments
	ctorConv bool   // its last component is a ctor, dtor or conversion
	cv       string // member function qualifiers from N [K][V][r]
	ref      string // member function ref-qualifier
}

func (in *cursor) fail(format string, args ...any) node {
	if in.err == nil {
		in.err = &Error{Offset: in.pos, Reason: fmt.Sprintf(format, args...)}
	}
	return nil
}

func (in *cursor) peek() byte {
	if in.pos < len(in.s) {
		return in.s[in.pos]
	}
	return 0
}

func (in *cursor) peekAt(i int) byte {
	if in.pos+i < len(in.s) {
		return in.s[in.pos+i]
	}
	return 0
}

func (in *cursor) consume(c byte) bool {
	if in.peek() == c {
		in.pos++
		return true
	}
	return false
}

func (in *cursor) expect(c byte, what string) bool {
	if in.consume(c) {
		return true
	}
	if in.pos >= len(in.s) {
		in.fail("name ends where %q (%s) was expected", c, what)
	} else {
		in.fail("expected %q (%s), found %q", c, what, in.s[in.pos])
	}
	return false
}

// enter guards recursion depth and the number of nodes built.
func (in *cursor) enter() bool {
	in.depth++
	in.nodes++
	if in.depth > maxDepth {
		in.fail("nesting deeper than %d", maxDepth)
		return false
	}
	if in.nodes > maxNodes {
		in.fail("more than %d components", maxNodes)
		return false
	}
	return in.err == nil
}

func (in *cursor) leave() { in.depth-- }

func (p *parser) addSub(n node) {
	if n != nil {
		p.subs = append(p.subs, n)
	}
}

// number reads [n] <decimal>, returning the value and whether it was negative.
func (in *cursor) number() (int, bool) {
	neg := in.consume('n')
	start := in.pos
	for isDigit(in.peek()) {
		in.pos++
	}
	if start == in.pos {
		in.fail("expected a number")
		return 0, false
	}
	v, err := strconv.Atoi(in.s[start:in.pos])
	if err != nil || v > maxInput {
		in.pos = start
		in.fail("number %q out of range", in.s[start:in.pos])
		return 0, false
	}
	return v, neg
}

// seqID reads a base-36 <seq-id> up to '_' and returns it plus one; a bare
// '_' gives 0.
func (in *cursor) seqID() int {
	if in.consume('_') {
		return 0
	}
	v := 0
	for {
		c := in.peek()
		switch {
		case isDigit(c):
			v = v*36 + int(c-'0')
		case isUpper(c):
			v = v*36 + int(c-'A') + 10
		case c == '_':
			in.pos++
			return v + 1
		default:
			in.fail("bad character in sequence id")
			return -1
		}
		if v > maxNodes {
			in.fail("sequence id out of range")
			return -1
		}
		in.pos++
	}
}

// encoding parses <encoding>: a function (name + types), data (name) or a
// special name.
func (p *parser) encoding() node {
	if !p.in.enter() {
		return nil
	}
	defer p.in.leave()
	c := p.in.peek()
	if c == 'T' || (c == 'G' && (p.in.peekAt(1) == 'V' || p.in.peekAt(1) == 'R' || p.in.peekAt(1) == 'T' || p.in.peekAt(1) == 'A')) {
		return p.specialName()
	}
	var info nameInfo
	name := p.name(&info)
	if name == nil {
		return nil
	}
	c = p.in.peek()
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
		c := p.in.peek()
		if c == 0 || c == 'E' || c == '.' || (c == 'R' || c == 'O') && p.in.peekAt(1) == 'E' {
			break
		}
		t := p.typ()
		if t == nil {
			return nil, false
		}
		params = append(params, t)
	}
	if len(params) == 0 {
		p.in.fail("function has no parameter types")
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
	two := p.in.s[p.in.pos:min(len(p.in.s), p.in.pos+2)]
	p.in.pos += len(two)
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
		if !p.in.callOffset(two[1]) {
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
		if !p.in.callOffset(p.in.consumeAny()) || !p.in.callOffset(p.in.consumeAny()) {
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
		p.in.number()
		if !p.in.expect('_', "construction vtable") {
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
		if p.in.peek() != '_' {
			id = p.in.seqID()
		} else {
			p.in.pos++
		}
		return &specialN{prefix: fmt.Sprintf("reference temporary #%d for ", id), child: n}
	case "GA":
		e := p.encoding()
		if e == nil {
			return nil
		}
		return &specialN{prefix: "hidden alias for ", child: e}
	case "GT":
		k := p.in.consumeAny()
		e := p.encoding()
		if e == nil {
			return nil
		}
		if k == 'n' {
			return &specialN{prefix: "non-transaction clone for ", child: e}
		}
		return &specialN{prefix: "transaction clone for ", child: e}
	}
	p.in.pos -= len(two)
	return p.in.fail("unknown special name %q", two)
}

func (in *cursor) consumeAny() byte {
	c := in.peek()
	if c != 0 {
		in.pos++
	}
	return c
}

// callOffset parses h <number> _ or v <number> _ <number> _ (after the
// kind letter, which the caller consumed).
func (in *cursor) callOffset(kind byte) bool {
	switch kind {
	case 'h':
		in.number()
		return in.expect('_', "call offset")
	case 'v':
		in.number()
		if !in.expect('_', "call offset") {
			return false
		}
		in.number()
		return in.expect('_', "call offset")
	}
	in.fail("bad call offset kind %q", kind)
	return false
}
