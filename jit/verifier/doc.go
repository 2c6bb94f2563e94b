// Package verifier decides whether an eBPF program is safe to run inside a
// CUDA kernel, before the compiler turns it into PTX.
//
// # What is checked
//
// The structure first, over every instruction (reachable or not):
//
//   - valid opcodes only (RFC 9669 plus callx), registers r0..r10, and every
//     field the encoding does not use is zero (the offset of ALU operations
//     other than sdiv/smod/movsx, the imm of loads and register stores, the
//     src of calls and exits, ...);
//   - jumps and bpf-to-bpf calls land inside the program and never in the
//     second half of an LD_IMM64; jumps stay inside their function;
//   - every function ends with exit or ja, so no path falls off the end;
//   - LD_IMM64 map references name a map of Program.Maps.
//
// Then an abstract interpretation: a worklist over basic blocks, with an
// abstract state per block entry and call chain, joined where paths meet,
// except where a register or spilled slot points into different regions
// on the paths (the stack and a map value, say): as Linux's verifier, those
// paths are analysed apart, up to 8 states per block (see paths.go).
// A state holds, per register and per 8-byte stack slot, one of: not
// written, number (with unsigned and signed ranges and known low zero bits),
// stack pointer, context pointer, map value pointer, map value pointer or
// NULL, map handle. Stack slots remember which bytes were written and,
// when a register was stored whole, its value, so pointers survive a spill.
// Conditional jumps narrow ranges on each edge and drop edges that cannot
// be taken; `if (p == NULL)` on a lookup result settles every copy of it.
//
// On every path:
//
//   - no register is read before it is written (r1..r5 are dead after a
//     helper call; r0 must be set before exit);
//   - stack accesses stay in [-512, 0) from the frame pointer, and reads
//     only touch bytes that were written;
//   - map value accesses stay inside the value, context accesses inside
//     Options.CtxSize, writes avoid read-only maps (BPF_F_RDONLY_PROG);
//   - a lookup result is NULL-checked before it is dereferenced, passed to
//     a helper or moved by arithmetic;
//   - r10 is never written; map handles are never used in arithmetic;
//   - atomics are naturally aligned, and so is the u64 that
//     atomic_max_u64/atomic_min_u64 (607/608) update, which must be a
//     writable map value or stack bytes already written (not the context);
//   - helpers exist in the GPU ABI (jit/abi.go) and get the argument types
//     of their signature (see HelperSignature); their return value is typed
//     (map_lookup_elem returns "map value or NULL" of its map);
//   - every pointer argument reaches the bytes jit.Signature.ArgAccess says
//     the helper touches; a string (puts) is read to its first NUL, at most
//     MaxLen (168) bytes, so it needs a NUL the verifier knows on the stack
//     (a constant store) or the whole 168-byte window readable;
//   - bpf-to-bpf calls are not recursive, nest at most 8 deep, get a fresh
//     512-byte frame, keep r6..r9, and do not return pointers to their own
//     stack.
//
// Division by zero is legal: it has defined results in RFC 9669.
//
// # Loops
//
// Loops are allowed. The analysis widens the ranges at loop heads so that
// it terminates, and Result.BackEdges lists every backward jump: the
// compiler and the interpreter count them and end the program with r0 = 0
// after jit.LoopBudget of them, so every run is bounded. Every cycle of the
// control-flow graph contains a backward jump, and recursion is rejected.
//
// # Entry state
//
// r1 points to Options.CtxSize bytes of context (a number when CtxSize is
// 0: entry and exit probes; jit.MemCtxSize for kprobe/__memcapture; the
// length of `-- mem` for the bpf_conformance suite), r2 holds CtxSize (a
// number when it is 0), r10 is the frame pointer, the rest is unwritten.
//
// # What the compiler gets
//
// A *Result: the functions with the stack bytes each uses (Func.StackSize),
// the back edges, the deepest call chain, the instructions no run reaches,
// and Unaligned: memory accesses (and helper calls with a pointer argument)
// whose address is not provably a multiple of the access size, given 8-byte
// aligned stack, context and map values. PTX faults on a misaligned ld/st,
// so those must be split into byte accesses; everything else may use one.
//
// # Rejections
//
// A rejection is an *Error: the instruction index in Program.Insns, the
// source line when BTF line info has it, and the reason:
//
//	insn 6 (unchecked.c:17 "*v += 1;"): r0 may be NULL here: null-check the result of map_lookup_elem (insn 5) before dereferencing it
//
// # Limits
//
// Programs of up to 1,000,000 instruction slots; Options.MaxSteps abstract
// instruction steps (default 1,000,000); 4096 distinct call chains. A
// 1000-instruction probe takes about 0.2 ms of CPU (BenchmarkVerify1000).
//
// # Conformance programs
//
// The bpf_conformance suite calls helper 5 ("unwind", one number) directly
// and through callx: pass ConformanceHelpers in Options.Helpers, which
// replace the ABI's helper 5 (ktime_get_ns, no arguments). callx
// names its register in dst (newer LLVM) or, when dst is 0, in imm (older
// LLVM); the register must hold a known helper id.
package verifier
