package fatbin

import (
	"bytes"
	"encoding/binary"
)

// stoEntry marks a cubin function symbol as a kernel (in st_other).
const stoEntry = 0x10

// CubinKernels returns the kernels of a 64-bit little-endian cubin: its
// function symbols marked as entries, in symbol-table order. It reads the
// ELF structures itself because debug/elf refuses cubins (their e_version
// holds the CUDA version, not 1). Offsets in errors are within the cubin.
func CubinKernels(cubin []byte) ([]string, error) {
	// maxSymbolName bounds a kernel name (mangled C++ names run to a few
	// hundred bytes), so that the names copied stay under
	// maxSymbolName / 24 times the cubin's size.
	const maxSymbolName = 4096
	le := binary.LittleEndian
	if Classify(cubin) != ImageCubin {
		return nil, formatErr(0, "not a cubin (ELF with e_machine %d)", emCUDA)
	}
	if len(cubin) < 64 || cubin[4] != 2 || cubin[5] != 1 {
		return nil, formatErr(4, "only 64-bit little-endian cubins are supported")
	}
	shoff := le.Uint64(cubin[0x28:])
	shentsize := uint64(le.Uint16(cubin[0x3a:]))
	shnum := uint64(le.Uint16(cubin[0x3c:]))
	if shentsize < 64 {
		return nil, formatErr(0x3a, "section header size %d, want 64", shentsize)
	}
	if shoff > uint64(len(cubin)) || shnum > (uint64(len(cubin))-shoff)/shentsize {
		return nil, formatErr(0x28, "%d section headers at %#x run past the %d-byte cubin", shnum, shoff, len(cubin))
	}
	type section struct{ typ, link, off, size, entsize uint64 }
	sec := func(i uint64) section {
		h := cubin[shoff+i*shentsize:]
		return section{
			typ: uint64(le.Uint32(h[4:])), link: uint64(le.Uint32(h[40:])),
			off: le.Uint64(h[24:]), size: le.Uint64(h[32:]), entsize: le.Uint64(h[56:]),
		}
	}
	body := func(s section, at uint64) ([]byte, error) {
		if s.off > uint64(len(cubin)) || s.size > uint64(len(cubin))-s.off {
			return nil, formatErr(int64(at), "section at %#x (%d bytes) runs past the %d-byte cubin", s.off, s.size, len(cubin))
		}
		return cubin[s.off : s.off+s.size], nil
	}
	const shtSymtab = 2
	var out []string
	for i := uint64(0); i < shnum; i++ {
		s := sec(i)
		if s.typ != shtSymtab {
			continue
		}
		hdrAt := shoff + i*shentsize
		if s.entsize < 24 {
			return nil, formatErr(int64(hdrAt+56), "symbol size %d, want 24", s.entsize)
		}
		if s.link >= shnum {
			return nil, formatErr(int64(hdrAt+40), "symbol table links to section %d of %d", s.link, shnum)
		}
		syms, err := body(s, hdrAt)
		if err != nil {
			return nil, err
		}
		strs, err := body(sec(s.link), shoff+s.link*shentsize)
		if err != nil {
			return nil, err
		}
		for off := uint64(0); off+24 <= uint64(len(syms)); off += s.entsize {
			sym := syms[off:]
			const sttFunc = 2
			if sym[4]&0xf != sttFunc || sym[5]&stoEntry == 0 {
				continue
			}
			name := uint64(le.Uint32(sym))
			if name >= uint64(len(strs)) {
				return nil, formatErr(int64(s.off+off), "symbol name at %d is outside the %d-byte string table", name, len(strs))
			}
			n := bytes.IndexByte(strs[name:], 0)
			if n < 0 {
				n = len(strs) - int(name)
			}
			if n > maxSymbolName {
				// Symbols that all name one long string would copy it
				// once each: quadratic in the cubin's size.
				return nil, formatErr(int64(s.off+off), "symbol name of %d bytes, over the %d-byte limit", n, maxSymbolName)
			}
			out = append(out, string(strs[name:int(name)+n]))
		}
	}
	return out, nil
}
