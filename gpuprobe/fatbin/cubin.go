package fatbin

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"io"
)

// stoEntry marks a cubin function symbol as a kernel (in st_other).
const stoEntry = 0x10

// ELF64 header fields read before debug/elf sees a cubin (the gABI's offsets).
const (
	ehPhoff     = 0x20
	ehShoff     = 0x28
	ehVersion   = 0x14
	ehPhentsize = 0x36
	ehPhnum     = 0x38
	ehShentsize = 0x3a
	ehShnum     = 0x3c
	ehShstrndx  = 0x3e
	ehSize      = 64
	symSize     = 24 // an elf.Sym64
)

// maxSymbolName bounds a kernel name (mangled C++ names run to a few
// hundred bytes), so that the names copied stay under maxSymbolName / 24
// times the cubin's size.
const maxSymbolName = 4096

// CubinKernels returns the kernels of a 64-bit little-endian cubin: its
// function symbols marked as entries, in symbol-table order. debug/elf
// decodes the headers once the header's counts are known to fit the cubin;
// the symbol and string tables are read from the cubin after their bounds
// are checked, never through debug/elf, so no field of the cubin makes it
// allocate more than the cubin's size. Offsets in errors are within the
// cubin.
func CubinKernels(cubin []byte) ([]string, error) {
	if Classify(cubin) != ImageCubin {
		return nil, formatErr(0, "not a cubin (ELF with e_machine %d)", emCUDA)
	}
	if len(cubin) < ehSize || elf.Class(cubin[elf.EI_CLASS]) != elf.ELFCLASS64 || elf.Data(cubin[elf.EI_DATA]) != elf.ELFDATA2LSB {
		return nil, formatErr(elf.EI_CLASS, "only 64-bit little-endian cubins are supported")
	}
	if err := checkCubinHeader(cubin); err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	if le.Uint16(cubin[ehShnum:]) == 0 {
		return nil, nil // no sections (debug/elf would read a count from section 0)
	}
	f, err := elf.NewFile(newCubinReader(cubin))
	if err != nil {
		return nil, formatErr(0, "ELF headers: %v", err)
	}
	shoff, shentsize := le.Uint64(cubin[ehShoff:]), uint64(le.Uint16(cubin[ehShentsize:]))
	var out []string
	for i, s := range f.Sections {
		if s.Type != elf.SHT_SYMTAB {
			continue
		}
		names, err := symtabKernels(cubin, f, s, int64(shoff+uint64(i)*shentsize))
		if err != nil {
			return nil, err
		}
		out = append(out, names...)
	}
	return out, nil
}

// checkCubinHeader checks that the program and section header tables the
// header announces lie within the cubin.
func checkCubinHeader(cubin []byte) error {
	le := binary.LittleEndian
	n := uint64(len(cubin))
	phoff, phentsize, phnum := le.Uint64(cubin[ehPhoff:]), uint64(le.Uint16(cubin[ehPhentsize:])), uint64(le.Uint16(cubin[ehPhnum:]))
	shoff, shentsize, shnum := le.Uint64(cubin[ehShoff:]), uint64(le.Uint16(cubin[ehShentsize:])), uint64(le.Uint16(cubin[ehShnum:]))
	switch {
	case phnum > 0 && phentsize < 56:
		return formatErr(ehPhentsize, "program header size %d, want 56", phentsize)
	case phnum > 0 && (phoff > n || phnum > (n-phoff)/phentsize):
		return formatErr(ehPhoff, "%d program headers at %#x run past the %d-byte cubin", phnum, phoff, n)
	case shentsize < 64:
		return formatErr(ehShentsize, "section header size %d, want 64", shentsize)
	case shoff > n || shnum > (n-shoff)/shentsize:
		return formatErr(ehShoff, "%d section headers at %#x run past the %d-byte cubin", shnum, shoff, n)
	}
	return nil
}

// section returns the contents of s, whose header is at file offset at,
// after checking that they lie within the cubin.
func section(cubin []byte, s *elf.Section, at int64) ([]byte, error) {
	n := uint64(len(cubin))
	switch {
	case s.Flags&elf.SHF_COMPRESSED != 0:
		return nil, formatErr(at+8, "compressed section (type %v) is not supported", s.Type)
	case s.Offset > n || s.FileSize > n-s.Offset:
		return nil, formatErr(at, "section at %#x (%d bytes) runs past the %d-byte cubin", s.Offset, s.FileSize, n)
	}
	return cubin[s.Offset : s.Offset+s.FileSize], nil
}

// symtabKernels returns the kernels of one symbol table, whose header is at
// file offset at.
func symtabKernels(cubin []byte, f *elf.File, s *elf.Section, at int64) ([]string, error) {
	if s.Entsize < symSize {
		return nil, formatErr(at+56, "symbol size %d, want %d", s.Entsize, symSize)
	}
	if int(s.Link) >= len(f.Sections) {
		return nil, formatErr(at+40, "symbol table links to section %d of %d", s.Link, len(f.Sections))
	}
	syms, err := section(cubin, s, at)
	if err != nil {
		return nil, err
	}
	shentsize := int64(binary.LittleEndian.Uint16(cubin[ehShentsize:]))
	shoff := int64(binary.LittleEndian.Uint64(cubin[ehShoff:]))
	strs, err := section(cubin, f.Sections[s.Link], shoff+int64(s.Link)*shentsize)
	if err != nil {
		return nil, err
	}
	var out []string
	for off := uint64(0); off+symSize <= uint64(len(syms)); off += s.Entsize {
		sym := syms[off:]
		if elf.ST_TYPE(sym[4]) != elf.STT_FUNC || sym[5]&stoEntry == 0 {
			continue
		}
		name := uint64(binary.LittleEndian.Uint32(sym))
		if name >= uint64(len(strs)) {
			return nil, formatErr(int64(s.Offset+off), "symbol name at %d is outside the %d-byte string table", name, len(strs))
		}
		n := bytes.IndexByte(strs[name:], 0)
		if n < 0 {
			n = len(strs) - int(name)
		}
		if n > maxSymbolName {
			// Symbols that all name one long string would copy it
			// once each: quadratic in the cubin's size.
			return nil, formatErr(int64(s.Offset+off), "symbol name of %d bytes, over the %d-byte limit", n, maxSymbolName)
		}
		out = append(out, string(strs[name:int(name)+n]))
	}
	return out, nil
}

// cubinReader serves a cubin to debug/elf with two header fields changed:
// e_version, which holds the CUDA version where debug/elf wants 1
// (EV_CURRENT), and e_shstrndx, made SHN_UNDEF so that debug/elf reads no
// section names (kernels are found by symbol, and a compressed name table
// would inflate without a bound).
type cubinReader struct {
	hdr  [ehSize]byte
	data []byte
}

func newCubinReader(cubin []byte) *cubinReader {
	r := &cubinReader{data: cubin}
	copy(r.hdr[:], cubin)
	binary.LittleEndian.PutUint32(r.hdr[ehVersion:], uint32(elf.EV_CURRENT))
	binary.LittleEndian.PutUint16(r.hdr[ehShstrndx:], uint16(elf.SHN_UNDEF))
	return r
}

// ReadAt reads the cubin, with the header as changed.
func (r *cubinReader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("negative offset")
	}
	if off >= int64(len(r.data)) {
		return 0, io.EOF
	}
	n := copy(p, r.data[off:])
	if off < ehSize {
		copy(p[:n], r.hdr[off:])
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
