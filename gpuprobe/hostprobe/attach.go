package hostprobe

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"syscall"

	"github.com/cilium/ebpf/link"
	"github.com/gpuprobe/gpuprobe/gpuprobe/hostprobe/internal/libfile"
	"github.com/gpuprobe/gpuprobe/record"
)

// Name functions: their successful returns become record.KernelName.
const (
	SymModuleGetFunction = "cuModuleGetFunction"
	SymLibraryGetKernel  = "cuLibraryGetKernel"
)

// Symbols lists every symbol the probes attach to: the record.HostAPIs in
// numeric order, then the two name functions.
func Symbols() []string {
	apis := record.HostAPIs()
	out := make([]string, 0, len(apis)+2)
	for _, a := range apis {
		out = append(out, a.String())
	}
	return append(out, SymModuleGetFunction, SymLibraryGetKernel)
}

// Attachment is what Attach found and attached in one file.
type Attachment struct {
	// Path is the path the file was first attached by.
	Path string
	// Attached lists the symbols whose entry and return probes are
	// attached for every process, in Symbols order.
	Attached []string
	// PerProcess lists the symbols the file defines that are left to
	// AttachProcess (Options.ShimCoveredPerProcess), in Symbols order.
	PerProcess []string
	// APIs are the HostAPIs among Attached and PerProcess.
	APIs []record.HostAPI
	// Missing lists the known symbols the file does not define.
	Missing []string
	// Stripped is set when the file has no .symtab (only its .dynsym,
	// the exported symbols, could be searched): statically linked
	// runtime functions in a stripped executable cannot be found.
	Stripped bool

	key   fileKey
	links []link.Link
}

type fileKey struct{ dev, ino uint64 }

func (a *Attachment) close() error {
	err := closeLinks(a.links)
	a.links = nil
	return err
}

// Attach puts the entry and return probes on every known symbol that the
// ELF file at path (a shared library such as libcuda.so.1 or
// libcudart.so.13, or an executable with a statically linked runtime)
// defines, for all processes, those running now and those started later.
// A file with none of the symbols is an error, and so is a file every
// user may write. Attaching a file that is already attached (the same
// device and inode, by any path) returns the first Attachment.
//
// The file is opened once: its identity, its symbols and the probes are
// of that one descriptor, whatever is renamed over path meanwhile.
func (p *Probes) Attach(path string) (*Attachment, error) { return p.attach(path, nil) }

// AttachInode is Attach for a file whose identity was checked before
// (discover.Library's Dev and Ino): it refuses the file at path unless it
// is still that inode.
func (p *Probes) AttachInode(path string, dev, ino uint64) (*Attachment, error) {
	return p.attach(path, &fileKey{dev: dev, ino: ino})
}

