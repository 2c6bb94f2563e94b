package demangle

import (
	"fmt"
	"strings"
)

// Limits that keep adversarial input cheap: parsing is linear in the input
// and printing stops once the output passes maxOutput bytes.
const (
	maxInput   = 64 << 10  // bytes of mangled name accepted
	maxDepth   = 200       // nesting of types, names and expressions
	maxNodes   = 1 << 16   // tree nodes built for one name
	maxOutput  = 256 << 10 // bytes of demangled text produced
	maxRetries = 16        // re-parses of ambiguous dependent names
)

// Error says why a name could not be demangled and at which byte offset.
type Error struct {
	Offset int    // byte offset in the mangled name
	Reason string // what was wrong there
}

// Error implements error.
func (e *Error) Error() string {
	return fmt.Sprintf("demangle: offset %d: %s", e.Offset, e.Reason)
}

// Symbol is a parsed mangled name that can be printed in several forms.
type Symbol struct {
	root   node
	clones []string
	full   string
}

// Parse parses an Itanium C++ ABI mangled name ("_Z..."). It returns an
// *Error naming the byte offset when the name is not a valid mangling.
func Parse(mangled string) (*Symbol, error) {
	if len(mangled) > maxInput {
		return nil, &Error{Offset: maxInput, Reason: fmt.Sprintf("name longer than %d bytes", maxInput)}
	}
	if !strings.HasPrefix(mangled, "_Z") {
		return nil, &Error{Offset: 0, Reason: `not a mangled name (no "_Z" prefix)`}
	}
	p := &parser{in: cursor{s: mangled, pos: 2}}
	root := p.encoding()
	if p.in.err != nil {
		return nil, p.in.err
	}
	var clones []string
	for p.in.pos < len(p.in.s) && p.in.s[p.in.pos] == '.' {
		c, ok := p.in.cloneSuffix()
		if !ok {
			break
		}
		clones = append(clones, c)
	}
	if p.in.pos != len(p.in.s) {
		return nil, &Error{Offset: p.in.pos, Reason: fmt.Sprintf("unexpected %q after the name", p.in.s[p.in.pos:min(len(p.in.s), p.in.pos+8)])}
	}
	s := &Symbol{root: root, clones: clones}
	pr := newPrinter()
	pr.print(root)
	for _, c := range clones {
		pr.str(" [clone " + c + "]")
	}
	full, ok := pr.result()
	if !ok {
		return nil, pr.error()
	}
	s.full = full
	return s, nil
}

// cloneSuffix reads a GCC clone suffix such as ".constprop.0" or ".cold".
func (in *cursor) cloneSuffix() (string, bool) {
	s, i := in.s, in.pos
	if i+1 >= len(s) || !(isLower(s[i+1]) || isDigit(s[i+1]) || s[i+1] == '_') {
		return "", false
	}
	i += 2
	for i < len(s) && (isLower(s[i]) || isDigit(s[i]) || s[i] == '_') {
		i++
	}
	for i+1 < len(s) && s[i] == '.' && isDigit(s[i+1]) {
		i += 2
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	}
	c := s[in.pos:i]
	in.pos = i
	return c, true
}

// String returns the full demangled name, as c++filt prints it.
func (s *Symbol) String() string { return s.full }

// Short returns the qualified name with its template arguments but without
// return type, parameter list, qualifiers or clone suffixes, e.g.
// "at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >".
func (s *Symbol) Short() string {
	out, _ := s.short()
	return out
}

func (s *Symbol) short() (string, bool) {
	pr := newPrinter()
	if e, ok := s.root.(*encN); ok {
		pr.print(e.name)
	} else {
		pr.print(s.root)
	}
	return pr.result()
}

// Base returns the unqualified name without template arguments, e.g.
// "vectorized_elementwise_kernel" (Nsight Systems' "base" name).
func (s *Symbol) Base() string {
	out, _ := s.base()
	return out
}

func (s *Symbol) base() (string, bool) {
	n := s.root
	for {
		switch v := n.(type) {
		case *encN:
			n = v.name
			continue
		case *localN:
			n = v.entity
			continue
		case *qualN:
			n = v.name
			continue
		case *tmplN:
			n = v.name
			continue
		case *abiN:
			n = v.name
			continue
		}
		break
	}
	pr := newPrinter()
	pr.print(n)
	return pr.result()
}

// Demangle returns the demangled form of name as c++filt prints it, or name
// unchanged when it is not a mangled name or cannot be demangled.
func Demangle(name string) string {
	s, err := Parse(name)
	if err != nil {
		return name
	}
	return s.full
}

// Short returns Symbol.Short of name, or name unchanged when it cannot be
// demangled. This is the form gpuprobe uses for kernel span names.
func Short(name string) string {
	s, err := Parse(name)
	if err != nil {
		return name
	}
	out, ok := s.short()
	if !ok {
		return name
	}
	return out
}

// Base returns Symbol.Base of name, or name unchanged when it cannot be
// demangled.
func Base(name string) string {
	s, err := Parse(name)
	if err != nil {
		return name
	}
	out, ok := s.base()
	if !ok {
		return name
	}
	return out
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isLower(c byte) bool { return c >= 'a' && c <= 'z' }
func isUpper(c byte) bool { return c >= 'A' && c <= 'Z' }
