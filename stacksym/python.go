package stacksym

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"

	"github.com/gpuprobe/gpuprobe/record"
)

// codeLayout is where a CPython version keeps a code object's fields
// (checked against each version's headers by python_test.go).
type codeLayout struct {
	filename, name, qualname, firstlineno, linetable, adaptive int // qualname, adaptive: -1 in 3.10
	ascii, compact                                             int // sizeof PyASCIIObject, PyCompactUnicodeObject
}

// codeLayouts are the supported versions' layouts, by major << 8 | minor.
var codeLayouts = map[uint16]codeLayout{
	0x030a: {104, 112, -1, 40, 120, -1, 48, 72},
	0x030b: {112, 120, 128, 72, 136, 184, 48, 72},
	0x030c: {112, 120, 128, 68, 136, 192, 40, 56},
	0x030d: {112, 120, 128, 68, 136, 200, 40, 56},
}

// Bounds of the reads of one code object.
const (
	maxString    = 4096
	maxLinetable = 1 << 16
)

// codeInfo is what a code object resolves to.
type codeInfo struct {
	name, file string
	first      int
	table      []byte
	ok         bool
}

// Python resolves the Python frames of process pid (interpreter version
// ver, as in record.Stack), appending to out. A code object that cannot
// be read, or is not a code object, gives a frame with its address only.
func (r *Resolver) Python(pid uint32, ver uint16, frames []record.PyFrame, out []Frame) []Frame {
	p := r.procOf(pid)
	L, known := codeLayouts[ver]
	for _, pf := range frames {
		f := Frame{Addr: pf.Code, Python: true}
		if known {
			if ci := r.code(pid, p, &L, pf.Code); ci.ok {
				f.Function, f.File = ci.name, ci.file
				unit := int64(pf.Instr)
				if L.adaptive >= 0 {
					unit = (int64(pf.Instr) - int64(pf.Code) - int64(L.adaptive)) / 2
				}
				f.Line = lineOf(ver, ci, unit)
			}
		}
		out = append(out, f)
	}
	return out
}

// code reads (once) the code object at addr of process p.
func (r *Resolver) code(pid uint32, p *proc, L *codeLayout, addr uint64) *codeInfo {
	if ci := p.code[addr]; ci != nil {
		return ci
	}
	if p.mem == nil {
		f, err := os.Open(filepath.Join(r.root(), strconv.Itoa(int(pid)), "mem"))
		if err != nil {
			return &codeInfo{}
		}
		p.mem = f
	}
	if len(p.code) >= maxCodeCached || p.codeBytes >= maxCodeBytes {
		clear(p.code)
		p.codeBytes = 0
	}
	ci := readCode(p.mem, L, addr)
	p.code[addr] = ci
	p.codeBytes += len(ci.table) + len(ci.name) + len(ci.file)
	return ci
}

// mem reads a process's memory; every read is checked.
type mem struct{ f *os.File }

func (m mem) u64(a uint64) (uint64, bool) {
	var b [8]byte
	if _, err := m.f.ReadAt(b[:], int64(a)); err != nil {
		return 0, false
	}
	return binary.LittleEndian.Uint64(b[:]), true
}

func (m mem) bytes(a uint64, n int) ([]byte, bool) {
	b := make([]byte, n)
	if _, err := m.f.ReadAt(b, int64(a)); err != nil {
		return nil, false
	}
	return b, true
}

// typeName reads the tp_name of the object at a's type.
func (m mem) typeName(a uint64) string {
	t, ok := m.u64(a + 8)
	if !ok {
		return ""
	}
	n, ok := m.u64(t + 24)
	if !ok {
		return ""
	}
	b, ok := m.bytes(n, 16)
	if !ok {
		return ""
	}
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return ""
}

func readCode(f *os.File, L *codeLayout, addr uint64) *codeInfo {
	m := mem{f}
	ci := &codeInfo{}
	if m.typeName(addr) != "code" {
		return ci
	}
	nameAt := L.qualname
	if nameAt < 0 {
		nameAt = L.name
	}
	get := func(off int) uint64 { v, _ := m.u64(addr + uint64(off)); return v }
	ci.name, ci.file = m.str(L, get(nameAt)), m.str(L, get(L.filename))
	ci.first = int(int32(get(L.firstlineno)))
	if t := get(L.linetable); t != 0 && m.typeName(t) == "bytes" {
		if n, ok := m.u64(t + 16); ok && n <= maxLinetable {
			ci.table, _ = m.bytes(t+32, int(n))
		}
	}
	ci.ok = ci.name != "" || ci.file != ""
	return ci
}

// str reads a str object (compact: its characters follow the header).
func (m mem) str(L *codeLayout, a uint64) string {
	if a == 0 || m.typeName(a) != "str" {
		return ""
	}
	n, ok1 := m.u64(a + 16)
	state, ok2 := m.u64(a + 32)
	if !ok1 || !ok2 || n > maxString {
		return ""
	}
	kind, compact, ascii := int(state>>2&7), state>>5&1 == 1, state>>6&1 == 1
	if !compact || kind == 0 {
		return ""
	}
	data := a + uint64(L.compact)
	if ascii {
		data = a + uint64(L.ascii)
	}
	b, ok := m.bytes(data, int(n)*kind)
	if !ok {
		return ""
	}
	rs := make([]rune, n)
	for i := range rs {
		switch kind {
		case 1:
			rs[i] = rune(b[i])
		case 2:
			rs[i] = rune(binary.LittleEndian.Uint16(b[2*i:]))
		default:
			rs[i] = rune(binary.LittleEndian.Uint32(b[4*i:]))
		}
	}
	return string(rs)
}

// lineOf returns the line of code unit unit (0 when unknown).
func lineOf(ver uint16, ci *codeInfo, unit int64) int {
	if unit < 0 {
		return 0
	}
	if ver < 0x030b {
		return line310(ci.table, ci.first, 2*unit)
	}
	return line311(ci.table, ci.first, unit)
}

// line310 reads 3.10's line table: (bytes, signed line delta) pairs;
// delta -128: no line.
func line310(t []byte, line int, off int64) int {
	var start int64
	for i := 0; i+1 < len(t); i += 2 {
		end := start + int64(t[i])
		d := int8(t[i+1])
		l := -1
		if d != -128 {
			line += int(d)
			l = line
		}
		if off >= start && off < end {
			return max(l, 0)
		}
		start = end
	}
	return 0
}

// line311 reads the location table of 3.11+ (Objects/locations.md):
// entries of a first byte 1CCCCLLL (code C, L+1 code units), then the
// code's operands.
func line311(t []byte, line int, unit int64) int {
	var at int64
	i := 0
	varint := func() uint64 {
		var v uint64
		for s := 0; i < len(t) && s < 64; s += 6 {
			b := t[i]
			i++
			v |= uint64(b&63) << s
			if b&64 == 0 {
				break
			}
		}
		return v
	}
	for i < len(t) {
		b := t[i]
		i++
		code, n := int(b>>3&15), int64(b&7)+1
		delta, none := 0, false
		switch {
		case code == 15:
			none = true
		case code == 14 || code == 13:
			u := varint()
			if u&1 != 0 {
				delta = -int(u >> 1)
			} else {
				delta = int(u >> 1)
			}
			if code == 14 {
				varint()
				varint()
				varint()
			}
		case code >= 10:
			delta = code - 10
			i += 2
		default:
			i++
		}
		line += delta
		if unit >= at && unit < at+n {
			if none {
				return 0
			}
			return line
		}
		at += n
	}
	return 0
}
