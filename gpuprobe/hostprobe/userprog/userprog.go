// Package userprog loads the host programs of the user's eBPF objects
// (config key programs): the programs in uprobe/<binary>:<symbol> and
// uretprobe/<binary>:<symbol> sections are loaded into Linux with
// cilium/ebpf and attached to every file <binary> resolves to, for all
// processes. Their maps are created in the kernel; a plain array that a GPU
// program of the same object also uses is created mmapable so that the
// collector can hand it to the application (SharedMaps).
//
// GPU programs of the object are not loaded here (the jit compiles them).
// The caller reads, checks and parses the object once (jit.ParseObject) and
// hands it over; Load only reads it.
package userprog

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/gpuprobe/gpuprobe/jit"
	"golang.org/x/sys/unix"
)

// Options configure Load.
type Options struct {
	// Attach names the programs (function names) to load; empty: all. Names
	// of GPU programs select the GPU programs that make an array shared.
	Attach []string
	// Resolve turns the <binary> of a section into files to attach to; nil:
	// DefaultResolve.
	Resolve Resolver
	// VerifierLogLines is how many lines of a verifier log (its end) go into
	// a load error; 0: 40.
	VerifierLogLines int
}

// Set is the host programs of one object, loaded and attached, with their
// maps. Close releases everything.
type Set struct {
	path    string
	spec    *ebpf.CollectionSpec // as parsed: original map definitions
	maps    map[string]*ebpf.Map // kernel maps by name
	mapRefs []string             // names of maps in maps, sorted
	shared  []string             // names of shared arrays, sorted
	progs   []*program
	notes   []string
	resolve Resolver
}

// program is one host program, loaded.
type program struct {
	rep  ProgramReport
	prog *ebpf.Program
	// links by resolved file; a file is attached once per program.
	links map[string]link.Link
	// inodes are the (dev, ino) of the files in links.
	inodes map[[2]uint64]bool
}

// ProgramReport says what became of one host program.
type ProgramReport struct {
	Name     string   // function name
	Section  string   // ELF section
	Binary   string   // <binary> of the section, as written
	Symbol   string   // <symbol> of the section
	Return   bool     // uretprobe
	Attached []string // files the program is attached to
	Errors   []error  // what failed: resolving the binary, a missing symbol, ...
	// Skipped is set on a program that cannot attach (its section names no
	// target): it is not loaded, and Errors[0] says why.
	Skipped bool
}

// Map is a kernel map of a host program, for export (arrays and ring
// buffers). Its fields match progmaps.KernelMap so that one converts to the
// other.
type Map struct {
	Object string        // the ELF object's path
	Name   string        // map name
	Spec   *ebpf.MapSpec // definition as written in the object (with the value's BTF type)
	Map    *ebpf.Map     // the kernel map; owned by the Set
}

// SharedMap is a BPF_MAP_TYPE_ARRAY used by host and GPU programs of one
// object, created with BPF_F_MMAPABLE: the application maps Size bytes of
// the map's fd (values at key × round_up(value_size, 8)).
type SharedMap struct {
	Name string
	Map  *ebpf.Map // owned by the Set
	Size uint64    // page-rounded max_entries × round_up(value_size, 8)
}

// ErrNoHostPrograms is returned (wrapped) by Load for an object with no
// host program selected: GPU-only objects are not an error for a caller
// that loads every configured object.
var ErrNoHostPrograms = errors.New("no host program (uprobe/ or uretprobe/ section) to load")

// Linux map type numbers used here (the jit has no ring-buffer constant).
const (
	mapTypeRingbuf = jit.MapType(ebpf.RingBuf)
)

