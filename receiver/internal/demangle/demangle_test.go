package demangle

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDemangle(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"_Z9vectorAddPKfS0_Pfi", "vectorAdd(float const*, float const*, float*, int)"},
		{"_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_",
			"void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)"},
		{"_Z7nontypeIiLin5EEvPT_", "void nontype<int, -5>(int*)"},
		{"_Z8literalsILb1ELc120ELln3ELy18446744073709551615EEvv", "void literals<true, (char)120, -3l, 18446744073709551615ull>()"},
		{"_Z1fu6__half", "f(__half)"},
		{"_Z1fPVi", "f(int volatile*)"},
		{"_Z1fPrVKi", "f(int const volatile restrict*)"},
		{"_ZN12_GLOBAL__N_13fooEv", "(anonymous namespace)::foo()"},
		{"_ZZ4mainENKUlvE_clEv", "main::{lambda()#1}::operator()() const"},
		{"_Z8variadicIJifPcEEvDpT_", "void variadic<int, float, char*>(int, float, char*)"},
		{"_Z5fnptrIfEvPFT_S0_EPFvifE", "void fnptr<float>(float (*)(float), void (*)(int, float))"},
		{"_Z9arrkernelILi16EEvPAT__f", "void arrkernel<16>(float (*) [16])"},
		{"_ZNSt6vectorIiSaIiEE9push_backERKi", "std::vector<int, std::allocator<int> >::push_back(int const&)"},
		{"_ZN1AIiED0Ev", "A<int>::~A()"},
		{"_Z3foov.isra.0.cold", "foo() [clone .isra.0] [clone .cold]"},
		{"_ZTV1A", "vtable for A"},
		{"_Z1fIiEvDTplfp_Li1EE", "void f<int>(decltype ({parm#1}+(1)))"},
		// Not mangled, or not valid: returned unchanged.
		{"vectorAdd", "vectorAdd"},
		{"", ""},
		{"_Z", "_Z"},
		{"_Z1fS_", "_Z1fS_"},
		{"_Z1fT_", "_Z1fT_"},
		{"_Z3fooPi garbage", "_Z3fooPi garbage"},
	}
	for _, tt := range tests {
		if got := Demangle(tt.in); got != tt.want {
			t.Errorf("Demangle(%q)\n got: %s\nwant: %s", tt.in, got, tt.want)
		}
	}
}

