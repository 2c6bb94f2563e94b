// Package fatbin reads NVIDIA fat binaries: the containers nvcc embeds in
// host executables and shared libraries (section .nv_fatbin, or
// __nv_relfatbin in relocatable objects), the images a CUDA application
// hands to cuModuleLoadData / cuLibraryLoadData, and the entries inside
// them (PTX text and cubin ELF images, one per architecture), compressed
// with LZ4 or ZSTD.
//
// # Layout
//
// All integers are little-endian. The layout below was worked out from
// files written by nvcc/fatbinary 11.8 and checked against cuobjdump
// (see the tests); field names are ours.
//
// Wrapper (__fatBinC_Wrapper_t, 24 bytes, in .nvFatBinSegment; the host
// code registers it with the runtime):
//
//	0  u32 magic 0x466243B1
//	4  u32 version (1)
//	8  u64 address of the container (a virtual address: in a PIE or a
//	       shared library also an R_X86_64_RELATIVE relocation)
//	16 u64 address of a file name (0 in nvcc output)
//
// Container (one per translation unit; a section holds several back to
// back):
//
//	0  u32 magic 0xBA55ED50
//	4  u16 version (1)
//	6  u16 header size (16): entries start here
//	8  u64 size of the entries that follow the header
//
// Entry (a header of HeaderSize bytes, then PayloadSize bytes of payload,
// then the next entry):
//
//	0  u16 kind: 1 PTX, 2 ELF (cubin)
//	2  u16 entry version (0x0101)
//	4  u32 header size (64; 72 for PTX, which carries an options record;
//	       more when a name or options strings follow; sm_100+ adds more)
//	8  u64 payload size in the container (padded to 8 bytes)
//	16 u32 compressed size (0 when not compressed)
//	20 u32 offset, from the entry start, of the options record
//	       {u32 offset, u32 size} of the ptxas options string (0: none)
//	24 u16 minor version \ PTX ISA version for PTX (8, 7 = 7.8);
//	26 u16 major version / 7, 1 for cubins
//	28 u32 SM architecture (52, 80, 90, ...)
//	32 u32 offset, from the entry start, of the name (fatbinary -ident)
//	36 u32 name size
//	40 u64 flags: 0x1 64-bit, 0x2 debug, 0x10 Linux, 0x2000 LZ4,
//	       0x8000 ZSTD (CUDA 12.8 and newer)
//	48 u64 reserved (0)
//	56 u64 uncompressed size (0 when not compressed)
//
// LZ4 payloads are one LZ4 block (no frame) of the compressed size that
// inflates to exactly the uncompressed size; ZSTD payloads are a zstd
// frame. An uncompressed PTX payload is the text, a terminating NUL and
// zero padding; a compressed one inflates to the text and its NUL.
// Entry.Data removes the NULs, so that it equals what cuobjdump
// --extract-ptx writes.
//
// # CUDA 13
//
// Checked against nvcc/cuobjdump 13.0 output (testdata/cuda/nvcc13): the
// container and entry layout is unchanged (PTX entries carry PTX ISA 9.0,
// cubins entry version 1.8). Cubins use ELF ABI version 8 (EI_OSABI 0x41):
// the SM moved from the low byte of e_flags to bits 8..15, and the
// arch-specific "a" from 0x800 to the low bits (0x8 in LLVM, 0x2 in what
// nvcc 13 writes for sm_100a); CubinArch reads both layouts. Executables
// and shared libraries linked by nvcc 13 hold a second container in
// .nv_fatbin, ahead of the application's: kernel-less cubins (one per
// target) from libcudart_static. cuobjdump lists it, so File lists it,
// first, numbered with the others. The wrapper of .nvFatBinSegment points
// at the application's container; the other one is not reached from it.
//
// The "a" of an arch-specific entry inside a container (cuobjdump lists
// libtorch's sm_100a entries as sm_100a) is not decoded yet: its entry
// header field is unknown. Entry.Header returns the raw header for that.
//
// # Errors
//
// Parsing never panics. Corrupt or truncated input gives a *FormatError
// that names the offset (within the blob handed to the parser, or within
// the file for Open) and what was wrong there. A file with fatbins but no
// PTX entry reports ErrNoPTX from File.PTX, which is the normal case for
// SASS-only libraries such as libtorch_cuda.so.
package fatbin
