package demangle

import "strconv"

// literalSuffix gives the suffix c++filt writes after integer literals of
// the builtin types that have one; the other types print as a cast.
var literalSuffix = map[string]string{
	"i": "", "j": "u", "l": "l", "m": "ul", "x": "ll", "y": "ull",
}

func (p *printer) printLiteral(v *litN) {
	sign := ""
	if v.neg {
		sign = "-"
	}
	if b, ok := p.resolve(v.typ).(*builtinN); ok {
		if suf, ok := literalSuffix[b.code]; ok {
			p.str(sign + v.val + suf)
			return
		}
		switch b.code {
		case "b":
			if !v.neg && (v.val == "0" || v.val == "1") {
				if v.val == "0" {
					p.str("false")
				} else {
					p.str("true")
				}
				return
			}
		case "f", "d", "e", "g":
			p.str("(" + b.s + ")" + sign + "[" + v.val + "]")
			return
		}
	}
	p.str("(")
	p.print(v.typ)
	p.str(")" + sign + v.val)
}

// sub prints an operand, in parentheses unless it is a plain name.
func (p *printer) sub(n node) {
	simple := false
	switch v := p.resolve(n).(type) {
	case *nameN, *qualN:
		simple = true
	case *exprN:
		simple = v.kind == exBraced && v.typ == nil
	}
	if !simple {
		p.str("(")
	}
	p.print(n)
	if !simple {
		p.str(")")
	}
}

func (p *printer) printExpr(v *exprN) {
	a := v.args
	switch v.kind {
	case exBinary:
		if v.op == ">" {
			p.str("(")
		}
		p.sub(a[0])
		if v.op == "[]" {
			p.str("[")
			p.print(a[1])
			p.str("]")
			return
		}
		p.str(v.op)
		p.sub(a[1])
		if v.op == ">" {
			p.str(")")
		}
	case exUnary:
		p.str(v.op)
		arg := a[0]
		// c++filt prints the address of a qualified function without its
		// parameter list: &ns::f.
		if e, ok := arg.(*encN); ok && v.op == "&" {
			if _, q := e.name.(*qualN); q {
				arg = e.name
			}
		}
		p.sub(arg)
	case exPostfix:
		p.sub(a[0])
		p.str(v.op)
	case exTernary:
		p.sub(a[0])
		p.str("?")
		p.sub(a[1])
		p.str(" : ")
		p.sub(a[2])
	case exCall:
		p.sub(a[0])
		p.str("(")
		p.list(a[1:])
		p.str(")")
	case exCast:
		p.str("(")
		p.print(v.typ)
		p.str(")")
		if v.op == "list" {
			p.str("(")
			p.list(a)
			p.str(")")
			return
		}
		p.sub(a[0])
	case exNamedCast:
		p.str(v.op + "<")
		p.print(v.typ)
		p.str(">(")
		p.print(a[0])
		p.str(")")
	case exSizeofT:
		p.str(v.op + "(")
		p.print(v.typ)
		p.str(")")
	case exPrefix:
		p.str(v.op)
		p.sub(a[0])
	case exMember:
		p.sub(a[0])
		p.str(v.op)
		p.sub(a[1])
	case exBraced:
		if v.typ != nil {
			p.print(v.typ)
		}
		p.str("{")
		p.list(a)
		p.str("}")
	case exParen:
		p.str(v.op + "(")
		p.print(a[0])
		p.str(")")
	case exSizeofPack:
		saved := p.packIdx
		p.packIdx = -1
		r := p.resolve(a[0])
		p.packIdx = saved
		if pk, ok := r.(*packN); ok {
			p.str(strconv.Itoa(len(pk.elems)))
			return
		}
		p.str("sizeof...(")
		p.print(a[0])
		p.str(")")
	case exFold:
		op := v.op[2:]
		p.str("(")
		switch v.op[:2] {
		case "fl":
			p.str("..." + op)
			p.sub(a[0])
		case "fr":
			p.sub(a[0])
			p.str(op + "...")
		default:
			p.sub(a[0])
			p.str(op + "..." + op)
			p.sub(a[1])
		}
		p.str(")")
	case exNew:
		p.str(v.op + " ")
		p.print(v.typ)
	default:
		p.failed = true
	}
}
