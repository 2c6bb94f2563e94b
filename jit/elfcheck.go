package jit

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"sort"
	"strings"
)

// MaxObjectSize is the largest eBPF object LoadELF accepts: 16 MiB. A GPU
// probe object is a few KiB; the limit bounds the memory and time the parser
// spends on untrusted input.
const MaxObjectSize = 16 << 20

// Limits checked before an object reaches cilium/ebpf's ELF reader, so that
// malformed input costs time and memory in proportion to its size.
const (
	maxSections     = 4096          // section headers
	maxSymbols      = 1 << 16       // symbol table entries
	maxRelocations  = 1 << 20       // REL entries, all sections together
	maxProgramBytes = 1 << 20 * 8   // executable bytes: 1M instructions, the kernel's limit
	maxNameLen      = 4096          // bytes of one section or symbol name
	maxNameBytes    = MaxObjectSize // bytes of all names together (each is copied)

	// maxLinkedInsns bounds programs × instructions. cilium/ebpf links every
	// program (a function outside .text) with a copy of each function it
	// calls, so its output can grow with that product: a 5.6 MB object of
	// 2000 programs calling one 80K-instruction function took 26 s and
	// 3.7 GB to load.
	maxLinkedInsns = 1 << 20
)

// ELF layout constants (ELF64; the gABI).
const (
	elfHeaderSize  = 64
	elfSectionSize = 64
	elfSymbolSize  = 24
	elfRelSize     = 16
	emBPF          = 247
	btfMagic       = 0xeb9f
	btfHeaderSize  = 24 // magic..str_len
	btfExtMinSize  = 24 // magic..line_info_len
	btfExtCORESize = 32 // with core_relo_off, core_relo_len
)

// ELFError is a malformed eBPF object, found before the object is parsed.
// Offset is the file offset of the offending header or record.
type ELFError struct {
	Section string // section the problem is in ("" for the ELF header)
	Offset  int64  // file offset of the header or record at fault
	Reason  string // what is wrong
}

// Error reads like `malformed ELF: section 5 ".maps" at file offset 0x3170:
// reason` (the header's offset, or the record's).
func (e *ELFError) Error() string {
	if e.Section == "" {
		return fmt.Sprintf("malformed ELF at file offset %#x: %s", e.Offset, e.Reason)
	}
	return fmt.Sprintf("malformed ELF: %s at file offset %#x: %s", e.Section, e.Offset, e.Reason)
}

// elfSection is one decoded section header.
type elfSection struct {
	index   int
	hdrOff  int64 // file offset of the header
	nameOff uint32
	name    string
	typ     elf.SectionType
	flags   elf.SectionFlag
	off     uint64
	size    uint64
	link    uint32
	info    uint32
	entsize uint64
}

// label names a section in errors: `section 5 ".maps"`.
func (s *elfSection) label() string {
	if s.name == "" {
		return fmt.Sprintf("section %d", s.index)
	}
	return fmt.Sprintf("section %d %q", s.index, s.name)
}

// hasData reports whether the section occupies bytes of the file.
func (s *elfSection) hasData() bool {
	return s.typ != elf.SHT_NOBITS && s.typ != elf.SHT_NULL
}

// elfChecker validates an object held in memory.
type elfChecker struct {
	data      []byte
	bo        binary.ByteOrder
	secs      []elfSection
	nameBytes int
	progBytes uint64 // bytes of all executable sections
}

// checkELF validates the structure of an eBPF object before cilium/ebpf
// parses it: headers, sections, symbols and relocations lie within the file,
// counts and names are bounded, and the BTF headers agree with their sections.
// Its time and memory grow with the size of the object (n log n at worst).
func checkELF(data []byte) error {
	if len(data) > MaxObjectSize {
		return &ELFError{Offset: MaxObjectSize, Reason: fmt.Sprintf("object of %d bytes exceeds the %d-byte (16 MiB) limit", len(data), MaxObjectSize)}
	}
	c := &elfChecker{data: data}
	if err := c.header(); err != nil {
		return err
	}
	if err := c.names(); err != nil {
		return err
	}
	symtab, err := c.sections()
	if err != nil {
		return err
	}
	nsyms := 0
	if symtab != nil {
		if nsyms, err = c.symbols(symtab); err != nil {
			return err
		}
	}
	if err := c.relocations(symtab, nsyms); err != nil {
		return err
	}
	return c.btf()
}

