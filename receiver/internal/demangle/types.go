package demangle

import "strings"

// builtins maps one-letter builtin type codes to their names.
var builtins = [256]string{
	'v': "void", 'w': "wchar_t", 'b': "bool", 'c': "char", 'a': "signed char",
	'h': "unsigned char", 's': "short", 't': "unsigned short", 'i': "int",
	'j': "unsigned int", 'l': "long", 'm': "unsigned long", 'x': "long long",
	'y': "unsigned long long", 'n': "__int128", 'o': "unsigned __int128",
	'f': "float", 'd': "double", 'e': "long double", 'g': "__float128",
	'z': "...",
}

// dBuiltins maps D<letter> builtin type codes to their names.
var dBuiltins = [256]string{
	'd': "decimal64", 'e': "decimal128", 'f': "decimal32", 'h': "half",
	'i': "char32_t", 's': "char16_t", 'u': "char8_t", 'a': "auto",
	'c': "decltype(auto)", 'n': "decltype(nullptr)",
}

// ptrSyms maps P, R and O to what c++filt prints for them.
var ptrSyms = [256]string{'P': "*", 'R': "&", 'O': "&&"}

// typ parses <type>, adding substitution candidates as the ABI requires.
func (p *parser) typ() node {
	if !p.enter() {
		return nil
	}
	defer p.leave()
	c := p.peek()
	if name := builtins[c]; name != "" {
		p.pos++
		return &builtinN{s: name, code: string(c)}
	}
	var t node
	switch c {
	case 'r', 'V', 'K':
		q := p.cvQualifiers()
		if p.peek() == 'F' || (p.peek() == 'D' && strings.IndexByte("oOwx", p.peekAt(1)) >= 0) {
			f := p.functionType()
			if f == nil {
				return nil
			}
			f.(*funcTypeN).cv = q + f.(*funcTypeN).cv
			t = f
			break
		}
		inner := p.typ()
		if iq, ok := inner.(*qualTypeN); ok {
			q = dropRepeated(q, iq.q) // c++filt prints "T const", not "T const const"
		}
		if inner == nil {
			return nil
		}
		t = &qualTypeN{child: inner, q: q}
	case 'U':
		p.pos++
		q := p.sourceName()
		if q == nil {
			return nil
		}
		qs := q.(*nameN).s
		if p.peek() == 'I' {
			args := p.templateArgs()
			if args == nil {
				return nil
			}
			pr := newPrinter()
			pr.print(&tmplN{name: q, args: args})
			qs, _ = pr.result()
		}
		inner := p.typ()
		if inner == nil {
			return nil
		}
		t = &qualTypeN{child: inner, q: " " + qs}
	case 'P', 'R', 'O':
		p.pos++
		inner := p.typ()
		if inner == nil {
			return nil
		}
		t = &ptrN{child: inner, sym: ptrSyms[c]}
	case 'C', 'G':
		p.pos++
		inner := p.typ()
		if inner == nil {
			return nil
		}
		t = &qualTypeN{child: inner, q: " _Complex"}
		if c == 'G' {
			t = &qualTypeN{child: inner, q: " _Imaginary"}
		}
	case 'F':
		t = p.functionType()
	case 'A':
		t = p.arrayType()
	case 'M':
		p.pos++
		cls := p.typ()
		if cls == nil {
			return nil
		}
		mem := p.typ()
		if mem == nil {
			return nil
		}
		t = &ptrMemN{cls: cls, mem: mem}
	case 'T':
		if d := p.peekAt(1); d == 's' || d == 'u' || d == 'e' {
			p.pos += 2
			var info nameInfo
			t = p.name(&info)
			break
		}
		t = p.templateParam()
		if t == nil {
			return nil
		}
		if p.peek() == 'I' && p.convType == 0 {
			p.addSub(t)
			args := p.templateArgs()
			if args == nil {
				return nil
			}
			t = &tmplN{name: t, args: args}
		}
	case 'S':
		if p.peekAt(1) == 't' {
			var info nameInfo
			t = p.name(&info)
			break
		}
		s := p.substitution(false)
		if s == nil {
			return nil
		}
		if p.peek() != 'I' {
			return s
		}
		args := p.templateArgs()
		if args == nil {
			return nil
		}
		t = &tmplN{name: s, args: args}
	case 'D':
		d := p.peekAt(1)
		if name := dBuiltins[d]; name != "" {
			p.pos += 2
			return &builtinN{s: name, code: "D" + string(d)}
		}
		switch d {
		case 'F':
			p.pos += 2
			start := p.pos
			n, _ := p.number()
			if p.err != nil {
				return nil
			}
			bits := p.s[start:p.pos]
			if p.consume('b') {
				if n != 16 {
					return p.fail("bad std::bfloat width")
				}
				return &builtinN{s: "std::bfloat16_t", code: "DF16b"}
			}
			if p.consume('x') {
				return &builtinN{s: "_Float" + bits + "x", code: "DF"}
			}
			if !p.expect('_', "_FloatN") {
				return nil
			}
			return &builtinN{s: "_Float" + bits, code: "DF"}
		case 'p':
			p.pos += 2
			inner := p.typ()
			if inner == nil {
				return nil
			}
			t = &expandN{child: inner}
		case 't', 'T':
			t = p.decltype()
		case 'v':
			p.pos += 2
			v := &vectorN{}
			if isDigit(p.peek()) {
				start := p.pos
				p.number()
				v.dim = &nameN{p.s[start:p.pos]}
			} else if p.peek() != '_' {
				if v.dim = p.expression(); v.dim == nil {
					return nil
				}
			}
			if !p.expect('_', "vector size") {
				return nil
			}
			if v.child = p.typ(); v.child == nil {
				return nil
			}
			t = v
		case 'o', 'O', 'w', 'x':
			t = p.functionType()
		default:
			return p.fail("unknown type code D%c", d)
		}
	case 'u':
		p.pos++
		n := p.sourceName()
		if n == nil {
			return nil
		}
		t = &builtinN{s: n.(*nameN).s, code: "u"}
	case 'N', 'Z', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		var info nameInfo
		t = p.name(&info)
		if t != nil && info.cv+info.ref != "" {
			t = &qualTypeN{child: t, q: info.cv + info.ref}
		}
	case 0:
		return p.fail("name ends where a type was expected")
	default:
		return p.fail("unexpected %q where a type was expected", c)
	}
	if t == nil {
		return nil
	}
	p.addSub(t)
	return t
}