func TestShortAndBase(t *testing.T) {
	tests := []struct {
		in, short, base string
	}{
		{"_Z9vectorAddPKfS0_Pfi", "vectorAdd", "vectorAdd"},
		{"_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_",
			"at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >",
			"vectorized_elementwise_kernel"},
		{"_ZN7cutlass6KernelINS_4gemm6kernel4GemmIiEEEEvNT_6ParamsE",
			"cutlass::Kernel<cutlass::gemm::kernel::Gemm<int> >", "Kernel"},
		{"_ZZ4mainENKUlvE_clEv", "main::{lambda()#1}::operator()", "operator()"},
		{"_Z3foov.cold", "foo", "foo"},
		{"_ZNK1A1fEv", "A::f", "f"},
		{"_ZTV1A", "vtable for A", "vtable for A"},
		{"_ZN3FooB5cxx11Ev", "Foo[abi:cxx11]", "Foo"},
		{"not_mangled", "not_mangled", "not_mangled"},
		{"_ZN1A", "_ZN1A", "_ZN1A"},
	}
	for _, tt := range tests {
		if got := Short(tt.in); got != tt.short {
			t.Errorf("Short(%q) = %q, want %q", tt.in, got, tt.short)
		}
		if got := Base(tt.in); got != tt.base {
			t.Errorf("Base(%q) = %q, want %q", tt.in, got, tt.base)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		in     string
		offset int
		reason string
	}{
		{"foo", 0, "no \"_Z\" prefix"},
		{"_Z", 2, "name ends where a name was expected"},
		{"_Z3fo", 3, "identifier length 3 runs past the end"},
		{"_Z1fS0_", 4, "substitution S0_ refers past the 0 candidates"},
		{"_ZN1A", 5, "nested name not closed"},
		{"_Z1fQ", 4, "unexpected 'Q' where a type was expected"},
		{"_Z1fv.A", 5, "unexpected \".A\" after the name"},
		{"_ZN1fC9Ev", 6, "bad constructor kind"},
		{"_Z1fILi1", 8, "name ends where 'E' (end of literal) was expected"},
		{"_Z1fIiEvT1_", 8, "template parameter has no argument"},
		{"_Z1f" + strings.Repeat("P", maxDepth+10) + "i", 4 + maxDepth - 1, "nesting deeper"},
		{"_Z" + strings.Repeat("x", maxInput), maxInput, "longer than"},
	}
	for _, tt := range tests {
		_, err := Parse(tt.in)
		var de *Error
		if !errors.As(err, &de) {
			t.Errorf("Parse(%.40q) error = %v, want *Error", tt.in, err)
			continue
		}
		if de.Offset != tt.offset || !strings.Contains(de.Reason, tt.reason) {
			t.Errorf("Parse(%.40q) = offset %d %q, want offset %d containing %q", tt.in, de.Offset, de.Reason, tt.offset, tt.reason)
		}
	}
}

// TestAdversarialBounded checks names built to explode through
// substitutions or nesting stay fast and fall back to the input.
func TestAdversarialBounded(t *testing.T) {
	// Each level doubles the printed size: S_ refers to the previous pair.
	var b strings.Builder
	b.WriteString("_Z1f1AIiE")
	for i := 0; i < 60; i++ {
		b.WriteString("1AIS" + seq(2*i+1) + "S" + seq(2*i+1) + "E")
	}
	tests := []struct {
		name string
		in   string
	}{
		{"doubling substitutions", b.String()},
		{"deep templates", "_Z1f" + strings.Repeat("1AI", 500) + "i" + strings.Repeat("E", 500)},
		{"deep pointers", "_Z1f" + strings.Repeat("P", 10000) + "i"},
		{"many sr scopes", "_Z1fIiEvDT" + strings.Repeat("srsr", 200) + "1x1yE"},
		{"deep expressions", "_Z1fIiEvDT" + strings.Repeat("ng", 5000) + "fp_E"},
	}
	for _, tt := range tests {
		start := time.Now()
		got := Demangle(tt.in)
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: took %v", tt.name, d)
		}
		if len(got) > maxOutput {
			t.Errorf("%s: output %d bytes, over the %d limit", tt.name, len(got), maxOutput)
		}
		if got != tt.in {
			t.Errorf("%s: got %d bytes of output, want the input back", tt.name, len(got))
		}
	}
}

// seq writes a substitution sequence id for index i (S_ is 0).
func seq(i int) string {
	if i == 0 {
		return "_"
	}
	const digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	i--
	s := ""
	for {
		s = string(digits[i%36]) + s
		i /= 36
		if i == 0 {
			break
		}
	}
	return s + "_"
}

func FuzzDemangle(f *testing.F) {
	for _, n := range loadCorpus(f) {
		f.Add(n)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := Parse(in)
		out := Demangle(in)
		if err != nil {
			if out != in {
				t.Fatalf("Parse failed (%v) but Demangle returned %q", err, out)
			}
			var de *Error
			if !errors.As(err, &de) || de.Offset < 0 || de.Offset > len(in) {
				t.Fatalf("bad error %v", err)
			}
			return
		}
		if len(out) > maxOutput {
			t.Fatalf("output %d bytes", len(out))
		}
		_ = s.Short()
		_ = s.Base()
	})
}

func BenchmarkDemangle(b *testing.B) {
	names := map[string]string{
		"simple":  "_Z9vectorAddPKfS0_Pfi",
		"pytorch": "_ZN2at6native29vectorized_elementwise_kernelILi4EZZZNS0_23direct_copy_kernel_cudaERNS_18TensorIteratorBaseEENKUlvE1_clEvENKUlvE8_clEvEUlN3c104HalfEE_St5arrayIPcLm2EEEEviT0_T1_",
		"cutlass": "_ZN7cutlass6KernelINS_4gemm6kernel4GemmINS1_11threadblock13MmaMultistageINS1_9GemmShapeILi128ELi128ELi32EEENS6_ILi64ELi64ELi32EEELi3ELb0EEENS1_8epilogue17LinearCombinationINS_6half_tELi8EfEENS1_30GemmIdentityThreadblockSwizzleELb0EEEEEvNT_6ParamsE",
	}
	for _, k := range []string{"simple", "pytorch", "cutlass"} {
		n := names[k]
		if Demangle(n) == n {
			b.Fatalf("%s does not demangle", k)
		}
		b.Run(k, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Demangle(n)
			}
		})
		b.Run(k+"/short", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Short(n)
			}
		})
	}
}