// header checks the ELF header and decodes the section header table.
func (c *elfChecker) header() error {
	d := c.data
	if len(d) < elfHeaderSize {
		return &ELFError{Reason: fmt.Sprintf("%d bytes is too short for an ELF header (%d)", len(d), elfHeaderSize)}
	}
	if !bytes.Equal(d[:4], []byte(elf.ELFMAG)) {
		return &ELFError{Reason: fmt.Sprintf("not an ELF file: magic %q", d[:4])}
	}
	if elf.Class(d[elf.EI_CLASS]) != elf.ELFCLASS64 {
		return &ELFError{Offset: elf.EI_CLASS, Reason: fmt.Sprintf("class %v, want ELFCLASS64 (eBPF objects are 64-bit)", elf.Class(d[elf.EI_CLASS]))}
	}
	switch elf.Data(d[elf.EI_DATA]) {
	case elf.ELFDATA2LSB:
		c.bo = binary.LittleEndian
	case elf.ELFDATA2MSB:
		c.bo = binary.BigEndian
	default:
		return &ELFError{Offset: elf.EI_DATA, Reason: fmt.Sprintf("unknown data encoding %d", d[elf.EI_DATA])}
	}
	if v := elf.Version(d[elf.EI_VERSION]); v != elf.EV_CURRENT {
		return &ELFError{Offset: elf.EI_VERSION, Reason: fmt.Sprintf("ELF version %d, want 1", v)}
	}
	bo := c.bo
	if t := elf.Type(bo.Uint16(d[16:])); t != elf.ET_REL {
		return &ELFError{Offset: 16, Reason: fmt.Sprintf("type %v, want ET_REL (an object from clang -c)", t)}
	}
	if m := bo.Uint16(d[18:]); m != emBPF && m != uint16(elf.EM_NONE) {
		return &ELFError{Offset: 18, Reason: fmt.Sprintf("machine %v, want EM_BPF", elf.Machine(m))}
	}
	if phnum := bo.Uint16(d[56:]); phnum != 0 {
		return &ELFError{Offset: 56, Reason: fmt.Sprintf("%d program headers; a relocatable object has none", phnum)}
	}
	shoff := bo.Uint64(d[40:])
	shentsize := bo.Uint16(d[58:])
	shnum := int(bo.Uint16(d[60:]))
	shstrndx := int(bo.Uint16(d[62:]))
	switch {
	case shnum == 0 && shoff != 0:
		return &ELFError{Offset: 60, Reason: "extended section numbering (e_shnum 0) is not supported"}
	case shnum == 0:
		return &ELFError{Offset: 40, Reason: "no section headers"}
	case shentsize != elfSectionSize:
		return &ELFError{Offset: 58, Reason: fmt.Sprintf("section header size %d, want %d", shentsize, elfSectionSize)}
	case shnum > maxSections:
		return &ELFError{Offset: 60, Reason: fmt.Sprintf("%d sections exceed the limit of %d", shnum, maxSections)}
	case shoff > uint64(len(d)) || uint64(shnum)*elfSectionSize > uint64(len(d))-shoff:
		return &ELFError{Offset: 40, Reason: fmt.Sprintf("section header table [%#x, +%d×%d) lies outside the %d-byte file", shoff, shnum, elfSectionSize, len(d))}
	case shstrndx >= shnum:
		return &ELFError{Offset: 62, Reason: fmt.Sprintf("section name table index %d out of range (%d sections)", shstrndx, shnum)}
	}
	c.secs = make([]elfSection, shnum)
	for i := range c.secs {
		off := int64(shoff) + int64(i)*elfSectionSize
		h := d[off : off+elfSectionSize]
		s := &c.secs[i]
		*s = elfSection{
			index:   i,
			hdrOff:  off,
			nameOff: bo.Uint32(h[0:]),
			typ:     elf.SectionType(bo.Uint32(h[4:])),
			flags:   elf.SectionFlag(bo.Uint64(h[8:])),
			off:     bo.Uint64(h[24:]),
			size:    bo.Uint64(h[32:]),
			link:    bo.Uint32(h[40:]),
			info:    bo.Uint32(h[44:]),
			entsize: bo.Uint64(h[56:]),
		}
	}
	strs := &c.secs[shstrndx]
	if strs.typ != elf.SHT_STRTAB {
		return &ELFError{Section: strs.label(), Offset: strs.hdrOff, Reason: fmt.Sprintf("section name table has type %v, want SHT_STRTAB", strs.typ)}
	}
	return c.inFile(strs)
}