// Load creates the maps of the host programs of obj, the object at path
// (checked and parsed once by the caller, jit.ParseObject), loads the
// programs into Linux and attaches them. obj is only read. A program that
// cannot be loaded (verifier, GPU-only map) fails Load; a program that
// cannot be attached somewhere is reported in Programs and the rest still
// attaches. A program that cannot attach at all (a bare "uprobe" section)
// is not loaded and is reported Skipped. Load fails with ErrNoHostPrograms
// when no host program is selected.
func Load(path string, obj *jit.Object, o Options) (*Set, error) {
	if obj == nil || obj.Spec == nil {
		return nil, fmt.Errorf("%s: no parsed object", path)
	}
	if o.Resolve == nil {
		o.Resolve = DefaultResolve
	}
	if o.VerifierLogLines <= 0 {
		o.VerifierLogLines = 40
	}
	progs, spec := obj.Programs, obj.Spec
	host, gpu, err := selectPrograms(progs, o.Attach, path)
	if err != nil {
		return nil, err
	}
	if len(host) == 0 {
		return nil, fmt.Errorf("%s: %w", path, ErrNoHostPrograms)
	}
	s := &Set{path: path, spec: spec, maps: map[string]*ebpf.Map{}, resolve: o.Resolve}
	if host = s.skipTargetless(host); len(host) == 0 {
		return s, nil
	}
	mapSpecs, err := s.planMaps(host, gpu)
	if err != nil {
		return nil, err
	}
	if err := s.createMaps(mapSpecs); err != nil {
		s.Close()
		return nil, err
	}
	for _, p := range host {
		if err := s.loadProgram(p, o.VerifierLogLines); err != nil {
			s.Close()
			return nil, err
		}
	}
	sort.Slice(s.progs, func(i, j int) bool { return s.progs[i].rep.Name < s.progs[j].rep.Name })
	for _, p := range s.progs {
		s.attach(p)
	}
	return s, nil
}

// skipTargetless reports the programs of host that name no target as
// Skipped and returns the others.
func (s *Set) skipTargetless(host []*jit.Program) []*jit.Program {
	var keep []*jit.Program
	for _, p := range host {
		if p.Target != "" {
			keep = append(keep, p)
			continue
		}
		err := fmt.Errorf("program %q (section %q) cannot attach: the section names no <binary>:<symbol> (libbpf attaches such programs from its loader's code, which the collector does not run); name the target in the section, e.g. uprobe/libcuda.so.1:cuLaunchKernel", p.Name, p.Section)
		s.progs = append(s.progs, &program{rep: ProgramReport{Name: p.Name, Section: p.Section,
			Return: p.Kind == jit.ProbeUretprobe, Errors: []error{err}, Skipped: true}})
	}
	return keep
}

// selectPrograms splits the programs named by attach (all when empty) into
// host and GPU programs; an unknown name is an error naming it.
func selectPrograms(progs []*jit.Program, attach []string, path string) (host, gpu []*jit.Program, err error) {
	sel := progs
	if len(attach) > 0 {
		sel = nil
		for j, name := range attach {
			k := slices.IndexFunc(progs, func(p *jit.Program) bool { return p.Name == name })
			if k < 0 {
				names := make([]string, len(progs))
				for n, p := range progs {
					names[n] = p.Name
				}
				return nil, nil, fmt.Errorf("%s: attach[%d]: no program %q (it has: %s)", path, j, name, strings.Join(names, ", "))
			}
			if !slices.Contains(sel, progs[k]) { // a name listed twice loads once
				sel = append(sel, progs[k])
			}
		}
	}
	for _, p := range sel {
		switch {
		case p.Kind == jit.ProbeUprobe || p.Kind == jit.ProbeUretprobe:
			host = append(host, p)
		case p.IsGPU():
			gpu = append(gpu, p)
		}
	}
	return host, gpu, nil
}

// isGPUOnly reports whether t is one of the map types that live in GPU
// memory (bpftime's 1502/1503/1527 and our 1600/1601).
func isGPUOnly(t jit.MapType) bool {
	switch t {
	case jit.MapTypePerThreadArray, jit.MapTypeGPUArray, jit.MapTypeGPURingbuf, jit.MapTypePerWarpArray, jit.MapTypePerBlockArray:
		return true
	}
	return false
}

