package ptxmod

import "strconv"

// params parses a parenthesised parameter list at p.i.
func (p *parser) params() ([]Param, Span, error) {
	open := p.next()
	var out []Param
	var cur []token
	flush := func(at token) error {
		if len(cur) == 0 {
			if len(out) > 0 || !p.isPunct(at, ')') {
				return p.errorf(at, "empty parameter")
			}
			return nil
		}
		prm, err := p.param(cur)
		if err != nil {
			return err
		}
		out = append(out, prm)
		cur = cur[:0]
		return nil
	}
	depth := 0
	for {
		t := p.next()
		switch {
		case t.kind == tokEOF:
			return nil, Span{}, p.errorf(open, "parameter list is not closed")
		case p.isPunct(t, '[') || p.isPunct(t, '('):
			depth++
		case p.isPunct(t, ']') || (p.isPunct(t, ')') && depth > 0):
			depth--
		case p.isPunct(t, ')'):
			if err := flush(t); err != nil {
				return nil, Span{}, err
			}
			return out, Span{open.pos, t.end}, nil
		case p.isPunct(t, ',') && depth == 0:
			if err := flush(t); err != nil {
				return nil, Span{}, err
			}
			continue
		case p.isPunct(t, '{') || p.isPunct(t, '}') || p.isPunct(t, ';'):
			return nil, Span{}, p.errorf(t, "unexpected %s in a parameter list", p.describe(t))
		}
		cur = append(cur, t)
	}
}

var stateSpaceDirs = map[string]bool{".global": true, ".shared": true, ".local": true, ".const": true, ".param": true}

// param parses the tokens of one parameter.
func (p *parser) param(ts []token) (Param, error) {
	prm := Param{Span: Span{ts[0].pos, ts[len(ts)-1].end}}
	prm.Text = string(p.lx.src[prm.Pos:prm.End])
	afterPtr := false
	for i := 0; i < len(ts); i++ {
		t := ts[i]
		s := p.text(t)
		switch {
		case t.kind == tokWord && (s == ".param" || s == ".reg") && prm.Space == "":
			prm.Space = s
		case s == ".ptr":
			prm.Ptr, afterPtr = true, true
		case s == ".align":
			if i+1 >= len(ts) || ts[i+1].kind != tokNumber {
				return prm, p.errorf(t, ".align needs a number")
			}
			n, err := strconv.Atoi(p.text(ts[i+1]))
			if err != nil {
				return prm, p.errorf(ts[i+1], ".align %s: %v", p.text(ts[i+1]), err)
			}
			if !afterPtr {
				prm.Align = n
			}
			i++
		case t.kind == tokWord && s[0] == '.':
			if !(afterPtr && stateSpaceDirs[s]) {
				prm.Type = s
			}
		case t.kind == tokWord:
			prm.Name = s
		case p.isPunct(t, '['):
			if i+1 < len(ts) && ts[i+1].kind == tokNumber {
				n, err := strconv.Atoi(p.text(ts[i+1]))
				if err != nil {
					return prm, p.errorf(ts[i+1], "array size %s: %v", p.text(ts[i+1]), err)
				}
				prm.ArraySize = n
			}
		}
	}
	if prm.Name == "" {
		return prm, p.errorf(ts[0], "parameter %q has no name", prm.Text)
	}
	return prm, nil
}
