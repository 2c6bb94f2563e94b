package ptx

// Instruction semantics of the test PTX interpreter (emu_test.go).

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

func typeWidth(t string) int {
	switch t {
	case "pred":
		return 1
	case "u8", "s8", "b8":
		return 8
	case "u16", "s16", "b16":
		return 16
	case "u32", "s32", "b32":
		return 32
	}
	return 64
}

func mask(v uint64, w int) uint64 {
	if w >= 64 {
		return v
	}
	return v & (1<<uint(w) - 1)
}

func sext(v uint64, w int) uint64 {
	if w >= 64 {
		return v
	}
	s := uint(64 - w)
	return uint64(int64(v<<s) >> s)
}

func (e *emu) special(name string) (uint64, bool) {
	if v, ok := e.geom[name]; ok {
		return v, true
	}
	switch name {
	case "%tid.x", "%tid.y", "%tid.z", "%ctaid.x", "%ctaid.y", "%ctaid.z", "%laneid", "%warpid", "%smid", "%lanemask_lt":
		return 0, true
	case "%ntid.x", "%ntid.y", "%ntid.z", "%nctaid.x", "%nctaid.y", "%nctaid.z", "%lanemask_eq":
		return 1, true
	case "%globaltimer":
		e.timer += 1000
		if e.hook != nil {
			e.hook(e)
		}
		return e.timer, true
	}
	return 0, false
}

func (e *emu) val(fr *emuFrame, s string) (uint64, error) {
	if strings.HasPrefix(s, "%") {
		if v, ok := e.special(s); ok {
			return v, nil
		}
		if _, ok := fr.f.widths[s]; !ok {
			return 0, fmt.Errorf("undeclared register %s", s)
		}
		return fr.regs[s], nil
	}
	if s != "" && (s[0] == '-' || (s[0] >= '0' && s[0] <= '9')) {
		if v, err := strconv.ParseInt(s, 0, 64); err == nil {
			return uint64(v), nil
		}
		return strconv.ParseUint(s, 0, 64)
	}
	if a, ok := fr.locals[s]; ok {
		return a, nil
	}
	if a, ok := e.globals[s]; ok {
		return a, nil
	}
	return 0, fmt.Errorf("unknown operand %q", s)
}

func (e *emu) set(fr *emuFrame, reg string, v uint64) error {
	w, ok := fr.f.widths[reg]
	if !ok {
		return fmt.Errorf("write to undeclared register %s", reg)
	}
	if w == 1 {
		v &= 1
	}
	fr.regs[reg] = mask(v, w)
	return nil
}

// address evaluates "[base+off]".
func (e *emu) address(fr *emuFrame, s string) (uint64, error) {
	if !strings.HasPrefix(s, "[") || !strings.HasSuffix(s, "]") {
		return 0, fmt.Errorf("bad address %q", s)
	}
	s = s[1 : len(s)-1]
	base, off, _ := strings.Cut(s, "+")
	v, err := e.val(fr, base)
	if err != nil {
		return 0, err
	}
	if off != "" {
		o, err := strconv.ParseInt(off, 0, 64)
		if err != nil {
			return 0, fmt.Errorf("bad offset %q", off)
		}
		v += uint64(o)
	}
	return v, nil
}

func cmpOp(cond, ty string, a, b uint64) (bool, error) {
	w := typeWidth(ty)
	signed := ty[0] == 's'
	a, b = mask(a, w), mask(b, w)
	if signed {
		x, y := int64(sext(a, w)), int64(sext(b, w))
		switch cond {
		case "eq":
			return x == y, nil
		case "ne":
			return x != y, nil
		case "lt":
			return x < y, nil
		case "le":
			return x <= y, nil
		case "gt":
			return x > y, nil
		case "ge":
			return x >= y, nil
		}
	} else {
		switch cond {
		case "eq":
			return a == b, nil
		case "ne":
			return a != b, nil
		case "lt":
			return a < b, nil
		case "le":
			return a <= b, nil
		case "gt":
			return a > b, nil
		case "ge":
			return a >= b, nil
		}
	}
	return false, fmt.Errorf("unknown comparison %s", cond)
}