func (p *Probes) attach(path string, want *fileKey) (*Attachment, error) {
	if p.closed.Load() {
		return nil, ErrClosed
	}
	// The kernel follows symlinks (and /proc/<pid>/root): what it
	// reaches is checked by the descriptor's identity.
	f, err := libfile.OpenLink(path)
	if err != nil {
		return nil, fmt.Errorf("hostprobe: attach %s: %w", path, err)
	}
	defer f.Close() // after the probes are attached
	key := fileKey{dev: f.ID.Dev, ino: f.ID.Ino}
	if want != nil && key != *want {
		return nil, fmt.Errorf("hostprobe: attach %s: the file is now dev %d ino %d, not the dev %d ino %d checked: replaced", path, key.dev, key.ino, want.dev, want.ino)
	}
	if err := f.CheckWritable(); err != nil {
		return nil, fmt.Errorf("hostprobe: attach: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed.Load() {
		return nil, ErrClosed
	}
	if a, ok := p.files[key]; ok {
		return a, nil
	}
	if testHookChecked != nil {
		testHookChecked(path)
	}
	defined, stripped, err := definedFuncs(f)
	if err != nil {
		return nil, fmt.Errorf("hostprobe: attach %s: %w", path, err)
	}
	a := &Attachment{Path: path, Stripped: stripped, key: key}
	for _, sym := range Symbols() {
		switch {
		case !defined[sym]:
			a.Missing = append(a.Missing, sym)
		case p.split && ShimCovered(sym):
			a.PerProcess = append(a.PerProcess, sym)
		default:
			a.Attached = append(a.Attached, sym)
		}
		if defined[sym] && apiOf(sym) != record.HostAPIUnknown {
			a.APIs = append(a.APIs, apiOf(sym))
		}
	}
	if len(a.Attached)+len(a.PerProcess) == 0 {
		how := ".symtab and .dynsym"
		if stripped {
			how = ".dynsym (the file is stripped: no .symtab)"
		}
		return nil, fmt.Errorf("hostprobe: attach %s: none of the %d CUDA runtime or driver symbols is defined in its %s", path, len(a.Missing), how)
	}
	ex, err := link.OpenExecutable(f.Path()) // the inode checked, not the path again
	if err != nil {
		return nil, fmt.Errorf("hostprobe: attach %s: %w", path, err)
	}
	if a.links, err = p.attachSyms(ex, a.Attached, 0); err != nil {
		return nil, fmt.Errorf("hostprobe: attach %s: %w", path, err)
	}
	p.files[key] = a
	return a, nil
}

// testHookChecked, when set by a test, runs between the identity check
// of a file and the reading of its symbols.
var testHookChecked func(path string)

// Detach removes the probes that Attach and AttachProcess put on the file
// at path (found by its device and inode, or by the path it was attached
// by when the file is gone). A file that is not attached is an error.
func (p *Probes) Detach(path string) error {
	p.procMu.Lock()
	defer p.procMu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed.Load() {
		return ErrClosed
	}
	var a *Attachment
	if key, err := statKey(path); err == nil {
		a = p.files[key]
	}
	if a == nil {
		for _, f := range p.files {
			if f.Path == path {
				a = f
				break
			}
		}
	}
	if a == nil {
		return fmt.Errorf("hostprobe: detach %s: not attached", path)
	}
	delete(p.files, a.key)
	if err := errors.Join(p.detachFileProcs(a.key), a.close()); err != nil {
		return fmt.Errorf("hostprobe: detach %s: %w", path, err)
	}
	return nil
}

// Attachments returns the files attached now.
func (p *Probes) Attachments() []*Attachment {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*Attachment, 0, len(p.files))
	for _, a := range p.files {
		out = append(out, a)
	}
	return out
}

// attachSyms attaches the probes of syms for process pid (0: every
// process), grouped by shape: one uprobe_multi link per shape and
// direction, or one perf-event uprobe per symbol and direction. The return
// probes go first: an entry without its return would leave a pending call
// behind. On error the links made so far are closed.
func (p *Probes) attachSyms(ex *link.Executable, syms []string, pid int) (links []link.Link, err error) {
	defer func() {
		if err != nil {
			closeLinks(links)
			links = nil
		}
	}()
	groups := map[shape][]string{}
	for _, sym := range syms {
		sh := shapeOf(sym)
		groups[sh] = append(groups[sh], sym)
	}
	for sh := shapePlain; sh <= shapeName; sh++ {
		group := groups[sh]
		if len(group) == 0 {
			continue
		}
		cookies := make([]uint64, len(group))
		for i, sym := range group {
			cookies[i] = cookieOf(sym)
		}
		enter, exit := p.coll.Programs["enter_"+sh.String()], p.coll.Programs["exit_"+sh.String()]
		if enter == nil || exit == nil {
			return links, fmt.Errorf("no programs for shape %s in the eBPF object", sh)
		}
		if p.multi {
			opts := &link.UprobeMultiOptions{Cookies: cookies, PID: uint32(pid)} // PID 0: every process
			l, err := ex.UretprobeMulti(group, exit, opts)
			if err != nil {
				return links, fmt.Errorf("uretprobe_multi on %v: %w", group, err)
			}
			links = append(links, l)
			if l, err = ex.UprobeMulti(group, enter, opts); err != nil {
				return links, fmt.Errorf("uprobe_multi on %v: %w", group, err)
			}
			links = append(links, l)
			continue
		}
		for i, sym := range group {
			opts := &link.UprobeOptions{Cookie: cookies[i], PID: pid}
			l, err := ex.Uretprobe(sym, exit, opts)
			if err != nil {
				return links, fmt.Errorf("uretprobe on %s: %w", sym, err)
			}
			links = append(links, l)
			if l, err = ex.Uprobe(sym, enter, opts); err != nil {
				return links, fmt.Errorf("uprobe on %s: %w", sym, err)
			}
			links = append(links, l)
		}
	}
	return links, nil
}

