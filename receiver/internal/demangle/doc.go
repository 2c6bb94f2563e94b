// Package demangle names kernels for spans and metrics: the Itanium C++ ABI
// mangled names that nvcc, g++ and clang emit, made readable by
// github.com/ianlancetaylor/demangle (the demangler Go's own pprof
// vendors), in the one form the receiver emits:
//
//	mangled: _ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_
//	Short:   at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >
//
// Short keeps the qualified name and its template arguments (two
// instantiations of a template are different kernels) and drops the return
// type, the parameter list, qualifiers and clone suffixes, as Nsight Systems
// shows kernels. A name that is not a valid mangling as a whole (C kernels
// declared extern "C", cut names) comes back unchanged, so every kernel
// gets a name. Input over 64 KiB and output over 256 KiB are refused (the
// input comes back), and a panic inside the library is recovered: a
// hostile name costs bounded time and memory and never stops the
// receiver.
package demangle