func arith(op, ty string, a, b uint64) (uint64, error) {
	w := typeWidth(ty)
	signed := ty[0] == 's'
	a, b = mask(a, w), mask(b, w)
	switch op {
	case "add":
		return a + b, nil
	case "sub":
		return a - b, nil
	case "and":
		return a & b, nil
	case "or":
		return a | b, nil
	case "xor":
		return a ^ b, nil
	case "min", "max":
		less := a < b
		if signed {
			less = int64(sext(a, w)) < int64(sext(b, w))
		}
		if less == (op == "min") {
			return a, nil
		}
		return b, nil
	case "div", "rem":
		if b == 0 {
			return 0, errors.New("division by zero (undefined in PTX)")
		}
		if signed {
			x, y := int64(sext(a, w)), int64(sext(b, w))
			if y == -1 && x == int64(sext(1<<uint(w-1), w)) {
				return 0, errors.New("INT_MIN / -1 (undefined in PTX)")
			}
			if op == "div" {
				return uint64(x / y), nil
			}
			return uint64(x % y), nil
		}
		if op == "div" {
			return a / b, nil
		}
		return a % b, nil
	}
	return 0, fmt.Errorf("unknown operation %s", op)
}

func prmt(a, b, sel uint32) uint32 {
	src := uint64(a) | uint64(b)<<32
	var r uint32
	for i := 0; i < 4; i++ {
		n := (sel >> (4 * i)) & 0xf
		byteV := uint32(src>>(8*(n&7))) & 0xff
		if n&8 != 0 {
			if byteV&0x80 != 0 {
				byteV = 0xff
			} else {
				byteV = 0
			}
		}
		r |= byteV << (8 * i)
	}
	return r
}