func closeLinks(links []link.Link) error {
	var errs []error
	for _, l := range links {
		errs = append(errs, l.Close())
	}
	return errors.Join(errs...)
}

// shape is what a probe reads besides the register arguments (enum shape
// in bpf/cudahost.bpf.c).
type shape int

const (
	shapePlain  shape = iota // registers only
	shapeStack2              // + 2 stack words: cudaLaunchKernel's shmem, stream
	shapeStack3              // + 3 stack words: cuLaunchKernel's blockDimZ, shmem, stream
	shapeCfg                 // + the launch config arg 0 points to
	shapeOut                 // at return: *arg0 (the allocated pointer, the created stream)
	shapeName                // at return: *arg0 and the name string at arg 2
)

func (s shape) String() string {
	return [...]string{"plain", "stack2", "stack3", "cfg", "out", "name"}[s]
}

func shapeOf(sym string) shape {
	switch sym {
	case SymModuleGetFunction, SymLibraryGetKernel:
		return shapeName
	}
	switch api := apiOf(sym); api {
	case record.HostCudaLaunchKernel, record.HostCudaLaunchKernelPtsz, record.HostCudaLaunchCooperative:
		return shapeStack2
	case record.HostCuLaunchKernel, record.HostCuLaunchKernelPtsz, record.HostCuLaunchCooperativeKern:
		return shapeStack3
	case record.HostCudaLaunchKernelExC, record.HostCudaLaunchKernelExCPtsz, record.HostCuLaunchKernelEx, record.HostCuLaunchKernelExPtsz:
		return shapeCfg
	default:
		if api.Category() == record.HostCatAlloc || api.CreatesStream() {
			return shapeOut
		}
	}
	return shapePlain
}

// cookieOf is the API number the programs read from the attach cookie.
func cookieOf(sym string) uint64 {
	switch sym {
	case SymModuleGetFunction:
		return apiModuleGetFunction
	case SymLibraryGetKernel:
		return apiLibraryGetKernel
	}
	return uint64(apiOf(sym))
}

var apiBySymbol = func() map[string]record.HostAPI {
	m := map[string]record.HostAPI{}
	for _, a := range record.HostAPIs() {
		m[a.String()] = a
	}
	return m
}()

func apiOf(sym string) record.HostAPI { return apiBySymbol[sym] }

func statKey(path string) (fileKey, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileKey{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileKey{}, fmt.Errorf("no device and inode for %s", path)
	}
	if !fi.Mode().IsRegular() {
		return fileKey{}, fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	return fileKey{dev: st.Dev, ino: st.Ino}, nil
}

// hostMachine is the ELF machine of the architectures the host probes are
// built for (gen.go): a binary of another machine cannot run here.
var hostMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// definedFuncs returns the function symbols that the open ELF file defines
// (in .symtab or .dynsym, not undefined imports) and whether it lacks a
// .symtab.
func definedFuncs(file *libfile.File) (map[string]bool, bool, error) {
	f, err := elf.NewFile(io.NewSectionReader(file, 0, file.ID.Size))
	if err != nil {
		return nil, false, fmt.Errorf("not an ELF file we can read: %w", err)
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return nil, false, fmt.Errorf("ELF type %s is neither an executable nor a shared library", f.Type)
	}
	if want, ok := hostMachine[runtime.GOARCH]; !ok || f.Machine != want {
		return nil, false, fmt.Errorf("ELF machine %s: the probes run on this host's %s", f.Machine, runtime.GOARCH)
	}
	out := map[string]bool{}
	syms, err := f.Symbols()
	stripped := errors.Is(err, elf.ErrNoSymbols)
	if err != nil && !stripped {
		return nil, false, fmt.Errorf("reading .symtab: %w", err)
	}
	dyn, err := f.DynamicSymbols()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return nil, false, fmt.Errorf("reading .dynsym: %w", err)
	}
	for _, s := range append(syms, dyn...) {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Section != elf.SHN_UNDEF && s.Value != 0 {
			out[s.Name] = true
		}
	}
	return out, stripped, nil
}
