package fatbin

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path"
	"strings"
)

// Magic numbers of the two fatbin structures.
const (
	WrapperMagic   = 0x466243B1 // __fatBinC_Wrapper_t
	ContainerMagic = 0xBA55ED50 // container header
)

// Sizes of the fixed parts of the structures.
const (
	WrapperSize         = 24 // magic, version, data pointer, file name pointer
	ContainerHeaderSize = 16 // magic, version, header size, size
	EntryHeaderSize     = 64 // the fixed part of an entry header
)

// maxEntryHeader bounds an entry header: real ones are 64 to ~200 bytes.
const maxEntryHeader = 1 << 16

// Kind says what an entry holds.
type Kind uint16

// Entry kinds.
const (
	KindPTX Kind = 1 // PTX assembly text
	KindELF Kind = 2 // a cubin: an ELF image of SASS for one SM
)

// String returns "PTX", "ELF" or "kind(N)".
func (k Kind) String() string {
	switch k {
	case KindPTX:
		return "PTX"
	case KindELF:
		return "ELF"
	}
	return fmt.Sprintf("kind(%d)", uint16(k))
}

// Flags are an entry's flag bits.
type Flags uint64

// Known entry flags.
const (
	Flag64Bit Flags = 0x0001 // compiled for a 64-bit host
	FlagDebug Flags = 0x0002 // compiled with -g/-G
	FlagLinux Flags = 0x0010 // host OS is Linux
	FlagLZ4   Flags = 0x2000 // payload is one LZ4 block
	FlagZstd  Flags = 0x8000 // payload is a zstd frame (CUDA 12.8+)
)

// Compression says how an entry's payload is compressed.
type Compression int

// Payload compressions.
const (
	CompressionNone Compression = iota // stored as is
	CompressionLZ4                     // LZ4 block
	CompressionZstd                    // zstd frame
)

// String returns "none", "lz4" or "zstd".
func (c Compression) String() string {
	switch c {
	case CompressionLZ4:
		return "lz4"
	case CompressionZstd:
		return "zstd"
	}
	return "none"
}

// FormatError reports corrupt or truncated input at an offset.
type FormatError struct {
	Offset int64  // byte offset of the problem, in the blob or file parsed
	What   string // what was expected or found there
}

// Error returns "fatbin: offset 0x...: what".
func (e *FormatError) Error() string {
	return fmt.Sprintf("fatbin: offset %#x: %s", e.Offset, e.What)
}

func formatErr(off int64, format string, args ...any) error {
	return &FormatError{Offset: off, What: fmt.Sprintf(format, args...)}
}

// ErrNoPTX is returned when a file or image holds fatbins but no PTX
// entry, so PTX injection cannot reach its kernels.
var ErrNoPTX = errors.New("no PTX")

// Container is one fatbin container and its entries.
type Container struct {
	Offset     int64  // of the container header, in the blob or file parsed
	Version    uint16 // container version (1)
	HeaderSize uint16 // container header size (16)
	Size       uint64 // bytes of entries after the header
	Entries    []*Entry
}

// End returns the offset just past the container.
func (c *Container) End() int64 {
	return c.Offset + int64(c.HeaderSize) + int64(c.Size)
}

// Entry is one image in a container: PTX for a virtual architecture or a
// cubin for a real one.
type Entry struct {
	Offset           int64  // of the entry header, in the blob or file parsed
	Kind             Kind   // PTX or ELF
	Version          uint16 // entry header version (0x0101)
	HeaderSize       uint32 // bytes of entry header; the payload follows
	PayloadSize      uint64 // bytes of payload in the container, padding included
	CompressedSize   uint32 // bytes of compressed payload (0 if uncompressed)
	UncompressedSize uint64 // bytes once inflated (0 if uncompressed)
	Major, Minor     uint16 // PTX ISA version (7.8) for PTX; 1.7 for nvcc 11.8 cubins
	Arch             uint32 // SM architecture number: 52, 80, 90, ...
	ArchSpecific     bool   // built for the arch-specific variant: sm_90a, sm_100a
	Flags            Flags
	Name             string // identifier (fatbinary -ident), "" when absent
	Options          string // ptxas options recorded for a PTX entry
	payload          []byte // PayloadSize bytes as stored
	header           []byte // HeaderSize bytes as stored, nil for loose images
}

// Compression returns how the payload is stored.
func (e *Entry) Compression() Compression {
	switch {
	case e.Flags&FlagZstd != 0:
		return CompressionZstd
	case e.Flags&FlagLZ4 != 0:
		return CompressionLZ4
	}
	return CompressionNone
}

