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
	if !p.in.enter() {
		return nil
	}
	defer p.in.leave()
	c := p.in.peek()
	if name := builtins[c]; name != "" {
		p.in.pos++
		return &builtinN{s: name, code: string(c)}
	}
	var t node
	switch c {
	case 'r', 'V', 'K':
		q := p.in.cvQualifiers()
		if p.in.peek() == 'F' || (p.in.peek() == 'D' && strings.IndexByte("oOwx", p.in.peekAt(1)) >= 0) {
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
		p.in.pos++
		q := p.sourceName()
		if q == nil {
			return nil
		}
		qs := q.(*nameN).s
		if p.in.peek() == 'I' {
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
		p.in.pos++
		inner := p.typ()
		if inner == nil {
			return nil
		}
		t = &ptrN{child: inner, sym: ptrSyms[c]}
	case 'C', 'G':
		p.in.pos++
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
		p.in.pos++
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
		if d := p.in.peekAt(1); d == 's' || d == 'u' || d == 'e' {
			p.in.pos += 2
			var info nameInfo
			t = p.name(&info)
			break
		}
		t = p.templateParam()
		if t == nil {
			return nil
		}
		if p.in.peek() == 'I' && p.convType == 0 {
			p.addSub(t)
			args := p.templateArgs()
			if args == nil {
				return nil
			}
			t = &tmplN{name: t, args: args}
		}
	case 'S':
		if p.in.peekAt(1) == 't' {
			var info nameInfo
			t = p.name(&info)
			break
		}
		s := p.substitution(false)
		if s == nil {
			return nil
		}
		if p.in.peek() != 'I' {
			return s
		}
		args := p.templateArgs()
		if args == nil {
			return nil
		}
		t = &tmplN{name: s, args: args}
	case 'D':
		d := p.in.peekAt(1)
		if name := dBuiltins[d]; name != "" {
			p.in.pos += 2
			return &builtinN{s: name, code: "D" + string(d)}
		}
		switch d {
		case 'F':
			p.in.pos += 2
			start := p.in.pos
			n, _ := p.in.number()
			if p.in.err != nil {
				return nil
			}
			bits := p.in.s[start:p.in.pos]
			if p.in.consume('b') {
				if n != 16 {
					return p.in.fail("bad std::bfloat width")
				}
				return &builtinN{s: "std::bfloat16_t", code: "DF16b"}
			}
			if p.in.consume('x') {
				return &builtinN{s: "_Float" + bits + "x", code: "DF"}
			}
			if !p.in.expect('_', "_FloatN") {
				return nil
			}
			return &builtinN{s: "_Float" + bits, code: "DF"}
		case 'p':
			p.in.pos += 2
			inner := p.typ()
			if inner == nil {
				return nil
			}
			t = &expandN{child: inner}
		case 't', 'T':
			t = p.decltype()
		case 'v':
			p.in.pos += 2
			v := &vectorN{}
			if isDigit(p.in.peek()) {
				start := p.in.pos
				p.in.number()
				v.dim = &nameN{p.in.s[start:p.in.pos]}
			} else if p.in.peek() != '_' {
				if v.dim = p.expression(); v.dim == nil {
					return nil
				}
			}
			if !p.in.expect('_', "vector size") {
				return nil
			}
			if v.child = p.typ(); v.child == nil {
				return nil
			}
			t = v
		case 'o', 'O', 'w', 'x':
			t = p.functionType()
		default:
			return p.in.fail("unknown type code D%c", d)
		}
	case 'u':
		p.in.pos++
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
		return p.in.fail("name ends where a type was expected")
	default:
		return p.in.fail("unexpected %q where a type was expected", c)
	}
	if t == nil {
		return nil
	}
	p.addSub(t)
	return t
}

// cvQualifiers parses [r] [V] [K] and returns the text c++filt appends.
func (in *cursor) cvQualifiers() string {
	var r, v, k bool
	for {
		switch in.peek() {
		case 'r':
			r = true
		case 'V':
			v = true
		case 'K':
			k = true
		default:
			goto done
		}
		in.pos++
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
	for p.in.peek() == 'D' {
		switch p.in.peekAt(1) {
		case 'o':
			p.in.pos += 2
			f.exc = " noexcept"
		case 'O':
			p.in.pos += 2
			e := p.expression()
			if e == nil || !p.in.expect('E', "end of noexcept expression") {
				return nil
			}
			pr := newPrinter()
			pr.print(e)
			s, _ := pr.result()
			f.exc = " noexcept(" + s + ")"
		case 'w':
			p.in.pos += 2
			var ts []string
			for p.in.peek() != 'E' {
				t := p.typ()
				if t == nil {
					return nil
				}
				pr := newPrinter()
				pr.print(t)
				s, _ := pr.result()
				ts = append(ts, s)
			}
			p.in.pos++
			f.exc = " throw(" + strings.Join(ts, ", ") + ")"
		case 'x':
			p.in.pos += 2
			f.exc += " transaction_safe"
		default:
			return p.in.fail("unexpected D%c before a function type", p.in.peekAt(1))
		}
	}
	if !p.in.expect('F', "function type") {
		return nil
	}
	p.in.consume('Y')
	if f.ret = p.typ(); f.ret == nil {
		return nil
	}
	for {
		c := p.in.peek()
		if c == 'E' {
			p.in.pos++
			break
		}
		if (c == 'R' || c == 'O') && p.in.peekAt(1) == 'E' {
			f.ref = " " + ptrSyms[c]
			p.in.pos += 2
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
	p.in.pos++ // A
	a := &arrayN{}
	if isDigit(p.in.peek()) {
		start := p.in.pos
		p.in.number()
		a.dim = &nameN{p.in.s[start:p.in.pos]}
	} else if p.in.peek() != '_' {
		if a.dim = p.expression(); a.dim == nil {
			return nil
		}
	}
	if !p.in.expect('_', "array dimension") {
		return nil
	}
	if a.child = p.typ(); a.child == nil {
		return nil
	}
	return a
}

// decltype parses Dt/DT <expression> E.
func (p *parser) decltype() node {
	p.in.pos += 2
	e := p.expression()
	if e == nil || !p.in.expect('E', "end of decltype") {
		return nil
	}
	return &exprN{kind: exParen, op: "decltype ", args: []node{e}}
}
