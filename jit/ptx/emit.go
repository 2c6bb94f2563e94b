package ptx

import (
	"strconv"
	"unsafe"
)

// emitter accumulates PTX text. Its methods append without fmt, so that
// compiling a 1000-instruction program stays well under a millisecond.
type emitter struct {
	b []byte
}

// op writes one tab-indented instruction: the pieces joined, then ";\n".
func (e *emitter) op(parts ...string) {
	e.b = append(e.b, '\t')
	for _, p := range parts {
		e.b = append(e.b, p...)
	}
	e.b = append(e.b, ';', '\n')
}

// raw writes text as is.
func (e *emitter) raw(parts ...string) {
	for _, p := range parts {
		e.b = append(e.b, p...)
	}
}

// label writes "name:".
func (e *emitter) label(name string) {
	e.b = append(e.b, name...)
	e.b = append(e.b, ':', '\n')
}

// comment writes "\t// text" with newlines flattened.
func (e *emitter) comment(text string) {
	e.b = append(e.b, "\t// "...)
	for i := 0; i < len(text); i++ {
		c := text[i]
		if c == '\n' || c == '\r' {
			c = ' '
		}
		e.b = append(e.b, c)
	}
	e.b = append(e.b, '\n')
}

// String returns a copy of the text.
func (e *emitter) String() string { return string(e.b) }

// take returns the text without copying; the emitter must not be used
// afterwards.
func (e *emitter) take() string {
	if len(e.b) == 0 {
		return ""
	}
	s := unsafe.String(&e.b[0], len(e.b))
	e.b = nil
	return s
}

var regNames = [11]string{"%r0", "%r1", "%r2", "%r3", "%r4", "%r5", "%r6", "%r7", "%r8", "%r9", "%r10"}

// i64 formats a signed 64-bit immediate.
func i64(v int64) string { return strconv.FormatInt(v, 10) }

// u64 formats an unsigned 64-bit immediate as hex (PTX reads 0x... as u64).
func u64(v uint64) string { return "0x" + strconv.FormatUint(v, 16) }

// i32 formats a signed 32-bit immediate.
func i32(v int32) string { return strconv.FormatInt(int64(v), 10) }

// u32 formats an unsigned 32-bit immediate.
func u32(v uint32) string { return strconv.FormatUint(uint64(v), 10) }

// addr formats a [reg+offset] operand.
func addr(reg string, off int64) string {
	if off == 0 {
		return "[" + reg + "]"
	}
	return "[" + reg + "+" + strconv.FormatInt(off, 10) + "]"
}
