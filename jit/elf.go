package jit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// Section prefixes that name where a program runs (bpftime's convention).
const (
	sectionEntry      = "kprobe/"
	sectionExit       = "kretprobe/"
	sectionUprobe     = "uprobe/"
	sectionUretprobe  = "uretprobe/"
	memCaptureTarget  = "__memcapture"
	sectionMemCapture = sectionEntry + memCaptureTarget
	// directRunTarget is bpftime's kprobe/__directly_run: a program that
	// bpftime compiles into a kernel of its own and launches itself.
	directRunTarget = "__directly_run"
)

// LoadELF reads an eBPF object compiled by clang -target bpf and returns its
// programs, sorted by section and name. GPU programs are never loaded into
// the Linux kernel; the object is only parsed.
func LoadELF(path string) ([]*Program, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load eBPF object: %w", err)
	}
	defer f.Close()
	progs, err := LoadELFReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return progs, nil
}

// LoadELFBytes is LoadELF for an object held in memory (see ParseObject).
func LoadELFBytes(obj []byte) ([]*Program, error) {
	o, err := ParseObject(obj)
	if err != nil {
		return nil, err
	}
	return o.Programs, nil
}

// Object is one eBPF object, checked and parsed once: the collection as
// cilium/ebpf parsed it and its programs. Consumers share it read-only;
// whoever needs to change a spec copies it first.
type Object struct {
	Spec     *ebpf.CollectionSpec
	Programs []*Program // LoadSpec(Spec)
}

// ParseObject validates obj (see checkELF, MaxObjectSize) and then parses it
// once, so malformed input gets an error naming the section and file offset
// at fault, in time proportional to its size, before cilium/ebpf sees it.
func ParseObject(obj []byte) (*Object, error) {
	if err := checkELF(obj); err != nil {
		return nil, fmt.Errorf("parse eBPF object: %w", err)
	}
	spec, err := parseCollectionSpec(bytes.NewReader(obj))
	if err != nil {
		return nil, err
	}
	progs, err := LoadSpec(spec)
	if err != nil {
		return nil, err
	}
	return &Object{Spec: spec, Programs: progs}, nil
}

// LoadELFReader is LoadELF for an object read through r. It reads at most
// MaxObjectSize bytes into memory and then works as LoadELFBytes.
func LoadELFReader(r io.ReaderAt) ([]*Program, error) {
	obj, err := io.ReadAll(io.NewSectionReader(r, 0, MaxObjectSize+1))
	if err != nil {
		return nil, fmt.Errorf("read eBPF object: %w", err)
	}
	return LoadELFBytes(obj)
}

// loadCollectionSpec is cilium/ebpf's ELF reader, the one call through
// which this package parses an object (a variable so that tests can count
// and order the parses).
var loadCollectionSpec = ebpf.LoadCollectionSpecFromReader

// parseCollectionSpec runs cilium/ebpf's ELF reader. The reader is third-party
// code fed with untrusted bytes, so a panic inside it is turned into an error
// rather than taking the collector down.
func parseCollectionSpec(r io.ReaderAt) (spec *ebpf.CollectionSpec, err error) {
	defer func() {
		if p := recover(); p != nil {
			spec, err = nil, fmt.Errorf("parse eBPF object: malformed ELF (reader panicked: %v)", p)
		}
	}()
	spec, err = loadCollectionSpec(r)
	if err != nil {
		return nil, fmt.Errorf("parse eBPF object: %w", err)
	}
	return spec, nil
}

// LoadSpec converts the programs of a parsed collection into Programs: it
// derives the probe kind and target from each section name, resolves
// bpf-to-bpf call offsets and collects the maps each program references.
func LoadSpec(spec *ebpf.CollectionSpec) ([]*Program, error) {
	if spec == nil {
		return nil, errors.New("load eBPF collection: nil spec")
	}
	names := make([]string, 0, len(spec.Programs))
	for name := range spec.Programs {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := spec.Programs[names[i]], spec.Programs[names[j]]
		if a.SectionName != b.SectionName {
			return a.SectionName < b.SectionName
		}
		return names[i] < names[j]
	})

	maps := make(map[string]*Map, len(spec.Maps))
	progs := make([]*Program, 0, len(names))
	for _, name := range names {
		ps := spec.Programs[name]
		if ps == nil {
			return nil, fmt.Errorf("program %q: nil program spec", name)
		}
		p, err := convertProgram(name, ps, spec.Maps, maps)
		if err != nil {
			return nil, fmt.Errorf("section %q, program %q: %w", ps.SectionName, name, err)
		}
		progs = append(progs, p)
	}
	if err := placeKernelShared(progs); err != nil {
		return nil, err
	}
	return progs, nil
}

