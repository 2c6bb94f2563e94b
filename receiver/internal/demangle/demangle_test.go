package demangle

import (
	"bufio"
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

// TestShort: span names of kernels as nvcc, g++ and clang mangle them.
// Where the library's output differs from binutils' c++filt (which the
// hand-written demangler copied), the library's is kept: std::string for
// Ss, &f for the address of a function in a template argument (c++filt:
// &(f())), "> >" between closing template brackets.
func TestShort(t *testing.T) {
	tests := []struct{ in, want string }{
		{"_Z9vectorAddPKfS0_Pfi", "vectorAdd"},
		{"_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_",
			"at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"},
		{"_ZN2at6native29vectorized_elementwise_kernelILi4EZZZNS0_23direct_copy_kernel_cudaERNS_18TensorIteratorBaseEENKUlvE1_clEvENKUlvE8_clEvEUlN3c104HalfEE_St5arrayIPcLm2EEEEviT0_T1_",
			"at::native::vectorized_elementwise_kernel<4, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#10}::operator()() const::{lambda(c10::Half)#1}, std::array<char*, 2ul> >"},
		{"_ZN7cutlass6KernelINS_4gemm6kernel4GemmIiEEEEvNT_6ParamsE", "cutlass::Kernel<cutlass::gemm::kernel::Gemm<int> >"},
		{"_Z13lambda_kernelI17__nv_dl_wrapper_tI11__nv_dl_tagIPFvvEXadL_Z7lambdasvEELj1EEJEEEvT_",
			"lambda_kernel<__nv_dl_wrapper_t<__nv_dl_tag<void (*)(), &lambdas, 1u> > >"},
		{"_Z7nontypeIiLin5EEvPT_", "nontype<int, -5>"},
		{"_Z8literalsILb1ELc120ELln3ELy18446744073709551615EEvv", "literals<true, (char)120, -3l, 18446744073709551615ull>"},
		{"_Z1fu6__half", "f"},
		{"_ZN12_GLOBAL__N_13fooEv", "(anonymous namespace)::foo"},
		{"_ZZ4mainENKUlvE_clEv", "main::{lambda()#1}::operator()"},
		{"_Z8variadicIJifPcEEvDpT_", "variadic<int, float, char*>"},
		{"_Z5fnptrIfEvPFT_S0_EPFvifE", "fnptr<float>"},
		{"_Z9arrkernelILi16EEvPAT__f", "arrkernel<16>"},
		{"_ZNSt6vectorIiSaIiEE9push_backERKi", "std::vector<int, std::allocator<int> >::push_back"},
		{"_ZNKSs4sizeEv", "std::string::size"},
		{"_ZN1AIiED0Ev", "A<int>::~A"},
		{"_ZNK1A1fEv", "A::f"},
		{"_Z3foov.isra.0.cold", "foo"},
		{"_ZTV1A", "vtable for A"},
		{"_ZN3FooB5cxx11Ev", "Foo[abi:cxx11]"},
		{"_Z1fIiEvDTplfp_Li1EE", "f<int>"},
		// Not mangled, not a valid mangling as a whole, or cut (a PyTorch
		// name cut at 80 bytes): unchanged.
		{"vectorAdd", "vectorAdd"},
		{"", ""},
		{"_Z", "_Z"},
		{"_ZN1A", "_ZN1A"},
		{"_Z1fS_", "_Z1fS_"},
		{"_Z1fT_", "_Z1fT_"},
		{"_Z1fv.A", "_Z1fv.A"},
		{"_Z3fooPi garbage", "_Z3fooPi garbage"},
		{"_Z10vectorAddPKfS0_Pfi", "_Z10vectorAddPKfS0_Pfi"}, // the name would read "vectorAddP"
		{"_ZN2at6native54_GLOBAL__N__d8ceb000_21_DistributionNormal_cu_0c5b6e8543distribut",
			"_ZN2at6native54_GLOBAL__N__d8ceb000_21_DistributionNormal_cu_0c5b6e8543distribut"},
		{"_ZN3foo17h0123456789abcdefE", "foo::h0123456789abcdef"}, // an old-style Rust name is read as C++
	}
	for _, tt := range tests {
		if got := Short(tt.in); got != tt.want {
			t.Errorf("Short(%q)\n got: %s\nwant: %s", tt.in, got, tt.want)
		}
	}
}

// loadCorpus reads testdata/*.txt: one mangled name per line, '#' comments.
func loadCorpus(t testing.TB, files ...string) []string {
	t.Helper()
	var names []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("reading corpus: %v", err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line != "" && !strings.HasPrefix(line, "#") {
				names = append(names, line)
			}
		}
	}
	return names
}

