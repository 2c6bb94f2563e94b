package ptx

// A small PTX interpreter for the subset this package emits. It is the
// test oracle for generated code on machines without a GPU: the
// conformance programs run through their PTX here and must give the
// expected r0. It is strict where the hardware is unforgiving: a
// misaligned access, an atomic on .local memory, an access outside any
// allocation, or a division that PTX leaves undefined (by zero, INT_MIN by
// -1) is an error, not a value.

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/gpuprobe/gpuprobe/jit"
)

type emuStmt struct {
	line  int
	pred  string // "" or "%p0"
	neg   bool   // @!%p
	op    string // "add.s64"
	args  []string
	label string // for label lines
}

type emuFunc struct {
	name   string
	ret    string
	params []string
	body   []emuStmt
	labels map[string]int
	widths map[string]int
	locals []emuLocal
}

type emuLocal struct {
	name string
	size int
}

type emuRegion struct {
	base   uint64
	data   []byte
	local  bool
	shared bool // a .shared variable
	konst  bool // a .const variable
	name   string
}

// emu is a module plus memory and the state of one thread.
type emu struct {
	funcs   map[string]*emuFunc
	globals map[string]uint64
	mem     []*emuRegion
	next    uint64
	timer   uint64 // %globaltimer, advances 1000 ns per read
	steps   int
	exited  bool
	// hook runs on every %globaltimer read (a stand-in for a host thread).
	hook func(e *emu)
	// geom overrides special registers (e.g. "%ctaid.y"); the rest read
	// as one thread of a one-block grid.
	geom map[string]uint64
}

var (
	emuHeaderRe = regexp.MustCompile(`^(?:\.visible )?\.(?:func|entry) (?:\(\.param \.b64 (\w+)\) )?([\w$]+)\((.*)\)$`)
	emuRegRe    = regexp.MustCompile(`^\.reg \.(\w+) (%[\w$]+)(?:<(\d+)>)?$`)
	emuLocalRe  = regexp.MustCompile(`^\.local \.align \d+ \.b(\d+) ([\w$]+)(?:\[(\d+)\])?$`)
	emuSharedRe = regexp.MustCompile(`^\.shared \.align 8 \.b8 ([\w$]+)\[(\d+)\]$`)
)

// newEmu parses a module written by this package.
func newEmu(module string) (*emu, error) {
	e := &emu{funcs: map[string]*emuFunc{}, globals: map[string]uint64{}, next: 0x10000}
	lines := strings.Split(module, "\n")
	var f *emuFunc
	for n, raw := range lines {
		line := strings.TrimSpace(raw)
		switch {
		case line == "" || strings.HasPrefix(line, "//"):
		case f == nil && strings.HasPrefix(line, ".global"):
			fields := strings.Fields(strings.TrimSuffix(line, ";"))
			name := fields[len(fields)-1]
			e.globals[name] = e.alloc(8, false, name).base
		case f == nil && strings.HasPrefix(line, ".const"):
			// The injector's globals (GlobalDecl): the test writes them,
			// the code may only read them with ld.const.
			fields := strings.Fields(strings.TrimSuffix(line, ";"))
			name := fields[len(fields)-1]
			r := e.alloc(8, false, name)
			r.konst = true
			e.globals[name] = r.base
		case f == nil && strings.HasPrefix(line, ".shared"):
			// One thread runs, so one block: the variable is a plain
			// (non-.local) allocation whose generic address is its own.
			m := emuSharedRe.FindStringSubmatch(strings.TrimSuffix(line, ";"))
			if m == nil {
				return nil, fmt.Errorf("line %d: bad .shared %q", n+1, line)
			}
			if _, dup := e.globals[m[1]]; dup {
				return nil, fmt.Errorf("line %d: %s declared twice", n+1, m[1])
			}
			size, _ := strconv.Atoi(m[2])
			r := e.alloc(size, false, m[1])
			r.shared = true
			e.globals[m[1]] = r.base
		case f == nil && (strings.HasPrefix(line, ".func") || strings.HasPrefix(line, ".visible")):
			if strings.HasSuffix(line, ";") {
				continue // prototype
			}
			m := emuHeaderRe.FindStringSubmatch(line)
			if m == nil {
				return nil, fmt.Errorf("line %d: bad header %q", n+1, line)
			}
			f = &emuFunc{name: m[2], ret: m[1], labels: map[string]int{}, widths: map[string]int{}}
			for _, p := range strings.Split(m[3], ",") {
				if p = strings.TrimSpace(p); p != "" {
					fs := strings.Fields(p)
					f.params = append(f.params, fs[len(fs)-1])
				}
			}
		case f == nil && strings.HasPrefix(line, "."):
		case f != nil && line == "{" && raw == "{":
		case f != nil && raw == "}":
			e.funcs[f.name] = f
			f = nil
		case f != nil && (line == "{" || line == "}"):
		case f != nil && strings.HasSuffix(line, ":"):
			f.labels[strings.TrimSuffix(line, ":")] = len(f.body)
		case f != nil && strings.HasPrefix(line, ".reg"):
			m := emuRegRe.FindStringSubmatch(strings.TrimSuffix(line, ";"))
			if m == nil {
				return nil, fmt.Errorf("line %d: bad .reg %q", n+1, line)
			}
			w := 64
			switch {
			case m[1] == "pred":
				w = 1
			case strings.HasSuffix(m[1], "32"):
				w = 32
			}
			if m[3] == "" {
				f.widths[m[2]] = w
			} else {
				k, _ := strconv.Atoi(m[3])
				for i := 0; i < k; i++ {
					f.widths[m[2]+strconv.Itoa(i)] = w
				}
			}
		case f != nil && strings.HasPrefix(line, ".local"):
			m := emuLocalRe.FindStringSubmatch(strings.TrimSuffix(line, ";"))
			if m == nil {
				return nil, fmt.Errorf("line %d: bad .local %q", n+1, line)
			}
			bitsz, _ := strconv.Atoi(m[1])
			cnt := 1
			if m[3] != "" {
				cnt, _ = strconv.Atoi(m[3])
			}
			f.locals = append(f.locals, emuLocal{m[2], cnt * bitsz / 8})
		case f != nil && strings.HasPrefix(line, ".param"):
		case f != nil:
			s, err := parseStmt(strings.TrimSuffix(line, ";"))
			if err != nil {
				return nil, fmt.Errorf("line %d: %v", n+1, err)
			}
			s.line = n + 1
			f.body = append(f.body, s)
		default:
			return nil, fmt.Errorf("line %d: unexpected %q", n+1, line)
		}
	}
	return e, nil
}