// placeKernelShared turns each kernel-shared array (bpftime's 1504) that
// no host program of the object uses into a GPU array (1503): bpftime
// creates the kernel map all the same, but with no host program nothing
// but GPU programs reads or writes it, and a GPU array holds the same
// values, placed and mirrored like the object's other GPU maps. One that
// a host program uses stays a kernel map (type 2 + BPF_F_MMAPABLE).
func placeKernelShared(progs []*Program) error {
	byHost := map[*Map]bool{}
	for _, p := range progs {
		if !p.IsGPU() {
			for _, m := range p.Maps {
				byHost[m] = true
			}
		}
	}
	for _, p := range progs {
		for _, m := range p.Maps {
			if m.Declared != MapTypeKernelSharedArray || byHost[m] || m.Type != MapTypeArray {
				continue
			}
			m.Type = MapTypeGPUArray
			if err := checkGPUMap(m); err != nil {
				return fmt.Errorf("program %q: map %q (type %d, no host program: a GPU array): %w", p.Name, m.Name, m.Declared, err)
			}
		}
	}
	return nil
}

// IsGPU reports whether p runs inside a CUDA kernel (as opposed to a host
// program that is loaded into Linux).
func (p *Program) IsGPU() bool {
	switch p.Kind {
	case ProbeEntry, ProbeExit, ProbeMemCapture:
		return true
	}
	return false
}

// ParseSection derives the probe kind and target from an ELF section name:
// kprobe/<kernel> (entry), kretprobe/<kernel> (exit), kprobe/__memcapture or
// kprobe/__memcapture/<kernel> (memory accesses of every kernel, or of one),
// uprobe/<binary:symbol> and uretprobe/<binary:symbol> (host programs). A
// bare "uprobe" or "uretprobe" (libbpf's form for programs its loader
// attaches by hand) is a host program with no target: it cannot be
// attached by section, and callers skip it. A leading "?" (libbpf's
// optional marker) is ignored.
func ParseSection(section string) (ProbeKind, string, error) {
	s := strings.TrimPrefix(section, "?")
	var (
		kind   ProbeKind
		target string
	)
	switch {
	case s == "uprobe":
		return ProbeUprobe, "", nil
	case s == "uretprobe":
		return ProbeUretprobe, "", nil
	case s == sectionEntry+directRunTarget || strings.HasPrefix(s, sectionEntry+directRunTarget+"/"):
		return ProbeUnknown, "", fmt.Errorf("section %q: bpftime compiles such a program into a kernel of its own and launches it itself; gpuprobe runs programs only inside the application's kernels (kprobe/<kernel>, kretprobe/<kernel>, kprobe/__memcapture)", section)
	case s == sectionMemCapture:
		return ProbeMemCapture, "", nil
	case strings.HasPrefix(s, sectionMemCapture+"/"):
		kind, target = ProbeMemCapture, strings.TrimPrefix(s, sectionMemCapture+"/")
	case strings.HasPrefix(s, sectionEntry):
		kind, target = ProbeEntry, strings.TrimPrefix(s, sectionEntry)
	case strings.HasPrefix(s, sectionExit):
		kind, target = ProbeExit, strings.TrimPrefix(s, sectionExit)
	case strings.HasPrefix(s, sectionUprobe):
		kind, target = ProbeUprobe, strings.TrimPrefix(s, sectionUprobe)
	case strings.HasPrefix(s, sectionUretprobe):
		kind, target = ProbeUretprobe, strings.TrimPrefix(s, sectionUretprobe)
	default:
		return ProbeUnknown, "", fmt.Errorf("unsupported section %q: want kprobe/<kernel>, kretprobe/<kernel>, kprobe/__memcapture, uprobe/<target> or uretprobe/<target>", section)
	}
	if target == "" {
		return ProbeUnknown, "", fmt.Errorf("section %q names no target after the %q", section, "/")
	}
	return kind, target, nil
}

