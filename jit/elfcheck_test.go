package jit_test

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/jit"
)

// object is a testdata object being corrupted by a test case.
type object struct {
	t    *testing.T
	data []byte
	f    *elf.File
}

func loadObject(t *testing.T, name string) *object {
	t.Helper()
	data, err := os.ReadFile(bpfObject(t, name))
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	return &object{t: t, data: data, f: f}
}

// sec returns the index of the named section and the file offset of its
// header.
func (o *object) sec(name string) (int, int) {
	for i, s := range o.f.Sections {
		if s.Name == name {
			return i, int(binary.LittleEndian.Uint64(o.data[40:])) + i*64
		}
	}
	o.t.Fatalf("no section %q", name)
	return 0, 0
}

// secData returns the file offset of the named section's contents.
func (o *object) secData(name string) int {
	i, _ := o.sec(name)
	return int(o.f.Sections[i].Offset)
}

// sym returns the file offset of the named symbol's entry.
func (o *object) sym(name string) int {
	syms, err := o.f.Symbols()
	if err != nil {
		o.t.Fatal(err)
	}
	for i, s := range syms {
		if s.Name == name {
			return o.secData(".symtab") + (i+1)*24 // Symbols() skips entry 0
		}
	}
	o.t.Fatalf("no symbol %q", name)
	return 0
}

// put stores the low width bytes of v at off.
func (o *object) put(off, width int, v uint64) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	copy(o.data[off:off+width], b[:width])
}

// at is the text an ELFError gives for a file offset.
func at(off int) string { return fmt.Sprintf("file offset %#x", off) }

// Section header fields: offsets within the 64-byte header.
const (
	shName, shType, shFlags, shOffset, shSize, shLink, shInfo, shEntsize = 0, 4, 8, 24, 32, 40, 44, 56
)

