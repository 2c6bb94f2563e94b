// Package ptxmod parses PTX modules for the injector: a tokenizer and a
// parser (not regular expressions) that understand comments, strings,
// module directives (.version, .target, .address_size, variable
// declarations, .extern/.visible/.weak, .file, .section with nested
// braces), .entry and .func headers with parameter and return lists and
// performance directives (.maxntid, .reqntid, .minnctapersm, ...), and
// function bodies: declarations, labels, guarded instructions
// (@%p1 bra $L; @!%p ret;), nested { } blocks (call sequences, inline
// assembly), vector operands {%r1, %r2} and addresses [%rd1+4].
//
// A Module keeps its source and refers to it by byte offsets. Edits
// (Insert, InsertBefore, InsertAfter, InsertTop, InsertAfterHeader,
// AppendParam, Replace, ReconcileVersion, SetTarget) are recorded and
// applied by Bytes, so that every byte outside an edit is preserved:
// with no edits, Bytes returns the source unchanged.
//
// For each function the parser records what the injector needs: Top,
// the first statement after the leading .reg/.local/.shared/.param
// declarations (where the entry probe goes); Exits, every ret and exit
// at any depth, guarded or labelled (the exit probe goes before each);
// and Mem, every ld/ldu/st with its state space ("" for generic), its
// size in bytes from the type and vector suffixes (.u32 = 4,
// .v4.f32 = 16) and its address operand (the memory probe goes after
// each global one).
//
// Syntax errors are *SyntaxError values that name the line and column.
package ptxmod