func parseStmt(s string) (emuStmt, error) {
	var st emuStmt
	if strings.HasPrefix(s, "@") {
		p, rest, _ := strings.Cut(s, " ")
		p = p[1:]
		if strings.HasPrefix(p, "!") {
			st.neg, p = true, p[1:]
		}
		st.pred, s = p, rest
	}
	op, rest, _ := strings.Cut(s, " ")
	st.op = op
	depth, start := 0, 0
	for i := 0; i < len(rest); i++ {
		switch rest[i] {
		case '[', '{', '(':
			depth++
		case ']', '}', ')':
			depth--
		case ',':
			if depth == 0 {
				st.args = append(st.args, strings.TrimSpace(rest[start:i]))
				start = i + 1
			}
		}
	}
	if r := strings.TrimSpace(rest[start:]); r != "" {
		st.args = append(st.args, r)
	}
	if st.op == "" {
		return st, errors.New("empty statement")
	}
	return st, nil
}

// alloc maps n zeroed bytes at a fresh 256-aligned address.
func (e *emu) alloc(n int, local bool, name string) *emuRegion {
	r := &emuRegion{base: e.next, data: make([]byte, n), local: local, name: name}
	e.next += (uint64(n) + 0x1ff) &^ 0xff
	e.mem = append(e.mem, r)
	return r
}

func (e *emu) region(addr uint64, n int) (*emuRegion, []byte, error) {
	for _, r := range e.mem {
		if addr >= r.base && addr+uint64(n) <= r.base+uint64(len(r.data)) {
			return r, r.data[addr-r.base : addr-r.base+uint64(n)], nil
		}
	}
	return nil, nil, fmt.Errorf("access of %d bytes at %#x: not mapped", n, addr)
}

func (e *emu) read(addr uint64, n int) (uint64, error) {
	if addr%uint64(n) != 0 {
		return 0, fmt.Errorf("misaligned %d-byte load at %#x", n, addr)
	}
	_, b, err := e.region(addr, n)
	if err != nil {
		return 0, err
	}
	var v uint64
	for i := n - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v, nil
}

func (e *emu) write(addr uint64, n int, v uint64) error {
	if addr%uint64(n) != 0 {
		return fmt.Errorf("misaligned %d-byte store at %#x", n, addr)
	}
	_, b, err := e.region(addr, n)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		b[i] = byte(v >> (8 * i))
	}
	return nil
}

type emuFrame struct {
	f      *emuFunc
	regs   map[string]uint64
	params map[string]uint64
	locals map[string]uint64
}

// call runs function name with the given parameter values and returns the
// value it stored in its return parameter.
func (e *emu) call(name string, args []uint64) (uint64, error) {
	f := e.funcs[name]
	if f == nil {
		return 0, fmt.Errorf("call of unknown function %q", name)
	}
	if len(args) != len(f.params) {
		return 0, fmt.Errorf("%s: %d arguments for %d params", name, len(args), len(f.params))
	}
	fr := &emuFrame{f: f, regs: map[string]uint64{}, params: map[string]uint64{}, locals: map[string]uint64{}}
	for i, p := range f.params {
		fr.params[p] = args[i]
	}
	for _, l := range f.locals {
		if l.name == "__stack" && l.size <= jit.StackSize {
			// The frame ends where a whole eBPF stack would: r10
			// (__stack + its size) is the same address whatever size the
			// compiler gave the frame, so a program that computes with
			// r10's value runs the same with and without the verifier's
			// frame sizes; an access below the frame still faults.
			e.next += uint64(jit.StackSize - l.size)
		}
		fr.locals[l.name] = e.alloc(l.size, true, f.name+"."+l.name).base
	}
	for pc := 0; pc < len(f.body); {
		if e.steps++; e.steps > 50_000_000 {
			return 0, errors.New("step limit")
		}
		s := &f.body[pc]
		pc++
		if s.pred != "" {
			v, ok := fr.regs[s.pred]
			if (v != 0) == s.neg {
				continue
			}
			_ = ok
		}
		target, done, err := e.exec(fr, s)
		if err != nil {
			return 0, fmt.Errorf("%s line %d (%s %s): %w", f.name, s.line, s.op, strings.Join(s.args, ", "), err)
		}
		if e.exited {
			return 0, nil
		}
		if done {
			return fr.params[f.ret], nil
		}
		if target != "" {
			t, ok := f.labels[target]
			if !ok {
				return 0, fmt.Errorf("%s line %d: no label %s", f.name, s.line, target)
			}
			pc = t
		}
	}
	return fr.params[f.ret], nil
}