// exec runs one statement; it returns a branch target or done (ret).
func (e *emu) exec(fr *emuFrame, s *emuStmt) (string, bool, error) {
	parts := strings.Split(s.op, ".")
	ty := parts[len(parts)-1]
	a := s.args
	v := func(i int) (uint64, error) { return e.val(fr, a[i]) }
	switch parts[0] {
	case "bra":
		return a[0], false, nil
	case "ret":
		return "", true, nil
	case "exit":
		e.exited = true
		return "", false, nil
	case "membar", "fence", "nanosleep":
		return "", false, nil
	case "mov":
		if strings.HasPrefix(a[0], "{") { // unpack
			regs := strings.Split(strings.Trim(a[0], "{}"), ",")
			x, err := v(1)
			if err != nil {
				return "", false, err
			}
			for i, r := range regs {
				if err := e.set(fr, strings.TrimSpace(r), x>>(32*i)); err != nil {
					return "", false, err
				}
			}
			return "", false, nil
		}
		if strings.HasPrefix(a[1], "{") { // pack
			regs := strings.Split(strings.Trim(a[1], "{}"), ",")
			var x uint64
			for i, r := range regs {
				y, err := e.val(fr, strings.TrimSpace(r))
				if err != nil {
					return "", false, err
				}
				x |= mask(y, 32) << (32 * i)
			}
			return "", false, e.set(fr, a[0], x)
		}
		x, err := v(1)
		if err != nil {
			return "", false, err
		}
		return "", false, e.set(fr, a[0], x)
	case "add", "sub", "and", "or", "xor", "min", "max", "div", "rem":
		if ty == "pred" {
			x, _ := v(1)
			y, _ := v(2)
			switch parts[0] {
			case "or":
				return "", false, e.set(fr, a[0], x|y)
			case "and":
				return "", false, e.set(fr, a[0], x&y)
			}
		}
		x, err := v(1)
		if err != nil {
			return "", false, err
		}
		y, err := v(2)
		if err != nil {
			return "", false, err
		}
		r, err := arith(parts[0], ty, x, y)
		if err != nil {
			return "", false, err
		}
		return "", false, e.set(fr, a[0], mask(r, typeWidth(ty)))
	case "mul", "mad":
		x, err := v(1)
		if err != nil {
			return "", false, err
		}
		y, err := v(2)
		if err != nil {
			return "", false, err
		}
		w := typeWidth(ty)
		var r uint64
		if parts[1] == "wide" {
			if ty[0] == 's' {
				r = uint64(int64(sext(mask(x, w), w)) * int64(sext(mask(y, w), w)))
			} else {
				r = mask(x, w) * mask(y, w)
			}
		} else {
			r = mask(mask(x, w)*mask(y, w), w)
		}
		if parts[0] == "mad" {
			z, err := v(3)
			if err != nil {
				return "", false, err
			}
			r += z
			if parts[1] != "wide" {
				r = mask(r, w)
			}
		}
		return "", false, e.set(fr, a[0], r)
	case "neg":
		x, err := v(1)
		if err != nil {
			return "", false, err
		}
		return "", false, e.set(fr, a[0], mask(-x, typeWidth(ty)))
	case "popc":
		x, err := v(1)
		if err != nil {
			return "", false, err
		}
		return "", false, e.set(fr, a[0], uint64(bits.OnesCount64(mask(x, typeWidth(ty)))))
	case "bfind":
		x, err := v(1)
		if err != nil {
			return "", false, err
		}
		x = mask(x, typeWidth(ty))
		if x == 0 {
			return "", false, e.set(fr, a[0], 0xffffffff)
		}
		return "", false, e.set(fr, a[0], uint64(63-bits.LeadingZeros64(x)))
	case "shl", "shr":
		x, err := v(1)
		if err != nil {
			return "", false, err
		}
		n, err := v(2)
		if err != nil {
			return "", false, err
		}
		w := typeWidth(ty)
		n = mask(n, 32)
		x = mask(x, w)
		var r uint64
		switch {
		case parts[0] == "shl":
			if n < uint64(w) {
				r = x << n
			}
		case ty[0] == 's':
			if n >= uint64(w) {
				n = uint64(w - 1)
			}
			r = uint64(int64(sext(x, w)) >> n)
		default:
			if n < uint64(w) {
				r = x >> n
			}
		}
		return "", false, e.set(fr, a[0], mask(r, w))
	case "cvt":
		x, err := v(1)
		if err != nil {
			return "", false, err
		}
		src := parts[len(parts)-1]
		w := typeWidth(src)
		x = mask(x, w)
		if src[0] == 's' {
			x = sext(x, w)
		}
		return "", false, e.set(fr, a[0], mask(x, typeWidth(parts[1])))
	case "cvta":
		x, err := v(1)
		if err != nil {
			return "", false, err
		}
		return "", false, e.set(fr, a[0], x)
	case "setp":
		x, err := v(1)
		if err != nil {
			return "", false, err
		}
		y, err := v(2)
		if err != nil {
			return "", false, err
		}
		r, err := cmpOp(parts[1], ty, x, y)
		if err != nil {
			return "", false, err
		}
		if len(parts) == 4 {
			c, err := v(3)
			if err != nil {
				return "", false, err
			}
			switch parts[2] {
			case "and":
				r = r && c != 0
			case "or":
				r = r || c != 0
			default:
				return "", false, fmt.Errorf("unknown setp bool op %s", parts[2])
			}
		}
		var b uint64
		if r {
			b = 1
		}
		return "", false, e.set(fr, a[0], b)
	case "selp":
		x, _ := v(1)
		y, _ := v(2)
		p, err := v(3)
		if err != nil {
			return "", false, err
		}
		if p != 0 {
			return "", false, e.set(fr, a[0], x)
		}
		return "", false, e.set(fr, a[0], y)
	case "prmt":
		x, _ := v(1)
		y, _ := v(2)
		c, err := v(3)
		if err != nil {
			return "", false, err
		}
		return "", false, e.set(fr, a[0], uint64(prmt(uint32(x), uint32(y), uint32(c))))
	case "activemask":
		return "", false, e.set(fr, a[0], 1)
	case "match": // match.all.sync d|p, a, mask: one active lane agrees with itself
		d, pr, ok := strings.Cut(a[0], "|")
		if !ok {
			return "", false, fmt.Errorf("match without a predicate: %q", a[0])
		}
		if err := e.set(fr, d, 1); err != nil {
			return "", false, err
		}
		return "", false, e.set(fr, pr, 1)
	case "redux", "shfl": // one active lane: the lane's own value
		x, err := v(1)
		if err != nil {
			return "", false, err
		}
		return "", false, e.set(fr, a[0], x)
	case "isspacep":
		x, err := v(1)
		if err != nil {
			return "", false, err
		}
		r, _, err := e.region(x, 1)
		local := err == nil && r.local
		var b uint64
		if local {
			b = 1
		}
		return "", false, e.set(fr, a[0], b)
	case "ld", "st":
		return "", false, e.ldst(fr, parts, a)
	case "atom", "red":
		return "", false, e.atomic(fr, parts, a)
	case "call":
		return "", false, e.doCall(fr, a)
	}
	return "", false, fmt.Errorf("unsupported instruction %s", s.op)
}

