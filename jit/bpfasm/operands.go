package bpfasm

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

func reg(s string) (uint8, error) {
	n, ok := strings.CutPrefix(s, "%r")
	if !ok {
		return 0, fmt.Errorf("invalid register %q: want %%r0..%%r10", s)
	}
	v, err := strconv.ParseUint(n, 10, 8)
	if err != nil || v > 10 {
		return 0, fmt.Errorf("invalid register %q: want %%r0..%%r10", s)
	}
	return uint8(v), nil
}

// memOperand parses [%rN], [%rN+off] or [%rN-off].
func memOperand(s string) (uint8, int16, error) {
	if !strings.HasPrefix(s, "[") || !strings.HasSuffix(s, "]") {
		return 0, 0, fmt.Errorf("invalid memory operand %q: want [%%rN+offset]", s)
	}
	in := s[1 : len(s)-1]
	i := strings.IndexAny(in, "+-")
	if i < 0 {
		r, err := reg(strings.TrimSpace(in))
		return r, 0, err
	}
	r, err := reg(strings.TrimSpace(in[:i]))
	if err != nil {
		return 0, 0, err
	}
	offText := strings.TrimSpace(in[i+1:])
	v, err := parseUnsigned(offText)
	if err != nil {
		return 0, 0, fmt.Errorf("invalid offset in %q: %v", s, err)
	}
	if in[i] == '-' {
		if v > 1<<15 {
			return 0, 0, fmt.Errorf("offset in %q is out of the 16-bit range -32768..32767", s)
		}
		return r, int16(-int64(v)), nil
	}
	if v > math.MaxInt16 {
		return 0, 0, fmt.Errorf("offset in %q is out of the 16-bit range -32768..32767", s)
	}
	return r, int16(v), nil
}

func parseUnsigned(s string) (uint64, error) {
	if h, ok := strings.CutPrefix(strings.ToLower(s), "0x"); ok {
		return strconv.ParseUint(h, 16, 64)
	}
	return strconv.ParseUint(s, 10, 64)
}

// imm32 accepts decimal -2147483648..2147483647 and hex up to 0xffffffff
// (or down to -0x80000000); hex values keep their bit pattern.
func imm32(s string) (int32, error) {
	neg := strings.HasPrefix(s, "-")
	body := strings.TrimPrefix(s, "-")
	hex := strings.HasPrefix(strings.ToLower(body), "0x")
	v, err := parseUnsigned(body)
	if err != nil {
		return 0, fmt.Errorf("invalid immediate %q", s)
	}
	switch {
	case neg && v <= 1<<31:
		return int32(-int64(v)), nil
	case !neg && hex && v <= math.MaxUint32:
		return int32(uint32(v)), nil
	case !neg && !hex && v <= math.MaxInt32:
		return int32(v), nil
	}
	return 0, fmt.Errorf("immediate %s does not fit in 32 bits (decimal -2147483648..2147483647, hex up to 0xffffffff)", s)
}

// imm64 accepts any 64-bit value, signed or unsigned, decimal or hex.
func imm64(s string) (uint64, error) {
	neg := strings.HasPrefix(s, "-")
	v, err := parseUnsigned(strings.TrimPrefix(s, "-"))
	if err != nil {
		return 0, fmt.Errorf("invalid 64-bit immediate %q", s)
	}
	if neg {
		if v > 1<<63 {
			return 0, fmt.Errorf("immediate %s does not fit in 64 bits", s)
		}
		return -v, nil
	}
	return v, nil
}
