package jit

import (
	"github.com/cilium/ebpf/asm"
)

// Map describes one map a program references. Programs refer to maps with
// LD_IMM64 instructions whose Reference() is the map's Name (cilium/ebpf's
// convention); after Program.ResolveMaps, the instruction's Constant holds the
// map's index in Program.Maps.
type Map struct {
	Name       string  // symbol name in the ELF object
	Type       MapType // bpftime/Linux map type number
	KeySize    uint32  // bytes
	ValueSize  uint32  // bytes
	MaxEntries uint32  // entries (ring buffers: bytes of payload space)
	Flags      uint32  // map flags from the definition
	// Declared is the type the object declares when the loader lays the
	// map out as another (bpftime's 1504, 1512, 1513: aliasedMapTypes);
	// 0 when Type is the declared type.
	Declared MapType
}

// Program is one eBPF program ready for verification, compilation or
// interpretation. bpf-to-bpf callees are already linked into Insns (as
// cilium/ebpf's ProgramSpec.Instructions does), so a call with Src ==
// asm.PseudoCall jumps inside Insns.
type Program struct {
	Name    string           // function name
	Section string           // ELF section, e.g. "kretprobe/vectorAdd"
	Kind    ProbeKind        // from Section
	Target  string           // kernel (or host symbol) the section names
	Insns   asm.Instructions // the instructions, callees included
	Maps    []*Map           // maps referenced by Insns
}
