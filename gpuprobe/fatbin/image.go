package fatbin

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// ImageKind says what a code image is.
type ImageKind int

// Image kinds, as told apart by Classify.
const (
	ImageUnknown ImageKind = iota // none of the below
	ImageWrapper                  // a __fatBinC_Wrapper_t: 24 bytes that point at a container
	ImageFatbin                   // one or more fatbin containers
	ImageCubin                    // an ELF image for the GPU (e_machine EM_CUDA)
	ImageHostELF                  // an ELF file for the host (executable, shared library, object)
	ImagePTX                      // PTX assembly text
)

// String returns a short name of the kind.
func (k ImageKind) String() string {
	switch k {
	case ImageWrapper:
		return "fatbin wrapper"
	case ImageFatbin:
		return "fatbin"
	case ImageCubin:
		return "cubin"
	case ImageHostELF:
		return "host ELF"
	case ImagePTX:
		return "PTX"
	}
	return "unknown"
}

// emCUDA is the ELF machine number of NVIDIA GPU code.
const emCUDA = 190

// Classify tells what a code image is from its first bytes, the way the
// driver does for cuModuleLoadData and cuLibraryLoadData (which accept a
// wrapper, a container, a cubin or NUL-terminated PTX text).
func Classify(image []byte) ImageKind {
	if len(image) >= 4 {
		switch binary.LittleEndian.Uint32(image) {
		case WrapperMagic:
			return ImageWrapper
		case ContainerMagic:
			return ImageFatbin
		}
	}
	if len(image) >= 20 && bytes.HasPrefix(image, []byte("\x7fELF")) {
		var m uint16
		if image[5] == 2 { // big-endian
			m = binary.BigEndian.Uint16(image[18:])
		} else {
			m = binary.LittleEndian.Uint16(image[18:])
		}
		if m == emCUDA {
			return ImageCubin
		}
		return ImageHostELF
	}
	if looksLikePTX(image) {
		return ImagePTX
	}
	return ImageUnknown
}