// cvQualifiers parses [r] [V] [K] and returns the text c++filt appends.
func (p *parser) cvQualifiers() string {
	var r, v, k bool
	for {
		switch p.peek() {
		case 'r':
			r = true
		case 'V':
			v = true
		case 'K':
			k = true
		default:
			goto done
		}
		p.pos++
	}
done:
	q := ""
	if k {
		q += " const"
	}
	if v {
		q += " volatile"
	}
	if r {
		q += " restrict"
	}
	return q
}

// dropRepeated removes from q the qualifier words already in inner.
func dropRepeated(q, inner string) string {
	out := ""
	for _, w := range strings.Fields(q) {
		if !strings.Contains(inner+" ", " "+w+" ") {
			out += " " + w
		}
	}
	return out
}

// functionType parses [exception spec] [Dx] F [Y] <types> [R|O] E.
func (p *parser) functionType() node {
	f := &funcTypeN{}
	for p.peek() == 'D' {
		switch p.peekAt(1) {
		case 'o':
			p.pos += 2
			f.exc = " noexcept"
		case 'O':
			p.pos += 2
			e := p.expression()
			if e == nil || !p.expect('E', "end of noexcept expression") {
				return nil
			}
			pr := newPrinter()
			pr.print(e)
			s, _ := pr.result()
			f.exc = " noexcept(" + s + ")"
		case 'w':
			p.pos += 2
			var ts []string
			for p.peek() != 'E' {
				t := p.typ()
				if t == nil {
					return nil
				}
				pr := newPrinter()
				pr.print(t)
				s, _ := pr.result()
				ts = append(ts, s)
			}
			p.pos++
			f.exc = " throw(" + strings.Join(ts, ", ") + ")"
		case 'x':
			p.pos += 2
			f.exc += " transaction_safe"
		default:
			return p.fail("unexpected D%c before a function type", p.peekAt(1))
		}
	}
	if !p.expect('F', "function type") {
		return nil
	}
	p.consume('Y')
	if f.ret = p.typ(); f.ret == nil {
		return nil
	}
	for {
		c := p.peek()
		if c == 'E' {
			p.pos++
			break
		}
		if (c == 'R' || c == 'O') && p.peekAt(1) == 'E' {
			f.ref = " " + ptrSyms[c]
			p.pos += 2
			break
		}
		t := p.typ()
		if t == nil {
			return nil
		}
		f.params = append(f.params, t)
	}
	f.params = dropVoid(f.params)
	return f
}

// arrayType parses A [<dimension>] _ <element type>.
func (p *parser) arrayType() node {
	p.pos++ // A
	a := &arrayN{}
	if isDigit(p.peek()) {
		start := p.pos
		p.number()
		a.dim = &nameN{p.s[start:p.pos]}
	} else if p.peek() != '_' {
		if a.dim = p.expression(); a.dim == nil {
			return nil
		}
	}
	if !p.expect('_', "array dimension") {
		return nil
	}
	if a.child = p.typ(); a.child == nil {
		return nil
	}
	return a
}

// decltype parses Dt/DT <expression> E.
func (p *parser) decltype() node {
	p.pos += 2
	e := p.expression()
	if e == nil || !p.expect('E', "end of decltype") {
		return nil
	}
	return &exprN{kind: exParen, op: "decltype ", args: []node{e}}
}