// planMaps checks the maps of the host programs and returns the specs to
// create: shared arrays get BPF_F_MMAPABLE, ring buffers lose the record
// type they declare for the collector (the kernel wants none).
func (s *Set) planMaps(host, gpu []*jit.Program) (map[string]*ebpf.MapSpec, error) {
	usedByGPU := map[string]bool{}
	for _, p := range gpu {
		for _, m := range p.Maps {
			usedByGPU[m.Name] = true
		}
	}
	out := map[string]*ebpf.MapSpec{}
	for _, p := range host {
		for _, m := range p.Maps {
			if isGPUOnly(m.Type) {
				return nil, fmt.Errorf("%s: program %q (section %q): map %q has type %d, a GPU-only map type (1502, 1503, 1527, 1600); host programs can use Linux maps only (share a BPF_MAP_TYPE_ARRAY with GPU programs instead)",
					s.path, p.Name, p.Section, m.Name, m.Type)
			}
			if _, done := out[m.Name]; done {
				continue
			}
			orig := s.spec.Maps[m.Name]
			if orig == nil {
				return nil, fmt.Errorf("%s: program %q: map %q has no definition", s.path, p.Name, m.Name)
			}
			ms := orig.Copy()
			if m.Declared == jit.MapTypeKernelSharedArray {
				// bpftime's 1504 is a Linux array the GPU maps; Linux
				// knows it by its own number.
				ms.Type, ms.Flags = ebpf.Array, ms.Flags|unix.BPF_F_MMAPABLE
			}
			switch {
			case m.Type == jit.MapTypeArray && usedByGPU[m.Name]:
				if ms.Flags&unix.BPF_F_MMAPABLE == 0 {
					ms.Flags |= unix.BPF_F_MMAPABLE
					s.notes = append(s.notes, fmt.Sprintf("map %q is shared by host and GPU programs: created with BPF_F_MMAPABLE, which the object does not set", m.Name))
				}
				s.shared = append(s.shared, m.Name)
			case m.Type == mapTypeRingbuf:
				if orig.Value == nil {
					return nil, fmt.Errorf("%s: program %q: ring buffer %q declares no record type; add __type(value, struct <record>) so that the collector can decode its records (the kernel map is created without it)",
						s.path, p.Name, m.Name)
				}
				ms.Key, ms.Value, ms.KeySize, ms.ValueSize = nil, nil, 0, 0
			}
			out[m.Name] = ms
		}
	}
	sort.Strings(s.shared)
	return out, nil
}

// createMaps creates the planned maps in the kernel.
func (s *Set) createMaps(specs map[string]*ebpf.MapSpec) error {
	coll, err := ebpf.NewCollectionWithOptions(&ebpf.CollectionSpec{
		Maps: specs, Types: s.spec.Types, ByteOrder: s.spec.ByteOrder,
	}, ebpf.CollectionOptions{})
	if err != nil {
		return fmt.Errorf("%s: create maps of host programs: %w", s.path, err)
	}
	for name, m := range coll.Maps {
		s.maps[name] = m
		s.mapRefs = append(s.mapRefs, name)
	}
	sort.Strings(s.mapRefs)
	// The Set owns the maps now; the collection holds nothing else.
	return nil
}

// loadProgram loads one host program, its map references bound to the
// created maps.
func (s *Set) loadProgram(p *jit.Program, logLines int) error {
	ps := s.spec.Programs[p.Name]
	if ps == nil {
		return fmt.Errorf("%s: program %q: not in the parsed collection", s.path, p.Name)
	}
	ps = ps.Copy()
	ps.Type = ebpf.Kprobe // uprobes are kprobe-type programs
	for i := range ps.Instructions {
		ins := &ps.Instructions[i]
		if !ins.IsLoadFromMap() || ins.Reference() == "" {
			continue
		}
		m := s.maps[ins.Reference()]
		if m == nil {
			return fmt.Errorf("%s: program %q (section %q): map %q was not created", s.path, p.Name, p.Section, ins.Reference())
		}
		if err := ins.AssociateMap(m); err != nil {
			return fmt.Errorf("%s: program %q: map %q: %w", s.path, p.Name, ins.Reference(), err)
		}
	}
	prog, err := ebpf.NewProgramWithOptions(ps, ebpf.ProgramOptions{})
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return fmt.Errorf("%s: program %q (section %q): the kernel's verifier rejected it: %w\nverifier log (last %d lines):\n%-*v",
				s.path, p.Name, p.Section, err, logLines, logLines, ve)
		}
		return fmt.Errorf("%s: program %q (section %q): load into Linux: %w", s.path, p.Name, p.Section, err)
	}
	binary, symbol, err := splitTarget(p.Target)
	rep := ProgramReport{Name: p.Name, Section: p.Section, Binary: binary, Symbol: symbol, Return: p.Kind == jit.ProbeUretprobe}
	if err != nil {
		rep.Errors = append(rep.Errors, fmt.Errorf("section %q: %w", p.Section, err))
	}
	s.progs = append(s.progs, &program{rep: rep, prog: prog, links: map[string]link.Link{}})
	return nil
}

