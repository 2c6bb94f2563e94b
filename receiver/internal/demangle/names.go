package demangle

import "strings"

// name parses <name>, reporting in info what decides how a function type
// after it is read.
func (p *parser) name(info *nameInfo) node {
	if !p.enter() {
		return nil
	}
	defer p.leave()
	switch c := p.peek(); {
	case c == 'N':
		return p.nestedName(info)
	case c == 'Z':
		return p.localName(info)
	case c == 'S' && p.peekAt(1) == 't':
		p.pos += 2
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
		if p.peek() != 'I' {
			return p.fail("substitution used as a name without template arguments")
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
	if p.peek() != 'I' {
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
	p.pos++ // N
	info.cv = p.cvQualifiers()
	if p.consume('R') {
		info.ref = " &"
	} else if p.consume('O') {
		info.ref = " &&"
	}
	p.consume('H') // C++23 explicit object parameter
	var cur node
	for {
		c := p.peek()
		if c == 'E' {
			p.pos++
			break
		}
		if c == 0 {
			return p.fail("nested name not closed by 'E'")
		}
		isSub := false
		switch {
		case c == 'S' && p.peekAt(1) == 't':
			if cur != nil {
				return p.fail("'St' inside a nested name")
			}
			p.pos += 2
			cur = &nameN{"std"}
			isSub = true
		case c == 'S':
			if cur != nil {
				return p.fail("substitution inside a nested name")
			}
			cur = p.substitution(true)
			isSub = true
			info.template, info.ctorConv = false, false
		case c == 'I':
			if cur == nil {
				return p.fail("template arguments without a name")
			}
			args := p.templateArgs()
			if args == nil {
				return nil
			}
			cur = &tmplN{name: cur, args: args}
			info.template = true
		case c == 'T':
			if cur != nil {
				return p.fail("template parameter inside a nested name")
			}
			cur = p.templateParam()
			info.template, info.ctorConv = false, false
		case c == 'D' && (p.peekAt(1) == 't' || p.peekAt(1) == 'T'):
			if cur != nil {
				return p.fail("decltype inside a nested name")
			}
			cur = p.decltype()
			info.template, info.ctorConv = false, false
		case c == 'M':
			// <closure-prefix> data member initializer: nothing to print.
			p.pos++
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
		if cur == nil || p.err != nil {
			return nil
		}
		if !isSub && p.peek() != 'E' {
			p.addSub(cur)
		}
	}
	if cur == nil {
		return p.fail("empty nested name")
	}
	return cur
}

// localName parses Z <encoding> E <entity> [<discriminator>].
func (p *parser) localName(info *nameInfo) node {
	p.pos++ // Z
	e := p.encoding()
	if e == nil || !p.expect('E', "end of local name's function") {
		return nil
	}
	if f, ok := e.(*encN); ok {
		f.ret = nil // c++filt leaves out the return type of the enclosing function
	}
	switch p.peek() {
	case 's':
		p.pos++
		if !p.discriminator() {
			return nil
		}
		*info = nameInfo{}
		return &localN{enc: e, entity: &nameN{"string literal"}}
	case 'd':
		p.pos++
		num := 0
		if p.peek() != '_' {
			n, _ := p.number()
			num = n + 1
		}
		if !p.expect('_', "default argument number") {
			return nil
		}
		entity := p.name(info)
		if entity == nil {
			return nil
		}
		return &localN{enc: e, entity: &qualN{scope: &defaultArgN{num: num + 1}, name: entity}}
	}
	entity := p.name(info)
	if entity == nil || !p.discriminator() {
		return nil
	}
	return &localN{enc: e, entity: entity}
}

// discriminator skips an optional _ <digit> or __ <number> _.
func (p *parser) discriminator() bool {
	if p.peek() != '_' {
		return true
	}
	p.pos++
	if p.consume('_') {
		p.number()
		return p.expect('_', "discriminator")
	}
	// c++filt takes any run of digits here, including none.
	for isDigit(p.peek()) {
		p.pos++
	}
	return true
}

// unqualifiedName parses operator, ctor/dtor, source and unnamed names plus
// ABI tags. prev is the enclosing scope (for constructor names).
func (p *parser) unqualifiedName(prev node, info *nameInfo) node {
	if !p.enter() {
		return nil
	}
	defer p.leave()
	var n node
	info.ctorConv = false
	c := p.peek()
	switch {
	case isDigit(c):
		n = p.sourceName()
	case isLower(c):
		n = p.operatorName(info)
	case c == 'C' || (c == 'D' && p.peekAt(1) != 'C'):
		n = p.ctorDtorName(prev)
		info.ctorConv = true
	case c == 'U':
		n = p.unnamedTypeName()
	case c == 'L':
		p.pos++
		n = p.sourceName()
		if n != nil && !p.discriminator() {
			return nil
		}
	case c == 'D':
		p.pos += 2 // DC
		b := &bindingN{}
		for p.peek() != 'E' {
			s := p.sourceName()
			if s == nil {
				return nil
			}
			b.names = append(b.names, s)
		}
		p.pos++
		n = b
	case c == 0:
		return p.fail("name ends where a name was expected")
	default:
		return p.fail("unexpected %q where a name was expected", c)
	}
	for n != nil && p.peek() == 'B' {
		p.pos++
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
	if !isDigit(p.peek()) {
		return p.fail("expected a length-prefixed identifier")
	}
	n, _ := p.number()
	if p.err != nil {
		return nil
	}
	if n == 0 || p.pos+n > len(p.s) {
		return p.fail("identifier length %d runs past the end of the name", n)
	}
	id := p.s[p.pos : p.pos+n]
	p.pos += n
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
		return p.fail("constructor or destructor outside a class")
	}
	c := p.s[p.pos]
	p.pos++
	if c == 'C' {
		inherit := p.consume('I')
		if d := p.peek(); d < '1' || d > '5' {
			return p.fail("bad constructor kind %q", d)
		}
		p.pos++
		if inherit && p.typ() == nil {
			return nil
		}
		return &ctorN{base: p.lastName}
	}
	if d := p.peek(); d < '0' || d > '5' || d == '3' {
		return p.fail("bad destructor kind %q", d)
	}
	p.pos++
	return &ctorN{base: p.lastName, dtor: true}
}

// unnamedTypeName parses Ut [<number>] _ and Ul <lambda-sig> E [<number>] _.
func (p *parser) unnamedTypeName() node {
	p.pos++ // U
	switch p.consumeAny() {
	case 't':
		num := 1
		if p.peek() != '_' {
			n, _ := p.number()
			num = n + 2
		}
		if !p.expect('_', "unnamed type") {
			return nil
		}
		return &unnamedN{num: num}
	case 'l':
		l := &lambdaN{}
		for p.peek() == 'T' && strings.IndexByte("ynt", p.peekAt(1)) >= 0 {
			p.pos += 2 // template parameter declarations of a generic lambda
		}
		if p.peek() == 'v' {
			p.pos++
		} else {
			for p.peek() != 'E' {
				t := p.typ()
				if t == nil {
					return nil
				}
				l.params = append(l.params, t)
			}
		}
		if !p.expect('E', "end of lambda signature") {
			return nil
		}
		l.num = 1
		if p.peek() != '_' {
			n, _ := p.number()
			l.num = n + 2
		}
		if !p.expect('_', "lambda number") {
			return nil
		}
		return l
	}
	p.pos--
	return p.fail("unknown unnamed type kind")
}

// substitution parses S_, S <seq-id> _ and the std:: abbreviations.
// prefix is true inside a nested name.
func (p *parser) substitution(prefix bool) node {
	start := p.pos
	p.pos++ // S
	c := p.peek()
	if isLower(c) {
		p.pos++
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
		p.pos--
		return p.fail("unknown std:: abbreviation S%c", c)
	}
	id := p.seqID()
	if p.err != nil {
		return nil
	}
	if id >= len(p.subs) {
		text := p.s[start:p.pos]
		p.pos = start
		return p.fail("substitution %s refers past the %d candidates", text, len(p.subs))
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
	off := p.pos
	p.pos++             // T
	if p.consume('L') { // TL <level> __ <index>: lambda template parameters
		p.number()
		if !p.expect('_', "template parameter level") {
			return nil
		}
	}
	idx := 0
	if !p.consume('_') {
		n, _ := p.number()
		if p.err != nil || !p.expect('_', "template parameter") {
			return nil
		}
		idx = n + 1
	}
	return &tparamN{idx: idx, off: off}
}

// templateArgs parses I <template-arg>+ E.
func (p *parser) templateArgs() []node {
	if !p.enter() {
		return nil
	}
	defer p.leave()
	p.pos++ // I
	saved := p.lastName
	defer func() { p.lastName = saved }()
	args, _ := p.listToE(p.templateArg) // nil when one fails
	return args
}

// listToE parses items with item up to an 'E', which it consumes. The list
// is empty but not nil when there are none; ok is false when an item fails.
func (p *parser) listToE(item func() node) (list []node, ok bool) {
	list = []node{}
	for p.peek() != 'E' {
		n := item()
		if n == nil {
			return nil, false
		}
		list = append(list, n)
	}
	p.pos++
	return list, true
}

func (p *parser) templateArg() node {
	switch p.peek() {
	case 'X':
		p.pos++
		e := p.expression()
		if e == nil || !p.expect('E', "end of template argument expression") {
			return nil
		}
		return e
	case 'L':
		return p.exprPrimary()
	case 'J', 'I': // old GCC manglings wrote argument packs as I...E
		p.pos++
		elems, ok := p.listToE(p.templateArg)
		if !ok {
			return nil
		}
		return &packN{elems: elems}
	case 0:
		return p.fail("name ends inside template arguments")
	}
	return p.typ()
}
