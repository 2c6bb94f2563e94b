package ptxmod

import (
	"bytes"
	"testing"
)

// FuzzParse: Parse never panics; whatever parses prints back unchanged,
// its statements lie inside the input in order without overlapping, and
// replacing each statement by its own text changes nothing.
func FuzzParse(f *testing.F) {
	f.Add([]byte(kitchenSink))
	f.Add([]byte(small))
	f.Add([]byte(".version 7.8\n.target sm_90\n.address_size 64\n.section .debug_info\n{\n.b8 1,2\n}\n"))
	f.Add([]byte(".entry k(.param .u32 a)\n.reqntid 32\n{\n\t{ @%p ret; }\n\tld.global.v2.f32 {%f1,%f2}, [%rd1+-4];\n\texit;\n}\n"))
	f.Add([]byte("/* c */ .extern .func (.param .b32 r) f(.param .b64 a);\n.global .u8 s[2] = {1, 2};\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		m, err := Parse(src)
		if err != nil {
			if _, ok := err.(*SyntaxError); !ok {
				t.Fatalf("error %T %v, want *SyntaxError", err, err)
			}
			return
		}
		out, err := m.Bytes()
		if err != nil || !bytes.Equal(out, src) {
			t.Fatalf("round trip: %v", err)
		}
		prev := 0
		check := func(s Span, what string) {
			if s.Pos < prev || s.End < s.Pos || s.End > len(src) {
				t.Fatalf("%s span [%d,%d) out of order or bounds (previous end %d, input %d)", what, s.Pos, s.End, prev, len(src))
			}
			prev = s.End
		}
		for _, fn := range m.Funcs {
			prev = fn.Pos
			fn.Walk(func(s *Stmt) {
				if s.Kind == StmtBlock {
					prev = s.Pos // its body lies inside it
					return
				}
				check(s.Span, s.Kind.String())
				m.Replace(s.Span, m.Text(s.Span))
			})
			for _, a := range fn.Mem {
				if a.Addr.End > a.Stmt.End || (a.Addr.End > 0 && a.Addr.Pos < a.Stmt.Pos) {
					t.Fatalf("address operand outside its statement")
				}
			}
		}
		out, err = m.Bytes()
		if err != nil || !bytes.Equal(out, src) {
			t.Fatalf("identity replacements: %v", err)
		}
	})
}
