package demangle

import "strings"

// name parses <name>, reporting in info what decides how a function type
// after it is read.
func (p *parser) name(info *nameInfo) node {
	if !p.in.enter() {
		return nil
	}
	defer p.in.leave()
	switch c := p.in.peek(); {
	case c == 'N':
		return p.nestedName(info)
	case c == 'Z':
		return p.localName(info)
	case c == 'S' && p.in.peekAt(1) == 't':
		p.in.pos += 2
		u := p.unqualifiedName(nil, info)
		if u == nil {
			return nil
		}
		return p.maybeTemplate(&qualN{scope: &nameN{"std"}, name: u}, info)
	case c == 'S':
		s := p.substitution(false)
		if s == nil {
			return nil
		}
		if p.in.peek() != 'I' {
			return p.in.fail("substitution used as a name without template arguments")
		}
		info.ctorConv = false
		return p.templateOn(s, info)
	default:
		u := p.unqualifiedName(nil, info)
		if u == nil {
			return nil
		}
		return p.maybeTemplate(u, info)
	}
}

// maybeTemplate applies template arguments to an unscoped name, which
// makes the name a substitution candidate.
func (p *parser) maybeTemplate(n node, info *nameInfo) node {
	if p.in.peek() != 'I' {
		info.template = false
		return n
	}
	p.addSub(n)
	return p.templateOn(n, info)
}

func (p *parser) templateOn(n node, info *nameInfo) node {
	args := p.templateArgs()
	if args == nil {
		return nil
	}
	info.template = true
	return &tmplN{name: n, args: args}
}

// nestedName parses N [<CV-qualifiers>] [<ref-qualifier>] <prefix> E.
func (p *parser) nestedName(info *nameInfo) node {
	p.in.pos++ // N
	info.cv = p.in.cvQualifiers()
	if p.in.consume('R') {
		info.ref = " &"
	} else if p.in.consume('O') {
		info.ref = " &&"
	}
	p.in.consume('H') // C++23 explicit object parameter
	var cur node
	for {
		c := p.in.peek()
		if c == 'E' {
			p.in.pos++
			break
		}
		if c == 0 {
			return p.in.fail("nested name not closed by 'E'")
		}
		isSub := false
		switch {
		case c == 'S' && p.in.peekAt(1) == 't':
			if cur != nil {
				return p.in.fail("'St' inside a nested name")
			}
			p.in.pos += 2
			cur = &nameN{"std"}
			isSub = true
		case c == 'S':
			if cur != nil {
				return p.in.fail("substitution inside a nested name")
			}
			cur = p.substitution(true)
			isSub = true
			info.template, info.ctorConv = false, false
		case c == 'I':
			if cur == nil {
				return p.in.fail("template arguments without a name")
			}
			args := p.templateArgs()
			if args == nil {
				return nil
			}
			cur = &tmplN{name: cur, args: args}
			info.template = true
		case c == 'T':
			if cur != nil {
				return p.in.fail("template parameter inside a nested name")
			}
			cur = p.templateParam()
			info.template, info.ctorConv = false, false
		case c == 'D' && (p.in.peekAt(1) == 't' || p.in.peekAt(1) == 'T'):
			if cur != nil {
				return p.in.fail("decltype inside a nested name")
			}
			cur = p.decltype()
			info.template, info.ctorConv = false, false
		case c == 'M':
			// <closure-prefix> data member initializer: nothing to print.
			p.in.pos++
			continue
		default:
			u := p.unqualifiedName(cur, info)
			if u == nil {
				return nil
			}
			if cur == nil {
				cur = u
			} else {
				cur = &qualN{scope: cur, name: u}
			}
			info.template = false
		}
		if cur == nil || p.in.err != nil {
			return nil
		}
		if !isSub && p.in.peek() != 'E' {
			p.addSub(cur)
		}
	}
	if cur == nil {
		return p.in.fail("empty nested name")
	}
	return cur
}

// localName parses Z <encoding> E <entity> [<discriminator>].
func (p *parser) localName(info *nameInfo) node {
	p.in.pos++ // Z
	e := p.encoding()
	if e == nil || !p.in.expect('E', "end of local name's function") {
		return nil
	}
	if f, ok := e.(*encN); ok {
		f.ret = nil // c++filt leaves out the return type of the enclosing function
	}
	switch p.in.peek() {
	case 's':
		p.in.pos++
		if !p.in.discriminator() {
			return nil
		}
		*info = nameInfo{}
		return &localN{enc: e, entity: &nameN{"string literal"}}
	case 'd':
		p.in.pos++
		num := 0
		if p.in.peek() != '_' {
			n, _ := p.in.number()
			num = n + 1
		}
		if !p.in.expect('_', "default argument number") {
			return nil
		}
		entity := p.name(info)
		if entity == nil {
			return nil
		}
		return &localN{enc: e, entity: &qualN{scope: &defaultArgN{num: num + 1}, name: entity}}
	}
	entity := p.name(info)
	if entity == nil || !p.in.discriminator() {
		return nil
	}
	return &localN{enc: e, entity: entity}
}

