package ptxmod

import "strconv"

// operands splits instruction tokens at top-level commas.
func (p *parser) operands(ts []token) []Operand {
	var out []Operand
	depth, start := 0, 0
	for i, t := range ts {
		switch {
		case p.isPunct(t, '(') || p.isPunct(t, '[') || p.isPunct(t, '{'):
			depth++
		case p.isPunct(t, ')') || p.isPunct(t, ']') || p.isPunct(t, '}'):
			depth--
		case p.isPunct(t, ',') && depth == 0:
			if i > start {
				out = append(out, p.operand(ts[start:i]))
			}
			start = i + 1
		}
	}
	if start < len(ts) {
		out = append(out, p.operand(ts[start:]))
	}
	return out
}

func (p *parser) operand(ts []token) Operand {
	o := Operand{Span: Span{ts[0].pos, ts[len(ts)-1].end}}
	o.Text = string(p.lx.src[o.Pos:o.End])
	first, last := ts[0], ts[len(ts)-1]
	switch {
	case len(ts) == 1 && first.kind == tokWord && p.lx.src[first.pos] == '%':
		o.Kind = OperandRegister
	case len(ts) == 1 && first.kind == tokWord:
		o.Kind = OperandSymbol
	case len(ts) == 1 && first.kind == tokNumber, len(ts) == 2 && p.isPunct(first, '-') && last.kind == tokNumber:
		o.Kind = OperandImmediate
	case len(ts) == 2 && p.isPunct(first, '!') && last.kind == tokWord:
		o.Kind = OperandNot
	case p.isPunct(first, '[') && p.isPunct(last, ']'):
		o.Kind = OperandAddress
		p.address(&o, ts[1:len(ts)-1])
	case p.isPunct(first, '{') && p.isPunct(last, '}'):
		o.Kind = OperandVector
		for _, e := range p.operands(ts[1 : len(ts)-1]) {
			o.Elems = append(o.Elems, e.Text)
		}
	case p.isPunct(first, '(') && p.isPunct(last, ')'):
		o.Kind = OperandList
		for _, e := range p.operands(ts[1 : len(ts)-1]) {
			o.Elems = append(o.Elems, e.Text)
		}
	}
	return o
}

// address fills Base and Offset for [base], [base+n], [base+-n], [base-n].
func (p *parser) address(o *Operand, ts []token) {
	if len(ts) == 0 || ts[0].kind != tokWord {
		return
	}
	base := p.text(ts[0])
	rest := ts[1:]
	if len(rest) == 0 {
		o.Base = base
		return
	}
	if !p.isPunct(rest[0], '+') && !p.isPunct(rest[0], '-') {
		return
	}
	neg := p.isPunct(rest[0], '-')
	rest = rest[1:]
	if len(rest) == 2 && p.isPunct(rest[0], '-') {
		neg, rest = !neg, rest[1:]
	}
	if len(rest) != 1 || rest[0].kind != tokNumber {
		return
	}
	n, err := strconv.ParseInt(p.text(rest[0]), 0, 64)
	if err != nil {
		return
	}
	if neg {
		n = -n
	}
	o.Base, o.Offset = base, n
}