func (e *emu) ldst(fr *emuFrame, parts []string, a []string) error {
	ty := parts[len(parts)-1]
	w := typeWidth(ty)
	if parts[1] == "param" {
		name := strings.Trim(a[0], "[]")
		if parts[0] == "ld" {
			name = strings.Trim(a[1], "[]")
			return e.set(fr, a[0], fr.params[name])
		}
		x, err := e.val(fr, a[1])
		if err != nil {
			return err
		}
		fr.params[name] = x
		return nil
	}
	checkSpace := func(addr uint64) error { return e.checkSpace(parts, addr, w/8) }
	if n := vecLen(parts); n > 1 {
		return e.ldstVec(fr, parts, a, n, w/8)
	}
	if parts[0] == "ld" {
		addr, err := e.address(fr, a[1])
		if err != nil {
			return err
		}
		if err := checkSpace(addr); err != nil {
			return err
		}
		x, err := e.read(addr, w/8)
		if err != nil {
			return err
		}
		if ty[0] == 's' {
			x = sext(x, w)
		}
		return e.set(fr, a[0], x)
	}
	addr, err := e.address(fr, a[0])
	if err != nil {
		return err
	}
	if err := checkSpace(addr); err != nil {
		return err
	}
	x, err := e.val(fr, a[1])
	if err != nil {
		return err
	}
	return e.write(addr, w/8, mask(x, w))
}

// vecLen is the element count of a vector access (.v2, .v4), else 1.
func vecLen(parts []string) int {
	for _, p := range parts {
		switch p {
		case "v2":
			return 2
		case "v4":
			return 4
		}
	}
	return 1
}