func TestLoadELFMalformed(t *testing.T) {
	tests := []struct {
		name   string
		object string
		// corrupt changes the object and returns what the error must say
		// besides want.
		corrupt func(o *object) []string
		want    []string
	}{
		{"type", "threadhist", func(o *object) []string { o.put(16, 2, uint64(elf.ET_EXEC)); return []string{at(16)} },
			[]string{"want ET_REL"}},
		{"machine", "threadhist", func(o *object) []string { o.put(18, 2, uint64(elf.EM_X86_64)); return []string{at(18)} },
			[]string{"EM_X86_64", "want EM_BPF"}},
		{"32-bit", "threadhist", func(o *object) []string { o.data[elf.EI_CLASS] = byte(elf.ELFCLASS32); return nil },
			[]string{"ELFCLASS32", "want ELFCLASS64"}},
		{"program headers", "threadhist", func(o *object) []string { o.put(56, 2, 3); return []string{at(56)} },
			[]string{"3 program headers"}},
		{"extended numbering", "threadhist", func(o *object) []string { o.put(60, 2, 0); return nil },
			[]string{"extended section numbering"}},
		{"too many sections", "threadhist", func(o *object) []string { o.put(60, 2, 5000); return nil },
			[]string{"5000 sections exceed the limit of 4096"}},
		{"header table outside", "threadhist", func(o *object) []string { o.put(40, 8, uint64(len(o.data))-64); return []string{at(40)} },
			[]string{"section header table", "lies outside"}},
		{"header size", "threadhist", func(o *object) []string { o.put(58, 2, 40); return nil },
			[]string{"section header size 40, want 64"}},
		{"name table index", "threadhist", func(o *object) []string { o.put(62, 2, 999); return []string{at(62)} },
			[]string{"section name table index 999 out of range"}},
		{"section outside", "callfunc", func(o *object) []string {
			_, h := o.sec(".maps")
			o.put(h+shSize, 8, 1<<40)
			return []string{`section 6 ".maps"`, at(h)}
		}, []string{"lies outside the"}},
		{"section offset overflows", "callfunc", func(o *object) []string {
			_, h := o.sec(".BTF")
			o.put(h+shOffset, 8, ^uint64(0)-8)
			return []string{`".BTF"`, at(h)}
		}, []string{"lies outside the"}},
		{"nobits too big", "callfunc", func(o *object) []string {
			_, h := o.sec(".debug_str")
			o.put(h+shType, 4, uint64(elf.SHT_NOBITS))
			o.put(h+shSize, 8, 1<<32)
			return []string{`".debug_str"`, at(h)}
		}, []string{"SHT_NOBITS size 4294967296 exceeds"}},
		{"section name", "callfunc", func(o *object) []string {
			_, h := o.sec(".maps")
			o.put(h+shName, 4, 1<<20)
			return []string{"section 6 at " + at(h)}
		}, []string{"string offset 1048576 outside"}},
		{"compressed BTF", "callfunc", func(o *object) []string {
			_, h := o.sec(".BTF")
			o.put(h+shFlags, 8, uint64(elf.SHF_COMPRESSED))
			return []string{`".BTF"`}
		}, []string{"compressed sections are only supported for debug info"}},
		{"second symtab", "callfunc", func(o *object) []string {
			_, h := o.sec(".debug_frame")
			o.put(h+shType, 4, uint64(elf.SHT_SYMTAB))
			o.put(h+shEntsize, 8, 24)
			o.put(h+shSize, 8, 48)
			o.put(h+shLink, 4, 1)
			return []string{`".symtab"`}
		}, []string{"second symbol table (the first is section 22)"}},
		{"symbol entry size", "callfunc", func(o *object) []string {
			_, h := o.sec(".symtab")
			o.put(h+shEntsize, 8, 16)
			return []string{at(h)}
		}, []string{"symbol entry size 16, want 24"}},
		{"symbol name", "callfunc", func(o *object) []string {
			e := o.sym("mixed")
			o.put(e, 4, 0xfffff)
			return []string{`".symtab"`, at(e)}
		}, []string{"symbol 16: name: string offset 1048575 outside"}},
		{"symbol section", "callfunc", func(o *object) []string {
			e := o.sym("mixed")
			o.put(e+6, 2, 300)
			return []string{at(e)}
		}, []string{`"mixed": section index 300 out of range (29 sections)`}},
		{"extended symbol section", "callfunc", func(o *object) []string {
			e := o.sym("mixed")
			o.put(e+6, 2, uint64(elf.SHN_XINDEX))
			return []string{at(e)}
		}, []string{"SHN_XINDEX"}},
		{"function outside its section", "callfunc", func(o *object) []string {
			e := o.sym("callfunc")
			o.put(e+16, 8, 1<<31)
			return []string{at(e)}
		}, []string{`function "callfunc" [0x0, +0x80000000) lies outside section 4`}},
		{"overlapping functions", "callfunc", func(o *object) []string {
			e := o.sym("LBB1_2") // a jump label at 0x60 inside mix, made a function
			o.data[e+4] = byte(elf.STB_LOCAL)<<4 | byte(elf.STT_FUNC)
			o.put(e+16, 8, 0x30)
			return []string{at(e)}
		}, []string{"symbol 5 at 0x60 overlaps symbol 4 [0x0, +0x90)", `section 2 ".text"`}},
		{"relocation entry size", "callfunc", func(o *object) []string {
			_, h := o.sec(".rel.text")
			o.put(h+shEntsize, 8, 24)
			return []string{`".rel.text"`, at(h)}
		}, []string{"relocation entry size 24, want 16"}},
		{"relocated section", "callfunc", func(o *object) []string {
			_, h := o.sec(".rel.text")
			o.put(h+shInfo, 4, 77)
			return []string{at(h)}
		}, []string{"relocated section 77 out of range"}},
		{"relocation symbol", "callfunc", func(o *object) []string {
			r := o.secData(".rel.text")
			o.put(r+12, 4, 5000)
			return []string{`".rel.text"`, at(r)}
		}, []string{"relocation 0: symbol 5000 out of range (18 symbols)"}},
		{"relocation without symbol", "callfunc", func(o *object) []string {
			r := o.secData(".relkprobe/_Z9vectorAddPKfS0_Pf") + 16
			o.put(r+12, 4, 0)
			return []string{at(r)}
		}, []string{"relocation 1: no symbol"}},
		{"relocation offset", "callfunc", func(o *object) []string {
			r := o.secData(".rel.text")
			o.put(r, 8, 0x90)
			return []string{at(r)}
		}, []string{`offset 0x90 outside section 2 ".text" (144 bytes)`}},
		{"BTF magic", "callfunc", func(o *object) []string {
			b := o.secData(".BTF")
			o.put(b, 2, 0x9feb)
			return []string{`".BTF"`, at(b)}
		}, []string{"magic 0x9feb, want 0xeb9f"}},
		{"BTF header length", "callfunc", func(o *object) []string {
			o.put(o.secData(".BTF")+4, 4, 1<<30)
			// The bound is the section size, which depends on the source path
			// clang records in BTF.
			return []string{fmt.Sprintf("header length 1073741824 outside [24, %d]", o.f.Section(".BTF").Size)}
		}, nil},
		{"BTF string section", "callfunc", func(o *object) []string {
			o.put(o.secData(".BTF")+20, 4, 0xffffff00)
			return []string{fmt.Sprintf("extends past the %d bytes after the header", o.f.Section(".BTF").Size-24)}
		}, []string{"string section"}},
		{"BTF type section", "callfunc", func(o *object) []string {
			o.put(o.secData(".BTF")+8, 4, 0xffffff00)
			return nil
		}, []string{"type section [4294967040, +"}},
		{"BTF.ext version", "callfunc", func(o *object) []string {
			o.data[o.secData(".BTF.ext")+2] = 7
			return []string{`".BTF.ext"`}
		}, []string{"version 7, want 1"}},
		{"BTF.ext line_info length", "callfunc", func(o *object) []string {
			o.put(o.secData(".BTF.ext")+20, 4, 1<<31)
			return nil
		}, []string{"line_info [", "+2147483648) extends past"}},
		{"BTF.ext record size", "callfunc", func(o *object) []string {
			b := o.secData(".BTF.ext")
			funcInfo := b + int(binary.LittleEndian.Uint32(o.data[b+4:])) + int(binary.LittleEndian.Uint32(o.data[b+8:]))
			o.put(funcInfo, 4, 0)
			return []string{at(funcInfo)}
		}, []string{"func_info: record size 0 outside [8, 256]"}},
		{"BTF.ext record count", "callfunc", func(o *object) []string {
			b := o.secData(".BTF.ext")
			lineInfo := b + int(binary.LittleEndian.Uint32(o.data[b+4:])) + int(binary.LittleEndian.Uint32(o.data[b+16:]))
			o.put(lineInfo+8, 4, 0xffffffff) // num_info of the first section
			return []string{at(lineInfo + 4)}
		}, []string{"line_info: 4294967295 records of 16 bytes overrun"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := loadObject(t, tt.object)
			want := append(tt.corrupt(o), tt.want...)
			_, err := jit.LoadELFBytes(o.data)
			if err == nil {
				t.Fatal("loaded without error")
			}
			for _, w := range append(want, "parse eBPF object: malformed ELF") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// TestLoadELFNegativeHelper: cilium/ebpf keeps a negative helper id as it
// is; the loader rejects it (the stream would not marshal).
func TestLoadELFNegativeHelper(t *testing.T) {
	o := loadObject(t, "allhelpers")
	call := o.secData("kprobe/"+vectorAdd) + 32*8 // bpf_get_globaltimer()
	if o.data[call] != 0x85 {
		t.Fatalf("insn 32 of allhelpers is %#x, not a call: the test needs updating", o.data[call])
	}
	o.put(call+4, 4, uint64(0xfffffffb))
	_, err := jit.LoadELFBytes(o.data)
	want := `program "allhelpers": insn 32: call to helper -5, which is not a helper id`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want an error with %q", err, want)
	}
}

func TestLoadELFTooBig(t *testing.T) {
	data := make([]byte, jit.MaxObjectSize+1)
	copy(data, loadObject(t, "threadhist").data)
	_, err := jit.LoadELFBytes(data)
	if err == nil || !strings.Contains(err.Error(), "exceeds the 16777216-byte (16 MiB) limit") {
		t.Fatalf("got %v, want the size limit", err)
	}
	_, err = jit.LoadELFReader(bytes.NewReader(data))
	if err == nil || !strings.Contains(err.Error(), "16 MiB") {
		t.Fatalf("reader: got %v, want the size limit", err)
	}
}

// TestLoadELFRegressions loads each input of testdata/fuzz/FuzzLoadELF that
// once took seconds, gigabytes or crashed the fuzzer. Each must now give its
// error, and quickly: the bound is generous, the real figure is
// BenchmarkLoadELFMalformed's.
func TestLoadELFRegressions(t *testing.T) {
	want := map[string]string{
		"negative-helper-id": "call to helper -5, which is not a helper id",
		"nobits-4gib":        `section 6 ".rodata.str1.1" at file offset 0x31b0: SHT_NOBITS size 4294967280 exceeds`,
	}
	inputs := fuzzInputs(t)
	for name, w := range want {
		if _, ok := inputs[name]; !ok {
			t.Errorf("regression input %s is missing", name)
		}
		_ = w
	}
	for name, data := range inputs {
		t.Run(name, func(t *testing.T) {
			err := loadWithin(t, data, 10*time.Second)
			if w, ok := want[name]; ok && (err == nil || !strings.Contains(err.Error(), w)) {
				t.Errorf("got %v, want an error with %q", err, w)
			}
		})
	}
}

// loadWithin runs LoadELFBytes and fails the test if it has not returned
// within d.
func loadWithin(t *testing.T, data []byte, d time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := jit.LoadELFBytes(data)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("LoadELFBytes has not returned after %v", d)
		return nil
	}
}

// fuzzInputs reads testdata/fuzz/FuzzLoadELF: files in the fuzzing engine's
// format, one []byte value each.
func fuzzInputs(t testing.TB) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzLoadELF", "*"))
	if err != nil {
		t.Fatal(err)
	}
	inputs := make(map[string][]byte, len(files))
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		body, ok := strings.CutPrefix(string(raw), "go test fuzz v1\n[]byte(")
		body, ok2 := strings.CutSuffix(strings.TrimSpace(body), ")")
		if !ok || !ok2 {
			t.Fatalf("%s: not a one-[]byte fuzz input", f)
		}
		v, err := strconv.Unquote(body)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		inputs[filepath.Base(f)] = []byte(v)
	}
	return inputs
}