// looksLikePTX reports whether b is text whose first token, after white
// space and comments, is a directive (".version" in compiler output).
func looksLikePTX(b []byte) bool {
	const probe = 4096
	head := b
	if len(head) > probe {
		head = head[:probe]
	}
	for _, c := range head {
		if c == 0 {
			break
		}
		if c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != '\v' {
			return false
		}
	}
	i := 0
	for i < len(b) {
		switch c := b[i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case bytes.HasPrefix(b[i:], []byte("//")):
			j := bytes.IndexByte(b[i:], '\n')
			if j < 0 {
				return false
			}
			i += j + 1
		case bytes.HasPrefix(b[i:], []byte("/*")):
			j := bytes.Index(b[i+2:], []byte("*/"))
			if j < 0 {
				return false
			}
			i += j + 4
		default:
			return c == '.' && i+1 < len(b) && isLetter(b[i+1])
		}
	}
	return false
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// Wrapper is a __fatBinC_Wrapper_t: what host code registers with the
// CUDA runtime, and one of the forms cuModuleLoadData accepts.
type Wrapper struct {
	Offset    int64  // of the wrapper in the blob or file parsed
	Version   uint32 // 1: Data points at a container
	Data      uint64 // address of the container (in the loading process, or a virtual address in a file)
	FileName  uint64 // address of a file name, 0 when absent
	Container *Container
}

// ParseWrapper parses the wrapper at the start of b.
func ParseWrapper(b []byte, base int64) (*Wrapper, error) {
	if len(b) < WrapperSize {
		return nil, formatErr(base, "truncated fatbin wrapper: %d of %d bytes", len(b), WrapperSize)
	}
	if m := binary.LittleEndian.Uint32(b); m != WrapperMagic {
		return nil, formatErr(base, "wrapper magic %#08x, want %#08x", m, uint32(WrapperMagic))
	}
	return &Wrapper{
		Offset:   base,
		Version:  binary.LittleEndian.Uint32(b[4:]),
		Data:     binary.LittleEndian.Uint64(b[8:]),
		FileName: binary.LittleEndian.Uint64(b[16:]),
	}, nil
}

// ParseImage parses a code image as passed to cuModuleLoadData or
// cuLibraryLoadData: containers, a cubin or PTX text. A cubin or PTX
// image becomes a File with one entry of that kind and no container. A
// wrapper holds only a pointer into the loading process, so it is an
// error here: the caller must follow Wrapper.Data and pass the container.
func ParseImage(image []byte) (*File, error) {
	switch k := Classify(image); k {
	case ImageFatbin:
		cs, err := Parse(image)
		if err != nil {
			return nil, err
		}
		return &File{Kind: k, Containers: cs}, nil
	case ImageCubin:
		return &File{Kind: k, Loose: []*Entry{cubinEntry(image)}}, nil
	case ImagePTX:
		return &File{Kind: k, Loose: []*Entry{ptxEntry(image)}}, nil
	case ImageWrapper:
		w, err := ParseWrapper(image, 0)
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("fatbin: image is a fatbin wrapper (version %d) whose container is at address %#x of the loading process; pass the container", w.Version, w.Data)
	case ImageHostELF:
		return nil, formatErr(0, "image is a host ELF file, not GPU code; use Open or NewFile")
	default:
		n := min(len(image), 8)
		return nil, formatErr(0, "unrecognised code image of %d bytes starting % x: not a fatbin, cubin or PTX", len(image), image[:n])
	}
}

// cubinEntry describes a loose cubin as an entry.
func cubinEntry(image []byte) *Entry {
	arch, specific := CubinArch(image)
	e := &Entry{Kind: KindELF, PayloadSize: uint64(len(image)), payload: image, Arch: arch, ArchSpecific: specific}
	if len(image) > 4 && image[4] == 2 {
		e.Flags |= Flag64Bit
	}
	return e
}

// Cubin e_flags, in the two layouts NVIDIA has used. EI_ABIVERSION tells
// them apart: 7 (CUDA 11 and 12, and older) keeps the SM in the low byte,
// 8 (CUDA 13) moves it to bits 8..15.
const (
	eiABIVersion     = 8 // e_ident index of the ELF ABI version
	abiVersionCUDA13 = 8

	efSMv7       = 0xff  // ABI 7: the SM
	efArchSpecV7 = 0x800 // ABI 7: arch-specific variant (sm_90a), EF_CUDA_ACCELERATORS_V1
	efSMShiftV8  = 8     // ABI 8: the SM is (e_flags >> 8) & 0xff
	// ABI 8: arch-specific variant. LLVM names 0x8 EF_CUDA_ACCELERATORS.
	// 0x2 is NOT it: on the H100 machine nvcc 13.0 wrote the same e_flags
	// (0x6006402) for -arch sm_100 and sm_100a, and the same (0x6005a04) for
	// sm_90 and sm_90a, so in this layout the header alone does not tell
	// the "a" variant apart; 0x2 marks the sm_100+ family.
	efArchSpecV8 = 0x8
)

// CubinArch returns the SM of a cubin and whether it is built for the
// arch-specific variant ("a": sm_90a, sm_100a), from its ELF header. It
// reads both e_flags layouts: ABI version 7 and older (CUDA 11, 12: SM in
// the low byte, "a" at 0x800) and ABI version 8 (CUDA 13: SM in bits
// 8..15, "a" in the low bits). It returns 0 for an image that is not an
// ELF file or uses a layout this package does not know.
func CubinArch(image []byte) (sm uint32, archSpecific bool) {
	if len(image) < 52 || !bytes.HasPrefix(image, []byte("\x7fELF")) {
		return 0, false
	}
	off := 48 // e_flags in a 64-bit ELF header
	if image[4] == 1 {
		off = 36
	}
	flags := binary.LittleEndian.Uint32(image[off:])
	switch v := image[eiABIVersion]; {
	case v < abiVersionCUDA13:
		return flags & efSMv7, flags&efArchSpecV7 != 0
	case v == abiVersionCUDA13:
		return flags >> efSMShiftV8 & 0xff, flags&efArchSpecV8 != 0
	}
	return 0, false
}

// ptxEntry describes loose PTX text (up to its first NUL) as an entry.
func ptxEntry(image []byte) *Entry {
	if i := bytes.IndexByte(image, 0); i >= 0 {
		image = image[:i]
	}
	return &Entry{Kind: KindPTX, PayloadSize: uint64(len(image)), payload: image}
}
