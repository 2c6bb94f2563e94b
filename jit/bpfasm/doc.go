// Package bpfasm assembles the text assembly of the bpf_conformance test
// data (`mov32 %r0, 1`, `ldxh %r3, [%r1+12]`, `lock fetch add [%r10-8], %r1`,
// `jne %r1, 0x8, L2`, ...) into cilium/ebpf instructions, and decodes raw
// instruction words.
//
// Both paths go through Check, which enforces RFC 9669's encoding rules on
// the raw 8-byte slots: known opcodes, registers r0..r10, and zero in every
// field an opcode does not use (cilium/ebpf's decoder folds the ALU offset
// into sdiv/smod/movsx and would otherwise hide such fields). Errors name the
// source line (assembly) or the slot index "insn N" (raw words).
//
// Encodings worth knowing: `swap16/32/64` and `bswap16/32/64` are the
// unconditional ALU64 byte swaps (0xd7); `ja32`/`gotol` is JMP32|JA with the
// target in imm; `call local L` is a bpf-to-bpf call (src 1, relative imm);
// `call %rN`/`callx %rN` is 0x8d with the helper id register in dst; a jump to
// the undefined label `exit` goes to the first exit instruction.
package bpfasm