// discriminator skips an optional _ <digit> or __ <number> _.
func (in *cursor) discriminator() bool {
	if in.peek() != '_' {
		return true
	}
	in.pos++
	if in.consume('_') {
		in.number()
		return in.expect('_', "discriminator")
	}
	// c++filt takes any run of digits here, including none.
	for isDigit(in.peek()) {
		in.pos++
	}
	return true
}

// unqualifiedName parses operator, ctor/dtor, source and unnamed names plus
// ABI tags. prev is the enclosing scope (for constructor names).
func (p *parser) unqualifiedName(prev node, info *nameInfo) node {
	if !p.in.enter() {
		return nil
	}
	defer p.in.leave()
	var n node
	info.ctorConv = false
	c := p.in.peek()
	switch {
	case isDigit(c):
		n = p.sourceName()
	case isLower(c):
		n = p.operatorName(info)
	case c == 'C' || (c == 'D' && p.in.peekAt(1) != 'C'):
		n = p.ctorDtorName(prev)
		info.ctorConv = true
	case c == 'U':
		n = p.unnamedTypeName()
	case c == 'L':
		p.in.pos++
		n = p.sourceName()
		if n != nil && !p.in.discriminator() {
			return nil
		}
	case c == 'D':
		p.in.pos += 2 // DC
		b := &bindingN{}
		for p.in.peek() != 'E' {
			s := p.sourceName()
			if s == nil {
				return nil
			}
			b.names = append(b.names, s)
		}
		p.in.pos++
		n = b
	case c == 0:
		return p.in.fail("name ends where a name was expected")
	default:
		return p.in.fail("unexpected %q where a name was expected", c)
	}
	for n != nil && p.in.peek() == 'B' {
		p.in.pos++
		t := p.sourceName()
		if t == nil {
			return nil
		}
		n = &abiN{name: n, tag: t.(*nameN).s}
	}
	return n
}

// sourceName parses <number> <identifier>.
func (p *parser) sourceName() node {
	if !isDigit(p.in.peek()) {
		return p.in.fail("expected a length-prefixed identifier")
	}
	n, _ := p.in.number()
	if p.in.err != nil {
		return nil
	}
	if n == 0 || p.in.pos+n > len(p.in.s) {
		return p.in.fail("identifier length %d runs past the end of the name", n)
	}
	id := p.in.s[p.in.pos : p.in.pos+n]
	p.in.pos += n
	name := &nameN{id}
	if len(id) >= 10 && strings.HasPrefix(id, "_GLOBAL_") && strings.IndexByte("._$", id[8]) >= 0 && id[9] == 'N' {
		name.s = "(anonymous namespace)"
	}
	p.lastName = name
	return name
}

// ctorDtorName parses C1..C5, CI1/CI2 <type>, D0..D5.
func (p *parser) ctorDtorName(prev node) node {
	if prev == nil || p.lastName == nil {
		return p.in.fail("constructor or destructor outside a class")
	}
	c := p.in.s[p.in.pos]
	p.in.pos++
	if c == 'C' {
		inherit := p.in.consume('I')
		if d := p.in.peek(); d < '1' || d > '5' {
			return p.in.fail("bad constructor kind %q", d)
		}
		p.in.pos++
		if inherit && p.typ() == nil {
			return nil
		}
		return &ctorN{base: p.lastName}
	}
	if d := p.in.peek(); d < '0' || d > '5' || d == '3' {
		return p.in.fail("bad destructor kind %q", d)
	}
	p.in.pos++
	return &ctorN{base: p.lastName, dtor: true}
}

