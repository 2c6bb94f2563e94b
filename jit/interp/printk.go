package interp

import (
	"fmt"
	"strings"
)

// format renders a trace_printk format with up to three arguments. It
// understands %d %i %u %x %X %o %c %s %p %% with the flags "-+ 0#", a width,
// a precision and the length modifiers h, hh, l, ll, z: without l/ll/z,
// integers are 32-bit, as in C. A %s argument is not read: trace_printk
// reads only its format (jit/abi.go), and the collector, which cannot
// read GPU memory, renders the pointer as "(gpu 0x…)"; so does this.
func (t *thread) format(f string, args []uint64) (string, error) {
	var sb strings.Builder
	next := 0
	for i := 0; i < len(f); i++ {
		c := f[i]
		if c != '%' {
			sb.WriteByte(c)
			continue
		}
		start := i
		i++
		for i < len(f) && strings.IndexByte("-+ 0#", f[i]) >= 0 {
			i++
		}
		for i < len(f) && f[i] >= '0' && f[i] <= '9' {
			i++
		}
		if i < len(f) && f[i] == '.' {
			i++
			for i < len(f) && f[i] >= '0' && f[i] <= '9' {
				i++
			}
		}
		spec := f[start+1 : i] // flags, width, precision
		long := false
		for i < len(f) && strings.IndexByte("hlz", f[i]) >= 0 {
			if f[i] != 'h' {
				long = true
			}
			i++
		}
		if i >= len(f) {
			return "", fmt.Errorf("format ends inside a conversion at byte %d", start)
		}
		conv := f[i]
		if conv == '%' {
			sb.WriteByte('%')
			continue
		}
		if next >= len(args) {
			return "", fmt.Errorf("more than %d conversions", len(args))
		}
		v := args[next]
		next++
		switch conv {
		case 'd', 'i':
			if long {
				fmt.Fprintf(&sb, "%"+spec+"d", int64(v))
			} else {
				fmt.Fprintf(&sb, "%"+spec+"d", int32(v))
			}
		case 'u', 'x', 'X', 'o':
			verb := map[byte]string{'u': "d", 'x': "x", 'X': "X", 'o': "o"}[conv]
			if long {
				fmt.Fprintf(&sb, "%"+spec+verb, v)
			} else {
				fmt.Fprintf(&sb, "%"+spec+verb, uint32(v))
			}
		case 'c':
			fmt.Fprintf(&sb, "%"+spec+"c", rune(byte(v)))
		case 'p':
			fmt.Fprintf(&sb, "%"+spec+"s", fmt.Sprintf("0x%x", v))
		case 's':
			fmt.Fprintf(&sb, "%"+spec+"s", fmt.Sprintf("(gpu 0x%x)", v))
		default:
			return "", fmt.Errorf("unknown conversion %%%c at byte %d", conv, start)
		}
	}
	return sb.String(), nil
}