// ArchName returns "sm_80" for Arch 80, "sm_90a" for an arch-specific
// entry, the way cuobjdump names it.
func (e *Entry) ArchName() string {
	if e.ArchSpecific {
		return fmt.Sprintf("sm_%da", e.Arch)
	}
	return fmt.Sprintf("sm_%d", e.Arch)
}

// Header returns the entry header as stored (HeaderSize bytes), for
// fields this package does not decode. It is nil for a loose cubin or
// PTX image. The slice aliases the parsed input.
func (e *Entry) Header() []byte { return e.header }

// Raw returns the payload as stored in the container (compressed or not,
// padding included). The slice aliases the parsed input.
func (e *Entry) Raw() []byte { return e.payload }

// Size returns the size of the image once inflated, without padding for
// compressed entries: what Data returns for an ELF entry.
func (e *Entry) Size() uint64 {
	if e.Compression() != CompressionNone {
		return e.UncompressedSize
	}
	return e.PayloadSize
}

// Data returns the image: decompressed, and for PTX without the
// terminating NUL and padding, so that it equals what cuobjdump
// --extract-ptx / --extract-elf writes. Uncompressed data aliases the
// parsed input; decompressed data is a new slice. Decompression is bound
// by DefaultLimits (an Inflater applies others).
func (e *Entry) Data() ([]byte, error) { return NewInflater(DefaultLimits).Data(e) }

// PTX returns the PTX text of a PTX entry, under DefaultLimits.
func (e *Entry) PTX() ([]byte, error) { return NewInflater(DefaultLimits).PTX(e) }

// FileName returns the name cuobjdump gives the entry when it lists or
// extracts it: "<name>.sm_80.ptx" for a named entry, otherwise
// "<base>.<n>.sm_80.ptx" where base is the input file's name without its
// extension and n counts the entries of this kind from 1.
func (e *Entry) FileName(base string, n int) string {
	ext := ".cubin"
	if e.Kind == KindPTX {
		ext = ".ptx"
	}
	if e.Name != "" {
		name := path.Base(e.Name)
		if i := strings.LastIndexByte(name, '.'); i > 0 {
			name = name[:i]
		}
		return fmt.Sprintf("%s.%s%s", name, e.ArchName(), ext)
	}
	return fmt.Sprintf("%s.%d.%s%s", base, n, e.ArchName(), ext)
}

// ParseContainer parses the container at the start of b. base is the
// offset of b within the blob or file, used for Offset fields and errors.
func ParseContainer(b []byte, base int64) (*Container, error) {
	if len(b) < ContainerHeaderSize {
		return nil, formatErr(base, "truncated container header: %d of %d bytes", len(b), ContainerHeaderSize)
	}
	if m := binary.LittleEndian.Uint32(b); m != ContainerMagic {
		return nil, formatErr(base, "container magic %#08x, want %#08x", m, uint32(ContainerMagic))
	}
	c := &Container{
		Offset:     base,
		Version:    binary.LittleEndian.Uint16(b[4:]),
		HeaderSize: binary.LittleEndian.Uint16(b[6:]),
		Size:       binary.LittleEndian.Uint64(b[8:]),
	}
	if c.HeaderSize < ContainerHeaderSize {
		return nil, formatErr(base+6, "container header size %d, less than %d", c.HeaderSize, ContainerHeaderSize)
	}
	rest := uint64(len(b)) - uint64(c.HeaderSize)
	if uint64(len(b)) < uint64(c.HeaderSize) || c.Size > rest {
		return nil, formatErr(base+8, "container of %d bytes after a %d-byte header is truncated: %d bytes left",
			c.Size, c.HeaderSize, len(b))
	}
	body := b[c.HeaderSize : uint64(c.HeaderSize)+c.Size]
	off := 0
	for off < len(body) {
		e, n, err := parseEntry(body[off:], base+int64(c.HeaderSize)+int64(off))
		if err != nil {
			return nil, err
		}
		c.Entries = append(c.Entries, e)
		off += n
	}
	return c, nil
}