// inFile checks that a section's contents lie within the file.
func (c *elfChecker) inFile(s *elfSection) error {
	n := uint64(len(c.data))
	if s.hasData() && (s.off > n || s.size > n-s.off) {
		return &ELFError{Section: s.label(), Offset: s.hdrOff, Reason: fmt.Sprintf("data [%#x, +%#x) lies outside the %d-byte file", s.off, s.size, n)}
	}
	return nil
}

// names resolves the section names through the section name table, then
// checks that every section's contents lie within the file.
func (c *elfChecker) names() error {
	shstrndx := int(c.bo.Uint16(c.data[62:]))
	tab := c.sectionData(&c.secs[shstrndx])
	for i := range c.secs {
		s := &c.secs[i]
		name, err := c.str(tab, s.nameOff)
		if err != nil {
			return &ELFError{Section: s.label(), Offset: s.hdrOff, Reason: "name: " + err.Error()}
		}
		s.name = name
	}
	for i := range c.secs {
		if err := c.inFile(&c.secs[i]); err != nil {
			return err
		}
	}
	return nil
}

// str looks a name up in a string table and charges it to the name budget.
func (c *elfChecker) str(tab []byte, off uint32) (string, error) {
	if uint64(off) >= uint64(len(tab)) {
		if off == 0 {
			return "", nil // an empty table: every name is ""
		}
		return "", fmt.Errorf("string offset %d outside the %d-byte string table", off, len(tab))
	}
	rest := tab[off:]
	if len(rest) > maxNameLen+1 {
		rest = rest[:maxNameLen+1]
	}
	n := bytes.IndexByte(rest, 0)
	if n < 0 {
		return "", fmt.Errorf("string at offset %d is not NUL-terminated within %d bytes", off, maxNameLen)
	}
	c.nameBytes += n
	if c.nameBytes > maxNameBytes {
		return "", fmt.Errorf("names add up to more than %d bytes", maxNameBytes)
	}
	return string(rest[:n]), nil
}

// sectionData is the file contents of a section (nil for SHT_NOBITS).
func (c *elfChecker) sectionData(s *elfSection) []byte {
	if !s.hasData() {
		return nil
	}
	return c.data[s.off : s.off+s.size]
}

// sections checks each section header against what its type implies and
// returns the symbol table (nil if there is none).
func (c *elfChecker) sections() (*elfSection, error) {
	var symtab *elfSection
	for i := range c.secs {
		s := &c.secs[i]
		fail := func(format string, args ...any) error {
			return &ELFError{Section: s.label(), Offset: s.hdrOff, Reason: fmt.Sprintf(format, args...)}
		}
		if s.flags&elf.SHF_COMPRESSED != 0 && !strings.HasPrefix(s.name, ".debug") {
			return nil, fail("compressed sections are only supported for debug info")
		}
		switch s.typ {
		case elf.SHT_NOBITS:
			if s.size > MaxObjectSize {
				return nil, fail("SHT_NOBITS size %d exceeds the %d-byte limit", s.size, MaxObjectSize)
			}
		case elf.SHT_SYMTAB:
			if symtab != nil {
				return nil, fail("second symbol table (the first is section %d)", symtab.index)
			}
			symtab = s
			switch {
			case s.entsize != elfSymbolSize:
				return nil, fail("symbol entry size %d, want %d", s.entsize, elfSymbolSize)
			case s.size%elfSymbolSize != 0:
				return nil, fail("size %d is not a multiple of the %d-byte symbol", s.size, elfSymbolSize)
			case s.size/elfSymbolSize > maxSymbols:
				return nil, fail("%d symbols exceed the limit of %d", s.size/elfSymbolSize, maxSymbols)
			case int(s.link) >= len(c.secs) || c.secs[s.link].typ != elf.SHT_STRTAB:
				return nil, fail("string table link %d is not an SHT_STRTAB section", s.link)
			}
		case elf.SHT_REL:
			switch {
			case s.entsize != elfRelSize:
				return nil, fail("relocation entry size %d, want %d", s.entsize, elfRelSize)
			case s.size%elfRelSize != 0:
				return nil, fail("size %d is not a multiple of the %d-byte relocation", s.size, elfRelSize)
			case int(s.info) >= len(c.secs):
				return nil, fail("relocated section %d out of range (%d sections)", s.info, len(c.secs))
			}
		case elf.SHT_PROGBITS:
			if s.flags&elf.SHF_EXECINSTR != 0 {
				c.progBytes += s.size
				if c.progBytes > maxProgramBytes {
					return nil, fail("executable sections exceed %d bytes (%d instructions)", maxProgramBytes, maxProgramBytes/8)
				}
			}
		}
	}
	return symtab, nil
}

