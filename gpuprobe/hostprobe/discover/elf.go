package discover

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/gpuprobe/gpuprobe/gpuprobe/hostprobe/internal/libfile"
)

// Symbols that mark a CUDA library when its name does not.
const (
	runtimeSymbol = "cudaLaunchKernel"
	driverSymbol  = "cuLaunchKernel"
)

// maxStrtab bounds the string tables read from one file (a corrupt header
// must not make the collector allocate gigabytes).
const maxStrtab = 1 << 30

// elfInfo is what inspectELF learns about a file.
type elfInfo struct {
	// executable: ET_EXEC, or ET_DYN with a PT_INTERP (a PIE).
	executable bool
	// runtime and driver: cudaLaunchKernel / cuLaunchKernel is defined
	// (not merely referenced) in .symtab or .dynsym.
	runtime, driver bool
}

// kind classifies the file by its symbols.
func (e elfInfo) kind() Kind {
	switch {
	case e.runtime && e.executable:
		return KindStaticRuntime
	case e.runtime:
		return KindRuntime
	case e.driver:
		return KindDriver
	}
	return KindUnknown
}

// errNotELF says a file is not ELF at all.
var errNotELF = errors.New("not an ELF file")

// inspectELF looks for defined CUDA entry points in the open file, the
// one whose identity was checked. It never panics on a malformed file:
// debug/elf's panics become errors.
func inspectELF(file *libfile.File) (info elfInfo, err error) {
	path := file.Name
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: malformed ELF: %v", path, r)
		}
	}()
	var magic [4]byte
	if _, err := file.ReadAt(magic[:], 0); err != nil || string(magic[:]) != elf.ELFMAG {
		return elfInfo{}, fmt.Errorf("%s: %w", path, errNotELF)
	}
	f, err := elf.NewFile(io.NewSectionReader(file, 0, file.ID.Size))
	if err != nil {
		return elfInfo{}, fmt.Errorf("%s: malformed ELF: %w", path, err)
	}
	info.executable = f.Type == elf.ET_EXEC
	if f.Type == elf.ET_DYN {
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				info.executable = true
				break
			}
		}
	}
	for _, tab := range []struct {
		strtab string
		syms   func() ([]elf.Symbol, error)
	}{{".strtab", f.Symbols}, {".dynstr", f.DynamicSymbols}} {
		sec := f.Section(tab.strtab)
		if sec == nil || sec.Type == elf.SHT_NOBITS {
			continue
		}
		if sec.Size > maxStrtab {
			return elfInfo{}, fmt.Errorf("%s: %s is %d bytes, more than the %d read", path, tab.strtab, sec.Size, maxStrtab)
		}
		// Most executables do not mention CUDA at all: a substring test
		// on the string table is far cheaper than decoding every symbol.
		data, err := sec.Data()
		if err != nil {
			return elfInfo{}, fmt.Errorf("%s: reading %s: %w", path, tab.strtab, err)
		}
		hasRT := bytes.Contains(data, []byte(runtimeSymbol+"\x00"))
		hasDrv := bytes.Contains(data, []byte(driverSymbol+"\x00"))
		if !hasRT && !hasDrv {
			continue
		}
		syms, err := tab.syms()
		if err != nil {
			if errors.Is(err, elf.ErrNoSymbols) {
				continue
			}
			return elfInfo{}, fmt.Errorf("%s: reading symbols: %w", path, err)
		}
		for _, s := range syms {
			if s.Section == elf.SHN_UNDEF || elf.ST_TYPE(s.Info) != elf.STT_FUNC {
				continue
			}
			switch s.Name {
			case runtimeSymbol:
				info.runtime = true
			case driverSymbol:
				info.driver = true
			}
		}
	}
	return info, nil
}

// exeCache remembers inspectELF's verdict per file version, so that an
// executable shared by many processes is read once.
type exeCache struct {
	mu sync.Mutex
	m  map[fileID]exeVerdict
}

type exeVerdict struct {
	info elfInfo
	err  error
}

// get returns the verdict for f, inspecting it on a miss; miss says
// whether it did.
func (c *exeCache) get(f *libfile.File) (info elfInfo, miss bool, err error) {
	id := idOfFile(f)
	c.mu.Lock()
	v, ok := c.m[id]
	c.mu.Unlock()
	if ok {
		return v.info, false, v.err
	}
	info, err = inspectELF(f)
	if err != nil && isGone(err) {
		return info, true, err // not a verdict on the file: do not cache
	}
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[fileID]exeVerdict)
	}
	c.m[id] = exeVerdict{info, err}
	c.mu.Unlock()
	return info, true, err
}

// prune forgets verdicts of files not in keep.
func (c *exeCache) prune(keep map[fileID]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.m {
		if !keep[id] {
			delete(c.m, id)
		}
	}
}