// splitTarget splits "<binary>:<symbol>" at its last colon.
func splitTarget(target string) (string, string, error) {
	i := strings.LastIndexByte(target, ':')
	if i <= 0 || i == len(target)-1 {
		return target, "", fmt.Errorf("target %q is not <binary>:<symbol>", target)
	}
	return target[:i], target[i+1:], nil
}

// Path is the object's path.
func (s *Set) Path() string { return s.path }

// Notes are remarks made while loading (flags added to shared maps).
func (s *Set) Notes() []string { return slices.Clone(s.notes) }

// Programs reports, per host program (sorted by name), where it is attached and what failed.
func (s *Set) Programs() []ProgramReport {
	out := make([]ProgramReport, len(s.progs))
	for i, p := range s.progs {
		r := p.rep
		r.Attached = slices.Clone(r.Attached)
		r.Errors = slices.Clone(r.Errors)
		out[i] = r
	}
	return out
}

// Maps returns the host programs' arrays and ring buffers, for export
// (global data sections and other map types are left out), sorted by name.
func (s *Set) Maps() []Map {
	var out []Map
	for _, name := range s.mapRefs {
		orig := s.spec.Maps[name]
		if orig == nil || strings.HasPrefix(name, ".") {
			continue
		}
		if orig.Type == ebpf.MapType(jit.MapTypeKernelSharedArray) {
			// Exported as the Linux array it was created as.
			orig = orig.Copy()
			orig.Type = ebpf.Array
		}
		if orig.Type != ebpf.Array && orig.Type != ebpf.RingBuf {
			continue
		}
		out = append(out, Map{Object: s.path, Name: name, Spec: orig, Map: s.maps[name]})
	}
	return out
}

// SharedMaps returns the arrays used by both host and GPU programs, sorted
// by name.
func (s *Set) SharedMaps() []SharedMap {
	out := make([]SharedMap, 0, len(s.shared))
	page := uint64(os.Getpagesize())
	for _, name := range s.shared {
		m := s.maps[name]
		size := uint64(m.MaxEntries()) * ((uint64(m.ValueSize()) + 7) &^ 7)
		size = (size + page - 1) / page * page
		out = append(out, SharedMap{Name: name, Map: m, Size: size})
	}
	return out
}

// Close detaches every program and closes programs and maps.
func (s *Set) Close() error {
	var errs []error
	for _, p := range s.progs {
		for file, l := range p.links {
			if err := l.Close(); err != nil {
				errs = append(errs, fmt.Errorf("program %q on %s: %w", p.rep.Name, file, err))
			}
		}
		p.links, p.inodes = nil, nil
		if p.prog == nil {
			continue // skipped, never loaded
		}
		if err := p.prog.Close(); err != nil {
			errs = append(errs, fmt.Errorf("program %q: %w", p.rep.Name, err))
		}
	}
	s.progs = nil
	for _, name := range s.mapRefs {
		if err := s.maps[name].Close(); err != nil {
			errs = append(errs, fmt.Errorf("map %q: %w", name, err))
		}
	}
	s.maps, s.mapRefs, s.shared = nil, nil, nil
	return errors.Join(errs...)
}