func BenchmarkLoadELFMalformed(b *testing.B) {
	inputs := fuzzInputs(b)
	inputs["linking-300x8000"] = buildObject(300, 8000)
	for name, data := range inputs {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := jit.LoadELFBytes(data); err == nil {
					b.Fatal("loaded without error")
				}
			}
		})
	}
}

// buildObject writes an eBPF object from scratch: programs sections
// kprobe/k<i>, each a program p<i> that calls big, a global function in
// .text of textInsns instructions. cilium/ebpf links a copy of big into each
// program, so the loader's work grows with programs × textInsns.
func buildObject(programs, textInsns int) []byte {
	le := binary.LittleEndian
	var strtab bytes.Buffer
	strtab.WriteByte(0)
	str := func(s string) uint32 {
		off := uint32(strtab.Len())
		strtab.WriteString(s)
		strtab.WriteByte(0)
		return off
	}
	insn := func(op, regs byte, imm int32) []byte {
		b := []byte{op, regs, 0, 0, 0, 0, 0, 0}
		le.PutUint32(b[4:], uint32(imm))
		return b
	}
	type section struct {
		name                 string
		typ                  elf.SectionType
		flags                elf.SectionFlag
		data                 []byte
		link, info           uint32
		entsize, align, size uint64
	}
	var text []byte
	for i := 0; i < textInsns-1; i++ {
		text = append(text, insn(0xb7, 0, 1)...) // r0 = 1
	}
	text = append(text, insn(0x95, 0, 0)...) // exit
	secs := []section{{}, {name: ".strtab", typ: elf.SHT_STRTAB, align: 1},
		{name: ".text", typ: elf.SHT_PROGBITS, flags: elf.SHF_ALLOC | elf.SHF_EXECINSTR, data: text, align: 8}}
	progSec := func(i int) int { return 3 + i }
	symtabIdx := uint32(3 + 2*programs + 1)
	licenseIdx := 3 + 2*programs
	for i := 0; i < programs; i++ {
		code := append(insn(0x85, 0x10, -1), insn(0x95, 0, 0)...) // call big; exit
		secs = append(secs, section{name: fmt.Sprintf("kprobe/k%d", i), typ: elf.SHT_PROGBITS,
			flags: elf.SHF_ALLOC | elf.SHF_EXECINSTR, data: code, align: 8})
	}
	for i := 0; i < programs; i++ {
		rel := make([]byte, 16)
		le.PutUint64(rel[8:], 1<<32|10) // symbol 1 (big), R_BPF_64_32
		secs = append(secs, section{name: fmt.Sprintf(".relkprobe/k%d", i), typ: elf.SHT_REL, data: rel,
			link: symtabIdx, info: uint32(progSec(i)), entsize: 16, align: 8})
	}
	secs = append(secs, section{name: "license", typ: elf.SHT_PROGBITS, flags: elf.SHF_ALLOC | elf.SHF_WRITE, data: []byte("GPL\x00"), align: 1})
	sym := func(name string, info byte, shndx int, size uint64) []byte {
		b := make([]byte, 24)
		le.PutUint32(b, str(name))
		b[4] = info
		le.PutUint16(b[6:], uint16(shndx))
		le.PutUint64(b[16:], size)
		return b
	}
	global := func(t elf.SymType) byte { return byte(elf.STB_GLOBAL)<<4 | byte(t) }
	syms := append(make([]byte, 24), sym("big", global(elf.STT_FUNC), 2, uint64(len(text)))...)
	for i := 0; i < programs; i++ {
		syms = append(syms, sym(fmt.Sprintf("p%d", i), global(elf.STT_FUNC), progSec(i), 16)...)
	}
	syms = append(syms, sym("LICENSE", global(elf.STT_OBJECT), licenseIdx, 4)...)
	secs = append(secs, section{name: ".symtab", typ: elf.SHT_SYMTAB, data: syms, link: 1, info: 1, entsize: 24, align: 8})
	names := make([]uint32, len(secs))
	for i := 1; i < len(secs); i++ {
		names[i] = str(secs[i].name)
	}
	secs[1].data = strtab.Bytes()

	out := make([]byte, 64)
	offsets := make([]uint64, len(secs))
	for i := 1; i < len(secs); i++ {
		for len(out)%8 != 0 {
			out = append(out, 0)
		}
		offsets[i] = uint64(len(out))
		out = append(out, secs[i].data...)
	}
	for len(out)%8 != 0 {
		out = append(out, 0)
	}
	shoff := len(out)
	for i, s := range secs {
		h := make([]byte, 64)
		le.PutUint32(h[0:], names[i])
		le.PutUint32(h[4:], uint32(s.typ))
		le.PutUint64(h[8:], uint64(s.flags))
		le.PutUint64(h[24:], offsets[i])
		le.PutUint64(h[32:], uint64(len(s.data)))
		le.PutUint32(h[40:], s.link)
		le.PutUint32(h[44:], s.info)
		le.PutUint64(h[48:], s.align)
		le.PutUint64(h[56:], s.entsize)
		out = append(out, h...)
	}
	copy(out, elf.ELFMAG)
	out[elf.EI_CLASS], out[elf.EI_DATA], out[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	le.PutUint16(out[16:], uint16(elf.ET_REL))
	le.PutUint16(out[18:], uint16(elf.EM_BPF))
	le.PutUint32(out[20:], uint32(elf.EV_CURRENT))
	le.PutUint64(out[40:], uint64(shoff))
	le.PutUint16(out[52:], 64)
	le.PutUint16(out[58:], 64)
	le.PutUint16(out[60:], uint16(len(secs)))
	le.PutUint16(out[62:], 1)
	return out
}

func TestLoadELFLinkingBound(t *testing.T) {
	tests := []struct {
		name            string
		programs, insns int
		want            string // "" = loads
	}{
		{"small", 3, 100, ""},
		{"many programs, long callee", 300, 8000, "300 programs × 8600 instructions exceed the linking limit of 1048576"},
		{"under the limit", 8, 1 << 16, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := buildObject(tt.programs, tt.insns)
			progs, err := jit.LoadELFBytes(data)
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("got %v, want an error with %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(progs) != tt.programs {
				t.Fatalf("%d programs, want %d", len(progs), tt.programs)
			}
			for i, p := range progs {
				// p<i> (2 slots) with big (insns slots) linked after it.
				if len(p.Insns) != 2+tt.insns || p.Kind != jit.ProbeEntry || !strings.HasPrefix(p.Target, "k") {
					t.Errorf("program %d %s: %d insns, kind %v, target %q", i, p.Name, len(p.Insns), p.Kind, p.Target)
				}
				if c := p.Insns[0]; !c.IsFunctionCall() || c.Constant != 1 {
					t.Errorf("program %s: first insn %v, want a call to slot 2", p.Name, c)
				}
			}
		})
	}
}