// ldstVec runs a vector ld or st of n elements of size bytes: the whole
// vector must be aligned to its size, as on the hardware.
func (e *emu) ldstVec(fr *emuFrame, parts []string, a []string, n, size int) error {
	ai, ri := 0, 1
	if parts[0] == "ld" {
		ai, ri = 1, 0
	}
	addr, err := e.address(fr, a[ai])
	if err != nil {
		return err
	}
	if addr%uint64(n*size) != 0 {
		return fmt.Errorf("misaligned %d-byte vector %s at %#x", n*size, parts[0], addr)
	}
	if err := e.checkSpace(parts, addr, n*size); err != nil {
		return err
	}
	regs := strings.Split(strings.Trim(a[ri], "{}"), ",")
	if len(regs) != n {
		return fmt.Errorf("vector of %d elements, %d operands %q", n, len(regs), a[ri])
	}
	for k, r := range regs {
		r, at := strings.TrimSpace(r), addr+uint64(k*size)
		if parts[0] == "ld" {
			x, err := e.read(at, size)
			if err == nil {
				err = e.set(fr, r, x)
			}
			if err != nil {
				return err
			}
			continue
		}
		x, err := e.val(fr, r)
		if err == nil {
			err = e.write(at, size, mask(x, size*8))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkSpace checks that an access of n bytes at addr in the state space
// its opcode names (parts[1]) lands there: a .local access in local memory
// (the compiler addresses stack slots directly), a .shared one in a .shared
// variable (the compiler addresses per-block map values in the shared
// space when the verifier proves them so), a .const one (a load) in a
// .const variable, a .global one elsewhere but in .const variables.
func (e *emu) checkSpace(parts []string, addr uint64, n int) error {
	switch parts[1] {
	case "local":
		if r, _, err := e.region(addr, n); err == nil && !r.local {
			return fmt.Errorf("%s.local at %#x outside local memory", parts[0], addr)
		}
	case "shared":
		if r, _, err := e.region(addr, n); err == nil && !r.shared {
			return fmt.Errorf("%s.shared at %#x outside shared memory (in %s)", parts[0], addr, r.name)
		}
	case "const":
		if r, _, err := e.region(addr, n); parts[0] != "ld" || err != nil || !r.konst {
			return fmt.Errorf("%s.const at %#x outside a .const variable", parts[0], addr)
		}
	case "global":
		if r, _, err := e.region(addr, n); err == nil && (r.shared || r.local || r.konst) {
			return fmt.Errorf("%s.global at %#x outside global memory (in %s)", parts[0], addr, r.name)
		}
	default: // generic: the constant space has no generic addresses
		if r, _, err := e.region(addr, n); err == nil && r.konst {
			return fmt.Errorf("generic %s at %#x in .const variable %s", parts[0], addr, r.name)
		}
	}
	return nil
}

func (e *emu) atomic(fr *emuFrame, parts []string, a []string) error {
	ty := parts[len(parts)-1]
	op := parts[len(parts)-2]
	w := typeWidth(ty)
	ai, vi := 1, 2
	if parts[0] == "red" {
		ai, vi = 0, 1
	}
	addr, err := e.address(fr, a[ai])
	if err != nil {
		return err
	}
	if r, _, err := e.region(addr, w/8); err == nil && r.local {
		return fmt.Errorf("atomic on .local memory at %#x (undefined in PTX)", addr)
	}
	if err := e.checkSpace(parts, addr, w/8); err != nil {
		return err
	}
	old, err := e.read(addr, w/8)
	if err != nil {
		return err
	}
	x, err := e.val(fr, a[vi])
	if err != nil {
		return err
	}
	var nv uint64
	switch op {
	case "add":
		nv = old + x
	case "and":
		nv = old & x
	case "or":
		nv = old | x
	case "xor":
		nv = old ^ x
	case "exch":
		nv = x
	case "max", "min": // unsigned (the only kinds generated code uses)
		nv = old
		if (op == "max") == (mask(x, w) > mask(old, w)) {
			nv = x
		}
	case "cas":
		y, err := e.val(fr, a[3])
		if err != nil {
			return err
		}
		nv = old
		if mask(old, w) == mask(x, w) {
			nv = y
		}
	default:
		return fmt.Errorf("unknown atomic %s", op)
	}
	if err := e.write(addr, w/8, mask(nv, w)); err != nil {
		return err
	}
	if parts[0] == "atom" {
		return e.set(fr, a[0], old)
	}
	return nil
}

// doCall handles `call (rv), name, (a0, ...)` and `call name, (a0, ...)`.
func (e *emu) doCall(fr *emuFrame, a []string) error {
	ret := ""
	if strings.HasPrefix(a[0], "(") {
		ret, a = strings.Trim(a[0], "()"), a[1:]
	}
	var args []uint64
	for _, p := range strings.Split(strings.Trim(a[1], "()"), ",") {
		if p = strings.TrimSpace(p); p != "" {
			args = append(args, fr.params[p])
		}
	}
	r, err := e.call(a[0], args)
	if err != nil {
		return err
	}
	if ret != "" {
		fr.params[ret] = r
	}
	return nil
}