// convertProgram builds one Program. specMaps are the collection's map specs;
// seen caches converted maps so that programs sharing a map share one *Map.
func convertProgram(name string, ps *ebpf.ProgramSpec, specMaps map[string]*ebpf.MapSpec, seen map[string]*Map) (*Program, error) {
	kind, target, err := ParseSection(ps.SectionName)
	if err != nil {
		return nil, err
	}
	if len(ps.Instructions) == 0 {
		return nil, errors.New("no instructions")
	}
	insns := make(asm.Instructions, len(ps.Instructions))
	copy(insns, ps.Instructions)
	if err := checkHelperCalls(insns); err != nil {
		return nil, err
	}
	if err := resolveCalls(insns); err != nil {
		return nil, err
	}
	p := &Program{Name: name, Section: ps.SectionName, Kind: kind, Target: target, Insns: insns}
	if err := collectMaps(p, specMaps, seen); err != nil {
		return nil, err
	}
	return p, nil
}

// checkHelperCalls rejects helper calls whose immediate is negative:
// cilium/ebpf keeps such immediates as they are (placeholders for patching),
// but no helper has a negative id and the stream would not marshal.
func checkHelperCalls(insns asm.Instructions) error {
	for i := range insns {
		if insns[i].IsBuiltinCall() && insns[i].Constant < 0 {
			return fmt.Errorf("insn %d: call to helper %d, which is not a helper id", i, insns[i].Constant)
		}
	}
	return nil
}

// resolveCalls gives every bpf-to-bpf call (and function-pointer load) and
// every symbolic jump a concrete offset, counted in raw 8-byte instruction
// slots relative to the next instruction, as the kernel and
// asm.Instructions.Marshal expect. cilium/ebpf leaves such references with
// Constant (or Offset) -1 until it marshals the program.
func resolveCalls(insns asm.Instructions) error {
	symbols := make(map[string]asm.RawInstructionOffset)
	offsets := make([]asm.RawInstructionOffset, len(insns))
	var off asm.RawInstructionOffset
	for i := range insns {
		offsets[i] = off
		if sym := insns[i].Symbol(); sym != "" {
			if _, dup := symbols[sym]; dup {
				return fmt.Errorf("insn %d: duplicate function symbol %q", i, sym)
			}
			symbols[sym] = off
		}
		off += insns[i].Width()
	}
	for i := range insns {
		ins := &insns[i]
		ref := ins.Reference()
		if ref == "" || ins.IsLoadFromMap() {
			continue
		}
		isCall := ins.IsFunctionReference()
		isJump := ins.OpCode.Class().IsJump() && !ins.IsBuiltinCall() && ins.OpCode.JumpOp() != asm.Exit
		if !isCall && !isJump {
			continue
		}
		target, ok := symbols[ref]
		if !ok {
			return fmt.Errorf("insn %d: %v refers to %q, which is not in the program (extern functions are not supported)", i, ins.OpCode, ref)
		}
		rel := int64(target) - int64(offsets[i]) - 1
		switch {
		case isCall:
			ins.Constant = rel
		case ins.OpCode.Class() == asm.Jump32Class && ins.OpCode.JumpOp() == asm.Ja:
			ins.Constant = rel // gotol: 32-bit offset in the immediate
		default:
			if rel < -1<<15 || rel >= 1<<15 {
				return fmt.Errorf("insn %d: jump to %q is %d slots away, beyond a 16-bit offset", i, ref, rel)
			}
			ins.Offset = int16(rel)
		}
	}
	return checkCalls(insns, offsets, off)
}

// checkCalls makes sure every bpf-to-bpf call, resolved here or already
// concrete in the object, lands on the first slot of an instruction of the
// program. offsets are the raw slot of each instruction; end is the total;
// offsets ascend, so a target is found by binary search.
func checkCalls(insns asm.Instructions, offsets []asm.RawInstructionOffset, end asm.RawInstructionOffset) error {
	for i := range insns {
		if !insns[i].IsFunctionReference() {
			continue
		}
		target := int64(offsets[i]) + 1 + insns[i].Constant
		k := sort.Search(len(offsets), func(k int) bool { return int64(offsets[k]) >= target })
		if target < 0 || target >= int64(end) || k == len(offsets) || int64(offsets[k]) != target {
			return fmt.Errorf("insn %d: bpf-to-bpf call to slot %d, which is not an instruction of the program (%d slots)", i, target, end)
		}
	}
	return nil
}

