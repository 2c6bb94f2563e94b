package fatbin

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

// Section names that hold fatbins in host ELF files.
const (
	SectionFatbin    = ".nv_fatbin"       // linked code of executables and shared libraries
	SectionRelFatbin = "__nv_relfatbin"   // relocatable device code of -rdc objects
	SectionSegment   = ".nvFatBinSegment" // the wrappers
)

// File is what a file or code image holds: fatbin containers (from a host
// ELF file or a raw fatbin), or one loose cubin or PTX image.
type File struct {
	Kind       ImageKind    // what the file itself is
	Containers []*Container // in file order
	Wrappers   []*Wrapper   // from .nvFatBinSegment, for host ELF files
	Loose      []*Entry     // a loose cubin or PTX image, outside any container
	// Section names the ELF section each container was found in, indexed
	// like Containers; empty for files that are not host ELF files.
	Section []string
}

// Entries returns every entry: those of all containers in order, then
// the loose ones.
func (f *File) Entries() []*Entry {
	var out []*Entry
	for _, c := range f.Containers {
		out = append(out, c.Entries...)
	}
	return append(out, f.Loose...)
}

// PTX returns the PTX entries, or ErrNoPTX when there are none (a
// SASS-only file: PTX injection cannot reach its kernels).
func (f *File) PTX() ([]*Entry, error) {
	var out []*Entry
	for _, e := range f.Entries() {
		if e.Kind == KindPTX {
			out = append(out, e)
		}
	}
	if len(out) == 0 {
		return nil, ErrNoPTX
	}
	return out, nil
}

// Open reads a host ELF file (executable, shared library or object), a
// raw fatbin (nvcc -fatbin), a cubin or a PTX file.
func Open(name string) (*File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("fatbin: %w", err)
	}
	defer f.Close()
	var magic [4]byte
	if _, err := f.ReadAt(magic[:], 0); err == nil && bytes.Equal(magic[:], []byte("\x7fELF")) {
		var head [20]byte
		if _, err := f.ReadAt(head[:], 0); err == nil && Classify(head[:]) == ImageHostELF {
			out, err := NewFile(f)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			return out, nil
		}
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("fatbin: %s: %w", name, err)
	}
	out, err := ParseImage(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}

// NewFile reads the fatbins of a host ELF file: the containers of
// .nv_fatbin and __nv_relfatbin, the wrappers of .nvFatBinSegment
// (resolved to the container they point at), and, when neither fatbin
// section exists, containers found by scanning the other allocated
// sections. Offsets are file offsets. A file without fatbins is not an
// error: it has no containers.
func NewFile(r io.ReaderAt) (out *File, err error) {
	// debug/elf is not hardened against hostile input; turn a panic in
	// it into an error rather than take the caller down.
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, fmt.Errorf("fatbin: malformed ELF file: %v", p)
		}
	}()
	ef, err := elf.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("fatbin: %w", err)
	}
	out = &File{Kind: ImageHostELF}
	found := false
	for _, name := range []string{SectionFatbin, SectionRelFatbin} {
		s := ef.Section(name)
		if s == nil || s.Type == elf.SHT_NOBITS {
			continue
		}
		found = true
		data, err := sectionData(s)
		if err != nil {
			return nil, err
		}
		cs, err := parseSeq(data, int64(s.Offset))
		if err != nil {
			return nil, fmt.Errorf("section %s: %w", name, err)
		}
		out.add(cs, name)
	}
	if !found {
		for _, s := range ef.Sections {
			if s.Type != elf.SHT_PROGBITS || s.Flags&elf.SHF_ALLOC == 0 || s.Flags&elf.SHF_EXECINSTR != 0 {
				continue
			}
			data, err := sectionData(s)
			if err != nil {
				return nil, err
			}
			out.add(Scan(data, int64(s.Offset)), s.Name)
		}
	}
	if err := out.readWrappers(ef); err != nil {
		return nil, err
	}
	return out, nil
}

func (f *File) add(cs []*Container, section string) {
	for _, c := range cs {
		f.Containers = append(f.Containers, c)
		f.Section = append(f.Section, section)
	}
}

// sectionData reads a section, refusing sizes the file cannot hold.
func sectionData(s *elf.Section) ([]byte, error) {
	if s.Size > 1<<34 {
		return nil, fmt.Errorf("fatbin: section %s: size %d is not plausible", s.Name, s.Size)
	}
	data, err := s.Data()
	if err != nil {
		return nil, fmt.Errorf("fatbin: section %s at offset %#x: %w", s.Name, s.Offset, err)
	}
	return data, nil
}

// readWrappers parses .nvFatBinSegment and links each wrapper to the
// container at its data address.
func (f *File) readWrappers(ef *elf.File) error {
	seg := ef.Section(SectionSegment)
	if seg == nil || seg.Type == elf.SHT_NOBITS {
		return nil
	}
	data, err := sectionData(seg)
	if err != nil {
		return err
	}
	relative := relativeAddends(ef)
	for off := 0; off+WrapperSize <= len(data); off += WrapperSize {
		w, err := ParseWrapper(data[off:], int64(seg.Offset)+int64(off))
		if err != nil {
			return fmt.Errorf("section %s: %w", SectionSegment, err)
		}
		if w.Data == 0 {
			w.Data = relative[seg.Addr+uint64(off)+8]
		}
		w.Container = f.containerAt(ef, w.Data)
		f.Wrappers = append(f.Wrappers, w)
	}
	return nil
}

// containerAt finds the container whose header is at virtual address va.
func (f *File) containerAt(ef *elf.File, va uint64) *Container {
	if va == 0 {
		return nil
	}
	for i, c := range f.Containers {
		s := ef.Section(f.Section[i])
		if s == nil || s.Addr == 0 {
			continue
		}
		if s.Addr+uint64(c.Offset)-s.Offset == va {
			return c
		}
	}
	return nil
}

// relativeAddends maps the target address of each R_X86_64_RELATIVE /
// R_AARCH64_RELATIVE relocation in .rela.dyn to its addend, for wrappers
// whose pointer field the linker left as zero.
func relativeAddends(ef *elf.File) map[uint64]uint64 {
	s := ef.Section(".rela.dyn")
	if s == nil || ef.Class != elf.ELFCLASS64 {
		return nil
	}
	var want uint32
	switch ef.Machine {
	case elf.EM_X86_64:
		want = uint32(elf.R_X86_64_RELATIVE)
	case elf.EM_AARCH64:
		want = uint32(elf.R_AARCH64_RELATIVE)
	default:
		return nil
	}
	data, err := s.Data()
	if err != nil {
		return nil
	}
	out := map[uint64]uint64{}
	for off := 0; off+24 <= len(data); off += 24 {
		if uint32(binary.LittleEndian.Uint64(data[off+8:])) == want {
			out[binary.LittleEndian.Uint64(data[off:])] = binary.LittleEndian.Uint64(data[off+16:])
		}
	}
	return out
}