// parseEntry parses the entry at the start of b and returns it with the
// number of bytes it occupies (header and payload).
func parseEntry(b []byte, base int64) (*Entry, int, error) {
	if len(b) < EntryHeaderSize {
		return nil, 0, formatErr(base, "truncated entry header: %d of %d bytes left in the container", len(b), EntryHeaderSize)
	}
	le := binary.LittleEndian
	e := &Entry{
		Offset:           base,
		Kind:             Kind(le.Uint16(b[0:])),
		Version:          le.Uint16(b[2:]),
		HeaderSize:       le.Uint32(b[4:]),
		PayloadSize:      le.Uint64(b[8:]),
		CompressedSize:   le.Uint32(b[16:]),
		Minor:            le.Uint16(b[24:]),
		Major:            le.Uint16(b[26:]),
		Arch:             le.Uint32(b[28:]),
		Flags:            Flags(le.Uint64(b[40:])),
		UncompressedSize: le.Uint64(b[56:]),
	}
	optRec := le.Uint32(b[20:])
	nameOff, nameSize := le.Uint32(b[32:]), le.Uint32(b[36:])

	if e.HeaderSize < EntryHeaderSize || e.HeaderSize > maxEntryHeader {
		return nil, 0, formatErr(base+4, "entry header size %d, want %d to %d", e.HeaderSize, EntryHeaderSize, maxEntryHeader)
	}
	if uint64(e.HeaderSize) > uint64(len(b)) {
		return nil, 0, formatErr(base+4, "entry header of %d bytes runs past the container (%d bytes left)", e.HeaderSize, len(b))
	}
	if e.PayloadSize > uint64(len(b))-uint64(e.HeaderSize) {
		return nil, 0, formatErr(base+8, "entry payload of %d bytes runs past the container (%d bytes left after the header)",
			e.PayloadSize, uint64(len(b))-uint64(e.HeaderSize))
	}
	hdr := b[:e.HeaderSize]
	e.header = hdr
	if nameSize > 0 {
		s, err := headerString(hdr, nameOff, nameSize, base, 32)
		if err != nil {
			return nil, 0, fmt.Errorf("entry name: %w", err)
		}
		e.Name = s
	}
	if optRec != 0 {
		if uint64(optRec)+8 > uint64(len(hdr)) {
			return nil, 0, formatErr(base+20, "options record at %d runs past the %d-byte entry header", optRec, len(hdr))
		}
		oOff, oSize := le.Uint32(hdr[optRec:]), le.Uint32(hdr[optRec+4:])
		if oSize > 0 {
			s, err := headerString(hdr, oOff, oSize, base, int64(optRec))
			if err != nil {
				return nil, 0, fmt.Errorf("entry options: %w", err)
			}
			e.Options = s
		}
	}
	e.payload = b[e.HeaderSize : uint64(e.HeaderSize)+e.PayloadSize]
	switch c := e.Compression(); {
	case e.Flags&FlagLZ4 != 0 && e.Flags&FlagZstd != 0:
		return nil, 0, formatErr(base+40, "entry flags %#x claim both LZ4 and ZSTD compression", uint64(e.Flags))
	case c != CompressionNone && uint64(e.CompressedSize) > e.PayloadSize:
		return nil, 0, formatErr(base+16, "compressed size %d is larger than the %d-byte payload", e.CompressedSize, e.PayloadSize)
	}
	return e, int(e.HeaderSize) + int(e.PayloadSize), nil
}

// headerString reads a string of size bytes at off within an entry
// header; field is the offset of the field that points at it, for errors.
func headerString(hdr []byte, off, size uint32, base, field int64) (string, error) {
	if uint64(off)+uint64(size) > uint64(len(hdr)) {
		return "", formatErr(base+field, "string at %d (%d bytes) runs past the %d-byte entry header", off, size, len(hdr))
	}
	s := hdr[off : off+size]
	if i := indexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	return string(s), nil
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

// Parse parses a sequence of containers, as found in a .nv_fatbin
// section or a -fatbin file. Zero padding between containers (to 8 or 16
// bytes) is skipped; anything else that is not a container is an error.
func Parse(b []byte) ([]*Container, error) {
	return parseSeq(b, 0)
}

func parseSeq(b []byte, base int64) ([]*Container, error) {
	var out []*Container
	off := 0
	for off < len(b) {
		if b[off] == 0 {
			off++
			continue
		}
		c, err := ParseContainer(b[off:], base+int64(off))
		if err != nil {
			return out, err
		}
		out = append(out, c)
		off += int(c.HeaderSize) + int(c.Size)
	}
	if len(out) == 0 {
		return nil, formatErr(base, "no fatbin container in %d bytes", len(b))
	}
	return out, nil
}

// Scan finds containers anywhere in b, at 8-byte aligned offsets, and
// returns those that parse; it is for sections whose layout is unknown
// (data sections of binaries built by other toolchains).
func Scan(b []byte, base int64) []*Container {
	var out []*Container
	for off := 0; off+ContainerHeaderSize <= len(b); {
		if binary.LittleEndian.Uint32(b[off:]) == ContainerMagic {
			if c, err := ParseContainer(b[off:], base+int64(off)); err == nil && len(c.Entries) > 0 {
				out = append(out, c)
				off += (int(c.HeaderSize) + int(c.Size) + 7) &^ 7
				continue
			}
		}
		off += 8
	}
	return out
}