// BenchmarkLoadELFLargest loads the costliest object the checks accept: two
// programs that each link a copy of a function of about 512K instructions.
func BenchmarkLoadELFLargest(b *testing.B) {
	data := buildObject(2, 1<<19-4)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := jit.LoadELFBytes(data); err != nil {
			b.Fatal(err)
		}
	}
}

// TestParseObjectChecksFirst: an object is parsed exactly once when it is
// well formed, and a malformed one is refused by the ELF check without
// reaching cilium/ebpf.
func TestParseObjectChecksFirst(t *testing.T) {
	good := loadObject(t, "threadhist").data
	bad := loadObject(t, "threadhist")
	bad.put(18, 2, uint64(elf.EM_X86_64))
	tests := []struct {
		name   string
		data   []byte
		parses int64
		elfErr bool
	}{
		{"well formed", good, 1, false},
		{"wrong machine", bad.data, 0, true},
		{"truncated", good[:100], 0, true},
		{"too big", append(slices.Clip(good), make([]byte, jit.MaxObjectSize)...), 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := jit.CountParses(t)
			o, err := jit.ParseObject(tt.data)
			var ee *jit.ELFError
			if got := errors.As(err, &ee); got != tt.elfErr {
				t.Fatalf("error %v: ELFError %v, want %v", err, got, tt.elfErr)
			}
			if !tt.elfErr && (err != nil || o.Spec == nil || len(o.Programs) == 0) {
				t.Fatalf("ParseObject: %v, %+v", err, o)
			}
			if got := n.Load(); got != tt.parses {
				t.Errorf("%d parses, want %d", got, tt.parses)
			}
		})
	}
}