// funcSym is a symbol cilium/ebpf decodes instructions for.
type funcSym struct {
	value, size uint64
	index       int
}

// symbols checks every symbol: its name, its section index, and for
// functions, that their instructions lie inside their section and do not
// overlap another function (each is decoded separately). It returns the
// number of entries.
func (c *elfChecker) symbols(symtab *elfSection) (int, error) {
	data := c.sectionData(symtab)
	strtab := c.sectionData(&c.secs[symtab.link])
	n := len(data) / elfSymbolSize
	funcs := make(map[int][]funcSym)
	for i := 1; i < n; i++ {
		e := data[i*elfSymbolSize : (i+1)*elfSymbolSize]
		off := int64(symtab.off) + int64(i)*elfSymbolSize
		fail := func(format string, args ...any) error {
			return &ELFError{Section: symtab.label(), Offset: off, Reason: fmt.Sprintf("symbol %d: ", i) + fmt.Sprintf(format, args...)}
		}
		name, err := c.str(strtab, c.bo.Uint32(e[0:]))
		if err != nil {
			return 0, fail("name: %v", err)
		}
		info := e[4]
		shndx := elf.SectionIndex(c.bo.Uint16(e[6:]))
		value := c.bo.Uint64(e[8:])
		size := c.bo.Uint64(e[16:])
		if shndx == elf.SHN_XINDEX {
			return 0, fail("%q: extended section index (SHN_XINDEX) is not supported", name)
		}
		if shndx >= elf.SHN_LORESERVE || shndx == elf.SHN_UNDEF {
			continue
		}
		if int(shndx) >= len(c.secs) {
			return 0, fail("%q: section index %d out of range (%d sections)", name, shndx, len(c.secs))
		}
		sec := &c.secs[shndx]
		typ, bind := elf.ST_TYPE(info), elf.ST_BIND(info)
		isFunc := typ == elf.STT_FUNC || (typ == elf.STT_NOTYPE && bind != elf.STB_LOCAL)
		if !isFunc || name == "" || sec.typ != elf.SHT_PROGBITS || sec.flags&elf.SHF_EXECINSTR == 0 {
			continue
		}
		if value > sec.size || size > sec.size-value {
			return 0, fail("function %q [%#x, +%#x) lies outside %s (%d bytes)", name, value, size, sec.label(), sec.size)
		}
		funcs[int(shndx)] = append(funcs[int(shndx)], funcSym{value, size, i})
	}
	return n, c.overlaps(symtab, funcs)
}

