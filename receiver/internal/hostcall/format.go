package hostcall

import (
	"strconv"
	"strings"
)

// Bounds of a trace_printk rendering: a hostile format cannot make the
// collector allocate more than this.
const (
	MaxPrintkArgs  = 3   // trace_printk's a1..a3 (r3..r5)
	maxFieldWidth  = 64  // width and precision of one conversion
	MaxMessageSize = 512 // bytes of one rendered message
)

// Format renders a trace_printk format with its (up to three) arguments
// the way the kernel's bpf_trace_printk does: %d %i %u %x %X %o %c %p %%
// with the flags "-+ 0#", a width, a precision and the length modifiers
// h, hh, l, ll, z (without l/ll/z an integer is 32-bit, as in C). A %s
// argument points into GPU memory, which the host does not read: it
// renders as "(gpu 0x…)". Widths and precisions are capped at 64, the
// result at MaxMessageSize bytes. The error says what is wrong and where.
func Format(f string, args []uint64) (string, error) {
	var sb strings.Builder
	next := 0
	for i := 0; i < len(f) && sb.Len() < MaxMessageSize; i++ {
		if f[i] != '%' {
			sb.WriteByte(f[i])
			continue
		}
		start := i
		i++
		flags := i
		for i < len(f) && strings.IndexByte("-+ 0#", f[i]) >= 0 {
			i++
		}
		fl := f[flags:i]
		width, prec := -1, -1
		i, width = number(f, i)
		if i < len(f) && f[i] == '.' {
			i, prec = number(f, i+1)
			prec = max(prec, 0)
		}
		if width > maxFieldWidth || prec > maxFieldWidth {
			return "", errorf("conversion at byte %d: width or precision over %d", start, maxFieldWidth)
		}
		long := false
		for i < len(f) && strings.IndexByte("hlz", f[i]) >= 0 {
			long = long || f[i] != 'h'
			i++
		}
		if i >= len(f) {
			return "", errorf("format ends inside a conversion at byte %d", start)
		}
		if f[i] == '%' {
			sb.WriteByte('%')
			continue
		}
		if next >= len(args) || next >= MaxPrintkArgs {
			return "", errorf("conversion at byte %d: more than %d conversions", start, min(len(args), MaxPrintkArgs))
		}
		s, err := convert(f[i], args[next], long, prec, fl)
		if err != nil {
			return "", errorf("conversion at byte %d: %v", start, err)
		}
		next++
		sb.WriteString(pad(s, width, fl))
	}
	out := sb.String()
	if len(out) > MaxMessageSize {
		out = out[:MaxMessageSize]
	}
	return out, nil
}

// number reads a decimal number at f[i:]; -1 when there is none.
func number(f string, i int) (int, int) {
	n := -1
	for i < len(f) && f[i] >= '0' && f[i] <= '9' {
		n = max(n, 0)*10 + int(f[i]-'0')
		if n > 1<<20 {
			n = 1 << 20 // capped; rejected by the caller
		}
		i++
	}
	return i, n
}

// convert renders one argument (without its width).
func convert(conv byte, v uint64, long bool, prec int, flags string) (string, error) {
	var s string
	switch conv {
	case 'd', 'i':
		n := int64(v)
		if !long {
			n = int64(int32(v))
		}
		s = strconv.FormatInt(n, 10)
		if n >= 0 && strings.Contains(flags, "+") {
			s = "+" + s
		} else if n >= 0 && strings.Contains(flags, " ") {
			s = " " + s
		}
	case 'u', 'x', 'X', 'o':
		if !long {
			v = uint64(uint32(v))
		}
		base := map[byte]int{'u': 10, 'x': 16, 'X': 16, 'o': 8}[conv]
		s = strconv.FormatUint(v, base)
		if conv == 'X' {
			s = strings.ToUpper(s)
		}
		if strings.Contains(flags, "#") && v != 0 && conv != 'u' {
			s = map[byte]string{'x': "0x", 'X': "0X", 'o': "0"}[conv] + s
		}
	case 'c':
		return string(rune(byte(v))), nil
	case 'p':
		return "0x" + strconv.FormatUint(v, 16), nil
	case 's':
		return "(gpu 0x" + strconv.FormatUint(v, 16) + ")", nil
	default:
		return "", errorf("unsupported conversion %%%c", conv)
	}
	if prec > len(s) {
		s = strings.Repeat("0", prec-len(s)) + s
	}
	return s, nil
}

// pad applies a width: left-justified with "-", zero-padded with "0".
func pad(s string, width int, flags string) string {
	if width <= len(s) {
		return s
	}
	fill := strings.Repeat(" ", width-len(s))
	switch {
	case strings.Contains(flags, "-"):
		return s + fill
	case strings.Contains(flags, "0"):
		return strings.Repeat("0", width-len(s)) + s
	}
	return fill + s
}
