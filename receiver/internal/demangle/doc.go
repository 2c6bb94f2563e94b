// Package demangle turns Itanium C++ ABI mangled names (what nvcc, g++ and
// clang emit for CUDA kernels) into readable C++ names, in exactly the
// format binutils' c++filt prints, so that kernel spans read like Nsight
// Systems and like the operator's own tools.
//
// It is written from the ABI specification
// (https://itanium-cxx-abi.github.io/cxx-abi/abi.html#mangling) and tested
// against c++filt on over a thousand real manglings: kernels from
// PyTorch-, CUTLASS-, cute-, cub- and thrust-style sources built with
// nvcc, nvcc's extended-lambda wrappers (__nv_dl_wrapper_t), and g++
// library code. It covers nested and local names, templates (literals,
// packs, template template parameters, expressions, decltype), every
// builtin and vendor type, qualifiers, function, array and member-pointer
// types, substitutions and the std:: abbreviations, lambdas and unnamed
// types, anonymous namespaces, ABI tags, special names (vtables, thunks,
// guard variables) and GCC clone suffixes.
//
// Three forms are offered:
//
//	Demangle: void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)
//	Short:    at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >
//	Base:     vectorized_elementwise_kernel
//
// Each returns its input unchanged when it is not a mangled name or cannot be
// parsed; Parse says why, with the byte offset. Input is limited to 64 KiB,
// nesting to 200 levels and output to 256 KiB, so hostile names cost
// bounded time and memory; nothing panics.
package demangle