// unnamedTypeName parses Ut [<number>] _ and Ul <lambda-sig> E [<number>] _.
func (p *parser) unnamedTypeName() node {
	p.in.pos++ // U
	switch p.in.consumeAny() {
	case 't':
		num := 1
		if p.in.peek() != '_' {
			n, _ := p.in.number()
			num = n + 2
		}
		if !p.in.expect('_', "unnamed type") {
			return nil
		}
		return &unnamedN{num: num}
	case 'l':
		l := &lambdaN{}
		for p.in.peek() == 'T' && strings.IndexByte("ynt", p.in.peekAt(1)) >= 0 {
			p.in.pos += 2 // template parameter declarations of a generic lambda
		}
		if p.in.peek() == 'v' {
			p.in.pos++
		} else {
			for p.in.peek() != 'E' {
				t := p.typ()
				if t == nil {
					return nil
				}
				l.params = append(l.params, t)
			}
		}
		if !p.in.expect('E', "end of lambda signature") {
			return nil
		}
		l.num = 1
		if p.in.peek() != '_' {
			n, _ := p.in.number()
			l.num = n + 2
		}
		if !p.in.expect('_', "lambda number") {
			return nil
		}
		return l
	}
	p.in.pos--
	return p.in.fail("unknown unnamed type kind")
}

// substitution parses S_, S <seq-id> _ and the std:: abbreviations.
// prefix is true inside a nested name.
func (p *parser) substitution(prefix bool) node {
	start := p.in.pos
	p.in.pos++ // S
	c := p.in.peek()
	if isLower(c) {
		p.in.pos++
		base := stdAbbrev[c]
		if base != "" {
			p.lastName = &nameN{base}
		}
		switch c {
		case 'a', 'b':
			return &qualN{&nameN{"std"}, p.lastName}
		case 's':
			return stdTemplate(base, "char", true)
		case 'i', 'o', 'd':
			return stdTemplate(base, "char", false)
		}
		p.in.pos--
		return p.in.fail("unknown std:: abbreviation S%c", c)
	}
	id := p.in.seqID()
	if p.in.err != nil {
		return nil
	}
	if id >= len(p.subs) {
		text := p.in.s[start:p.in.pos]
		p.in.pos = start
		return p.in.fail("substitution %s refers past the %d candidates", text, len(p.subs))
	}
	return p.subs[id]
}

// stdAbbrev maps the letter after S to the std:: class it abbreviates.
var stdAbbrev = [256]string{'a': "allocator", 'b': "basic_string", 's': "basic_string",
	'i': "basic_istream", 'o': "basic_ostream", 'd': "basic_iostream"}

// stdTemplate builds std::name<char, std::char_traits<char>[, std::allocator<char>]>.
func stdTemplate(name, ch string, alloc bool) node {
	std := &nameN{"std"}
	c := &builtinN{s: ch, code: "c"}
	args := []node{c, &qualN{std, &tmplN{&nameN{"char_traits"}, []node{c}}}}
	if alloc {
		args = append(args, &qualN{std, &tmplN{&nameN{"allocator"}, []node{c}}})
	}
	return &qualN{std, &tmplN{&nameN{name}, args}}
}

// templateParam parses T_ / T <n> _ and returns the argument it names.
func (p *parser) templateParam() node {
	off := p.in.pos
	p.in.pos++             // T
	if p.in.consume('L') { // TL <level> __ <index>: lambda template parameters
		p.in.number()
		if !p.in.expect('_', "template parameter level") {
			return nil
		}
	}
	idx := 0
	if !p.in.consume('_') {
		n, _ := p.in.number()
		if p.in.err != nil || !p.in.expect('_', "template parameter") {
			return nil
		}
		idx = n + 1
	}
	return &tparamN{idx: idx, off: off}
}

// templateArgs parses I <template-arg>+ E.
func (p *parser) templateArgs() []node {
	if !p.in.enter() {
		return nil
	}
	defer p.in.leave()
	p.in.pos++ // I
	saved := p.lastName
	defer func() { p.lastName = saved }()
	args, _ := p.listToE(p.templateArg) // nil when one fails
	return args
}

// listToE parses items with item up to an 'E', which it consumes. The list
// is empty but not nil when there are none; ok is false when an item fails.
func (p *parser) listToE(item func() node) (list []node, ok bool) {
	list = []node{}
	for p.in.peek() != 'E' {
		n := item()
		if n == nil {
			return nil, false
		}
		list = append(list, n)
	}
	p.in.pos++
	return list, true
}

func (p *parser) templateArg() node {
	switch p.in.peek() {
	case 'X':
		p.in.pos++
		e := p.expression()
		if e == nil || !p.in.expect('E', "end of template argument expression") {
			return nil
		}
		return e
	case 'L':
		return p.exprPrimary()
	case 'J', 'I': // old GCC manglings wrote argument packs as I...E
		p.in.pos++
		elems, ok := p.listToE(p.templateArg)
		if !ok {
			return nil
		}
		return &packN{elems: elems}
	case 0:
		return p.in.fail("name ends inside template arguments")
	}
	return p.typ()
}
