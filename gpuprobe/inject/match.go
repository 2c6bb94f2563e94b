package inject

import (
	"path"
	"strconv"
	"strings"
)

// kernelNames returns the names a kernel can be targeted by: its symbol
// (the mangled name as in the PTX), and, for an Itanium-mangled C++ name,
// its qualified name without parameters ("ns::kernel") and its last
// component ("kernel"). Template arguments and parameter types are not
// part of either, so a base name targets every overload and instance.
func kernelNames(symbol string) []string {
	names := []string{symbol}
	parts := mangledBase(symbol)
	if len(parts) == 0 {
		return names
	}
	q := strings.Join(parts, "::")
	names = append(names, q)
	if last := parts[len(parts)-1]; last != q {
		names = append(names, last)
	}
	return names
}

// mangledBase reads the name components of an Itanium-mangled function
// name: _Z<len><id>... or _ZN[<cv>]<len><id>...<len><id>[I...]E...; nil
// when the symbol is not of that form (extern "C" kernels, operators,
// constructors, local names).
func mangledBase(s string) []string {
	rest, ok := strings.CutPrefix(s, "_Z")
	if !ok {
		return nil
	}
	nested := strings.HasPrefix(rest, "N")
	if nested {
		rest = strings.TrimLeft(rest[1:], "rVK") // cv-qualifiers of member functions
	}
	var parts []string
	for {
		n := 0
		for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
			n++
		}
		if n == 0 {
			break
		}
		l, err := strconv.Atoi(rest[:n])
		if err != nil || l <= 0 || n+l > len(rest) {
			return nil
		}
		parts = append(parts, rest[n:n+l])
		rest = rest[n+l:]
		if !nested {
			break
		}
	}
	return parts
}

// isPattern reports whether a target uses path.Match metacharacters.
func isPattern(target string) bool {
	return strings.ContainsAny(target, "*?[")
}

// matchKernel reports whether target names the kernel with the given
// symbol: exactly, by its qualified or base name, or as a path.Match
// pattern over any of those ("*" is every kernel).
func matchKernel(target, symbol string) bool {
	if matchName(target, symbol) {
		return true
	}
	// bpftime's examples name a kernel's probes kprobe/cuda_<symbol>
	// (kretprobe/cuda__Z9vectorAddPKfS0_Pf): the kernel is the symbol
	// after the prefix.
	rest, ok := strings.CutPrefix(target, bpftimeKernelPrefix)
	return ok && rest != "" && matchName(rest, symbol)
}

// bpftimeKernelPrefix is the prefix bpftime's examples put before a
// kernel's symbol in a probe's section.
const bpftimeKernelPrefix = "cuda_"

// matchName reports whether target (a name or a pattern) matches one of
// symbol's names.
func matchName(target, symbol string) bool {
	for _, n := range kernelNames(symbol) {
		if isPattern(target) {
			if ok, err := path.Match(target, n); err == nil && ok {
				return true
			}
			continue
		}
		if n == target {
			return true
		}
	}
	return false
}

// validPattern checks a target pattern's syntax.
func validPattern(target string) error {
	if !isPattern(target) {
		return nil
	}
	_, err := path.Match(target, "")
	return err
}