// overlaps rejects functions of one section whose instructions overlap, and
// objects whose programs, each linked with everything, would exceed
// maxLinkedInsns. Symbols at the same offset are aliases of one function.
func (c *elfChecker) overlaps(symtab *elfSection, funcs map[int][]funcSym) error {
	programs := uint64(0)
	for shndx, fs := range funcs {
		sort.Slice(fs, func(i, j int) bool { return fs[i].value < fs[j].value })
		for k := range fs {
			if c.secs[shndx].name != ".text" && (k == 0 || fs[k].value != fs[k-1].value) {
				programs++
			}
			if k == 0 {
				continue
			}
			prev, cur := fs[k-1], fs[k]
			if cur.value == prev.value {
				continue
			}
			if prev.value+prev.size > cur.value {
				return &ELFError{Section: symtab.label(), Offset: int64(symtab.off) + int64(cur.index)*elfSymbolSize,
					Reason: fmt.Sprintf("symbol %d at %#x overlaps symbol %d [%#x, +%#x) in %s", cur.index, cur.value, prev.index, prev.value, prev.size, c.secs[shndx].label())}
			}
		}
	}
	if insns := c.progBytes / 8; programs*insns > maxLinkedInsns {
		return &ELFError{Section: symtab.label(), Offset: int64(symtab.off),
			Reason: fmt.Sprintf("%d programs × %d instructions exceed the linking limit of %d", programs, insns, maxLinkedInsns)}
	}
	return nil
}

// relocations checks every REL entry: it names an existing symbol and lies
// inside the section it relocates.
func (c *elfChecker) relocations(symtab *elfSection, nsyms int) error {
	total := 0
	for i := range c.secs {
		s := &c.secs[i]
		if s.typ != elf.SHT_REL {
			continue
		}
		target := &c.secs[s.info]
		exec := target.flags&elf.SHF_EXECINSTR != 0
		data := c.sectionData(s)
		total += len(data) / elfRelSize
		if total > maxRelocations {
			return &ELFError{Section: s.label(), Offset: s.hdrOff, Reason: fmt.Sprintf("relocations exceed the limit of %d", maxRelocations)}
		}
		if len(data) > 0 && symtab == nil {
			return &ELFError{Section: s.label(), Offset: s.hdrOff, Reason: "relocations but no symbol table"}
		}
		for k := 0; k+elfRelSize <= len(data); k += elfRelSize {
			off := int64(s.off) + int64(k)
			r := c.bo.Uint64(data[k:])
			sym := c.bo.Uint64(data[k+8:]) >> 32
			fail := func(format string, args ...any) error {
				return &ELFError{Section: s.label(), Offset: off, Reason: fmt.Sprintf("relocation %d: ", k/elfRelSize) + fmt.Sprintf(format, args...)}
			}
			switch {
			case sym >= uint64(nsyms):
				return fail("symbol %d out of range (%d symbols)", sym, nsyms)
			case sym == 0 && exec:
				return fail("no symbol (an instruction relocation needs one)")
			case target.typ != elf.SHT_NOBITS && r >= target.size:
				return fail("offset %#x outside %s (%d bytes)", r, target.label(), target.size)
			}
		}
	}
	return nil
}