// collectMaps fills p.Maps with the maps p's LD_IMM64 instructions reference,
// in order of first reference, and checks that each one exists.
func collectMaps(p *Program, specMaps map[string]*ebpf.MapSpec, seen map[string]*Map) error {
	inProg := make(map[string]bool)
	for i := range p.Insns {
		ins := &p.Insns[i]
		if !ins.IsLoadFromMap() {
			continue
		}
		ref := ins.Reference()
		if ref == "" {
			return fmt.Errorf("insn %d: map load without a map reference (relocation missing)", i)
		}
		if inProg[ref] {
			continue
		}
		ms, ok := specMaps[ref]
		if !ok || ms == nil {
			return fmt.Errorf("insn %d: reference to undefined map %q", i, ref)
		}
		if isDataSection(ref) && p.IsGPU() {
			return fmt.Errorf("insn %d (%s): GPU programs cannot use global data (section %q); "+
				"keep constants and strings on the stack (define BPF_NO_GLOBAL_DATA)", i, sourceOf(ins), ref)
		}
		m, ok := seen[ref]
		if !ok {
			var err error
			if m, err = convertMap(ref, ms); err != nil {
				return err
			}
			seen[ref] = m
		}
		if p.IsGPU() {
			if err := CheckGPUMapType(m); err != nil {
				return fmt.Errorf("insn %d (%s): %w", i, sourceOf(ins), err)
			}
		}
		inProg[ref] = true
		p.Maps = append(p.Maps, m)
	}
	return nil
}

// isDataSection reports whether a map name is one of the maps cilium/ebpf
// makes for global data sections (.data, .rodata, .bss, .kconfig, ...).
func isDataSection(name string) bool {
	return strings.HasPrefix(name, ".")
}

// sourceOf names an instruction's source line for error messages. BTF
// line 0 (code of no source line) has no text and counts as none.
func sourceOf(ins *asm.Instruction) string {
	if src := ins.Source(); src != nil {
		if text := strings.TrimSpace(src.String()); text != "" {
			return text
		}
	}
	return "no source line"
}

// convertMap turns a map definition into a Map and checks the GPU map types
// for definitions the GPU side cannot lay out.
func convertMap(name string, ms *ebpf.MapSpec) (*Map, error) {
	m := &Map{
		Name:       name,
		Type:       MapType(ms.Type),
		KeySize:    ms.KeySize,
		ValueSize:  ms.ValueSize,
		MaxEntries: ms.MaxEntries,
		Flags:      ms.Flags,
	}
	if t, ok := aliasedMapTypes[m.Type]; ok {
		m.Declared, m.Type = m.Type, t
		if m.Declared == MapTypeKernelSharedArray {
			// bpftime maps the kernel array into the device whether or
			// not the object sets the flag.
			m.Flags |= MapFlagMmapable
		}
	}
	if err := checkGPUMap(m); err != nil {
		return nil, fmt.Errorf("map %q (type %d): %w", name, m.Type, err)
	}
	return m, nil
}

// Largest value and entry count accepted for GPU-resident maps; regions are
// sized from them, so absurd definitions are rejected at load time.
const (
	maxGPUValueSize  = 1 << 20
	maxGPUMapEntries = 1 << 28
)

// checkGPUMap validates the definition of a GPU-resident map.
func checkGPUMap(m *Map) error {
	switch m.Type {
	case MapTypePerThreadArray, MapTypeGPUArray, MapTypePerWarpArray, MapTypePerBlockArray:
		if m.KeySize != 4 {
			return fmt.Errorf("key size %d, want 4 (a u32 index)", m.KeySize)
		}
		stride := (uint64(m.ValueSize) + 7) &^ 7
		if m.Type == MapTypePerBlockArray && uint64(m.MaxEntries)*stride > MaxBlockMapBytes {
			return fmt.Errorf("%d entries of %d bytes (%d with 8-byte alignment) take %d bytes of shared memory per block, more than the %d a per-block array may take",
				m.MaxEntries, m.ValueSize, stride, uint64(m.MaxEntries)*stride, MaxBlockMapBytes)
		}
	case MapTypeGPURingbuf:
	case MapTypeGPUHash:
		return checkGPUHash(m)
	default:
		return nil
	}
	switch {
	case m.ValueSize == 0:
		return errors.New("value size 0")
	case m.ValueSize > maxGPUValueSize:
		return fmt.Errorf("value size %d exceeds %d", m.ValueSize, maxGPUValueSize)
	case m.MaxEntries == 0:
		return errors.New("max_entries 0")
	case m.MaxEntries > maxGPUMapEntries:
		return fmt.Errorf("max_entries %d exceeds %d", m.MaxEntries, maxGPUMapEntries)
	}
	return nil
}