// TestCorpus: every real symbol of testdata/corpus.txt (929 names from
// objects built by nvcc 11.8 and g++ 12: PyTorch-, CUTLASS-, cute-, cub-
// and thrust-style kernels, nvcc's extended-lambda wrappers) gets a
// demangled name without a parameter list of its own.
func TestCorpus(t *testing.T) {
	names := loadCorpus(t, "testdata/corpus.txt")
	if len(names) < 900 {
		t.Fatalf("corpus has %d names", len(names))
	}
	for _, n := range names {
		s := Short(n)
		if s == n || strings.HasSuffix(s, ")") && !strings.HasSuffix(s, "operator()") && !strings.HasSuffix(s, ")>") {
			t.Errorf("Short(%s) = %s", n, s)
		}
	}
}

// TestAdversarialBounded checks names built to explode through
// substitutions or nesting stay fast and fall back to the input.
func TestAdversarialBounded(t *testing.T) {
	// Each level doubles the printed size: a pair of substitutions of the
	// previous level, in the parameters (which Short does not print) or in
	// the template arguments.
	doubling := func(prefix string, first int, end string) string {
		var b strings.Builder
		b.WriteString(prefix)
		for i := 0; i < 60; i++ {
			b.WriteString("1AIS" + seq(2*i+first) + "S" + seq(2*i+first) + "E")
		}
		return b.String() + end
	}
	tests := []struct {
		name string
		in   string
		same bool // the input comes back
	}{
		{"doubling substitutions in parameters", doubling("_Z1f1AIiE", 1, ""), false},
		{"doubling substitutions in template arguments", doubling("_Z1fI1AIiE", 2, "Evv"), true},
		{"deep templates", "_Z1f" + strings.Repeat("1AI", 500) + "i" + strings.Repeat("E", 500) + "v", false},
		{"deep pointers", "_Z1f" + strings.Repeat("P", 10000) + "i", false},
		{"many sr scopes", "_Z1fIiEvDT" + strings.Repeat("srsr", 200) + "1x1yE", true},
		{"deep expressions", "_Z1fIiEvDT" + strings.Repeat("ng", 5000) + "fp_E", false},
		{"over the input bound", "_Z1f" + strings.Repeat("P", maxInput) + "i", true},
	}
	for _, tt := range tests {
		start := time.Now()
		got := Short(tt.in)
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: took %v", tt.name, d)
		}
		if len(got) >= maxOutput {
			t.Errorf("%s: output %d bytes, over the %d limit", tt.name, len(got), maxOutput)
		}
		if tt.same && got != tt.in {
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

// FuzzDemangle: Short never panics, gives the input back or a bounded,
// non-empty name, the same each time.
func FuzzDemangle(f *testing.F) {
	for _, n := range loadCorpus(f, "testdata/corpus.txt", "testdata/grammar.txt") {
		f.Add(n)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := Short(in)
		if out == in {
			return
		}
		if len(out) >= maxOutput || out == "" {
			t.Fatalf("Short(%q) = %d bytes %.80q", in, len(out), out)
		}
		if again := Short(in); again != out {
			t.Fatalf("Short(%q) not deterministic", in)
		}
	})
}

func BenchmarkShort(b *testing.B) {
	names := map[string]string{
		"simple":  "_Z9vectorAddPKfS0_Pfi",
		"pytorch": "_ZN2at6native29vectorized_elementwise_kernelILi4EZZZNS0_23direct_copy_kernel_cudaERNS_18TensorIteratorBaseEENKUlvE1_clEvENKUlvE8_clEvEUlN3c104HalfEE_St5arrayIPcLm2EEEEviT0_T1_",
		"cutlass": "_ZN7cutlass6KernelINS_4gemm6kernel4GemmINS1_11threadblock13MmaMultistageINS1_9GemmShapeILi128ELi128ELi32EEENS6_ILi64ELi64ELi32EEELi3ELb0EEENS1_8epilogue17LinearCombinationINS_6half_tELi8EfEENS1_30GemmIdentityThreadblockSwizzleELb0EEEEEvNT_6ParamsE",
	}
	for _, k := range []string{"simple", "pytorch", "cutlass"} {
		n := names[k]
		if Short(n) == n {
			b.Fatalf("%s does not demangle", k)
		}
		b.Run(k, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Short(n)
			}
		})
	}
}