// btf checks the headers of the .BTF and .BTF.ext sections against their
// sections' sizes, and walks the records of .BTF.ext.
func (c *elfChecker) btf() error {
	for i := range c.secs {
		s := &c.secs[i]
		var err error
		switch s.name {
		case ".BTF":
			err = c.btfHeader(s)
		case ".BTF.ext":
			err = c.btfExt(s)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// btfPreamble checks the magic, version and flags every BTF header starts
// with and returns hdr_len.
func (c *elfChecker) btfPreamble(s *elfSection, min uint32) (uint32, error) {
	d := c.sectionData(s)
	fail := func(format string, args ...any) error {
		return &ELFError{Section: s.label(), Offset: int64(s.off), Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case len(d) < int(min):
		return 0, fail("%d bytes is too short for the %d-byte header", len(d), min)
	case c.bo.Uint16(d) != btfMagic:
		return 0, fail("magic %#04x, want %#04x in the ELF's byte order", c.bo.Uint16(d), btfMagic)
	case d[2] != 1:
		return 0, fail("version %d, want 1", d[2])
	case d[3] != 0:
		return 0, fail("flags %#x, want 0", d[3])
	}
	hdrLen := c.bo.Uint32(d[4:])
	if hdrLen < min || uint64(hdrLen) > uint64(len(d)) {
		return 0, fail("header length %d outside [%d, %d] (the section size)", hdrLen, min, len(d))
	}
	return hdrLen, nil
}

// btfRange checks that [off, off+n) lies within the size bytes that follow
// a BTF header.
func btfRange(what string, off, n uint32, size uint64) error {
	if uint64(off)+uint64(n) > size {
		return fmt.Errorf("%s [%d, +%d) extends past the %d bytes after the header", what, off, n, size)
	}
	return nil
}

// btfHeader checks .BTF: the type and string areas lie within the section.
func (c *elfChecker) btfHeader(s *elfSection) error {
	hdrLen, err := c.btfPreamble(s, btfHeaderSize)
	if err != nil {
		return err
	}
	d := c.sectionData(s)
	rest := uint64(len(d)) - uint64(hdrLen)
	for _, r := range []struct {
		what     string
		off, len uint32
	}{
		{"type section", c.bo.Uint32(d[8:]), c.bo.Uint32(d[12:])},
		{"string section", c.bo.Uint32(d[16:]), c.bo.Uint32(d[20:])},
	} {
		if err := btfRange(r.what, r.off, r.len, rest); err != nil {
			return &ELFError{Section: s.label(), Offset: int64(s.off), Reason: err.Error()}
		}
	}
	return nil
}

// btfExt checks .BTF.ext: each info area lies within the section, and each
// area's records (a record size, then per ELF section a name offset, a
// count and count records) fit in the area.
func (c *elfChecker) btfExt(s *elfSection) error {
	hdrLen, err := c.btfPreamble(s, btfExtMinSize)
	if err != nil {
		return err
	}
	d := c.sectionData(s)
	rest := uint64(len(d)) - uint64(hdrLen)
	areas := []btfArea{
		{"func_info", c.bo.Uint32(d[8:]), c.bo.Uint32(d[12:]), 8},
		{"line_info", c.bo.Uint32(d[16:]), c.bo.Uint32(d[20:]), 16},
	}
	if hdrLen >= btfExtCORESize {
		areas = append(areas, btfArea{"core_relo", c.bo.Uint32(d[24:]), c.bo.Uint32(d[28:]), 16})
	}
	for _, a := range areas {
		if err := btfRange(a.what, a.off, a.len, rest); err != nil {
			return &ELFError{Section: s.label(), Offset: int64(s.off), Reason: err.Error()}
		}
		start := uint64(hdrLen) + uint64(a.off)
		if err := c.btfExtRecords(s, a.what, d[start:start+uint64(a.len)], int64(s.off)+int64(start), a.minRec); err != nil {
			return err
		}
	}
	return nil
}

// btfArea is one info area of .BTF.ext: where it lies after the header and
// the smallest record it may hold.
type btfArea struct {
	what     string
	off, len uint32
	minRec   uint32
}

// maxBTFExtRecord is the largest record size cilium/ebpf accepts.
const maxBTFExtRecord = 256

// btfExtRecords walks one .BTF.ext info area that starts at file offset base.
func (c *elfChecker) btfExtRecords(s *elfSection, what string, area []byte, base int64, minRec uint32) error {
	if len(area) == 0 {
		return nil
	}
	fail := func(pos int, format string, args ...any) error {
		return &ELFError{Section: s.label(), Offset: base + int64(pos), Reason: what + ": " + fmt.Sprintf(format, args...)}
	}
	if len(area) < 4 {
		return fail(0, "%d bytes is too short for the record size", len(area))
	}
	rec := c.bo.Uint32(area)
	if rec < minRec || rec > maxBTFExtRecord {
		return fail(0, "record size %d outside [%d, %d]", rec, minRec, maxBTFExtRecord)
	}
	for pos := 4; pos < len(area); {
		if len(area)-pos < 8 {
			return fail(pos, "%d bytes left, too short for a section header (8)", len(area)-pos)
		}
		num := c.bo.Uint32(area[pos+4:])
		need := uint64(num) * uint64(rec)
		if need > uint64(len(area)-pos-8) {
			return fail(pos, "%d records of %d bytes overrun the %d bytes left", num, rec, len(area)-pos-8)
		}
		pos += 8 + int(need)
	}
	return nil
}
