package demangle

import (
	"strings"

	"github.com/ianlancetaylor/demangle"
)

// Bounds that keep hostile names cheap.
const (
	maxInput     = 64 << 10          // bytes of mangled name demangled; longer ones come back as they are
	maxOutputLog = 18                // the library's MaxLength: 2^18 bytes
	maxOutput    = 1 << maxOutputLog // bytes of demangled name; one that would be longer comes back mangled
)

// Short returns the span name of a mangled kernel name: the qualified name
// with its template arguments, without return type, parameters,
// qualifiers or clone suffixes, e.g.
// "at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >".
// It returns name unchanged when name is not a valid mangled name as a
// whole, or is longer than maxInput, or its demangled form would pass
// maxOutput bytes.
func Short(name string) (out string) {
	if len(name) > maxInput || !strings.HasPrefix(name, "_Z") {
		return name
	}
	defer func() {
		if recover() != nil {
			out = name
		}
	}()
	// The NoParams parse stops after the name: a full parse first, so that
	// only a valid mangling (parameters and clone suffixes included) is
	// demangled.
	if _, err := demangle.ToAST(name); err != nil {
		return name
	}
	s, err := demangle.ToString(name, demangle.NoParams, demangle.NoRust, demangle.MaxLength(maxOutputLog))
	if err != nil || s == "" || len(s) >= maxOutput {
		return name // ToString cuts at maxOutput: a cut name is not a name
	}
	return s
}
