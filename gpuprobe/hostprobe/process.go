package hostprobe

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf/link"
	"github.com/gpuprobe/gpuprobe/gpuprobe/hostprobe/internal/libfile"
)

// ErrTooManyProcesses is returned by AttachProcess for one more process
// than Options.MaxProcesses.
var ErrTooManyProcesses = errors.New("hostprobe: too many processes with per-process probes")

// maxMaxProcesses bounds Options.MaxProcesses: every process holds up to
// 16 links per file with uprobe_multi, 2 per symbol without.
const maxMaxProcesses = 4096

// procLinks are one process's per-process links, per file.
type procLinks struct {
	files map[fileKey][]link.Link
}

// AttachProcess probes the PerProcess symbols of an attached file (by
// device and inode; path must reach that inode, typically the path the
// process maps it by) in process pid only: the kernel installs their
// breakpoints in that process's memory and in no other's. It returns how
// many symbols it probes; a file without PerProcess symbols needs nothing
// (0). Attaching a process and file again is a no-op; a process that
// exits keeps its links, inert, until DetachProcess.
//
// A new process past Options.MaxProcesses is refused with
// ErrTooManyProcesses; a process that is gone fails with the kernel's
// error.
func (p *Probes) AttachProcess(pid int, path string, dev, ino uint64) (int, error) {
	if pid <= 0 {
		return 0, fmt.Errorf("hostprobe: attach pid %d: not a process id", pid)
	}
	p.procMu.Lock()
	defer p.procMu.Unlock()
	if p.closed.Load() {
		return 0, ErrClosed
	}
	key := fileKey{dev: dev, ino: ino}
	p.mu.Lock()
	a := p.files[key]
	p.mu.Unlock()
	if a == nil {
		return 0, fmt.Errorf("hostprobe: attach pid %d: %s (dev %d ino %d) is not attached", pid, path, dev, ino)
	}
	if len(a.PerProcess) == 0 {
		return 0, nil
	}
	pl := p.procs[pid]
	if pl != nil && pl.files[key] != nil {
		return len(a.PerProcess), nil
	}
	if pl == nil && len(p.procs) >= p.maxProcs {
		return 0, fmt.Errorf("%w (%d)", ErrTooManyProcesses, p.maxProcs)
	}
	links, err := p.attachFile(path, key, a.PerProcess, pid)
	if err != nil {
		return 0, fmt.Errorf("hostprobe: attach pid %d: %w", pid, err)
	}
	if pl == nil {
		pl = &procLinks{files: map[fileKey][]link.Link{}}
		p.procs[pid] = pl
	}
	pl.files[key] = links
	return len(a.PerProcess), nil
}

// attachFile opens path, checks that it is still the file key and
// attaches syms for pid.
func (p *Probes) attachFile(path string, key fileKey, syms []string, pid int) ([]link.Link, error) {
	f, err := libfile.OpenLink(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if got := (fileKey{dev: f.ID.Dev, ino: f.ID.Ino}); got != key {
		return nil, fmt.Errorf("%s is now dev %d ino %d, not the attached dev %d ino %d", path, got.dev, got.ino, key.dev, key.ino)
	}
	ex, err := link.OpenExecutable(f.Path())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p.attachSyms(ex, syms, pid)
}

// DetachProcess removes every per-process probe of pid (a process that
// now runs with the shim, or that exited). A pid without any is no error.
func (p *Probes) DetachProcess(pid int) error {
	p.procMu.Lock()
	defer p.procMu.Unlock()
	pl := p.procs[pid]
	if pl == nil {
		return nil
	}
	delete(p.procs, pid)
	var errs []error
	for _, links := range pl.files {
		errs = append(errs, closeLinks(links))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("hostprobe: detach pid %d: %w", pid, err)
	}
	return nil
}

// Processes returns the pids with per-process probes.
func (p *Probes) Processes() []int {
	p.procMu.Lock()
	defer p.procMu.Unlock()
	out := make([]int, 0, len(p.procs))
	for pid := range p.procs {
		out = append(out, pid)
	}
	return out
}

// detachFileProcs closes the per-process links on file key (the file is
// being detached). procMu is held.
func (p *Probes) detachFileProcs(key fileKey) error {
	var errs []error
	for pid, pl := range p.procs {
		if links, ok := pl.files[key]; ok {
			errs = append(errs, closeLinks(links))
			delete(pl.files, key)
		}
		if len(pl.files) == 0 {
			delete(p.procs, pid)
		}
	}
	return errors.Join(errs...)
}

// closeProcs closes every per-process link (Close).
func (p *Probes) closeProcs() error {
	p.procMu.Lock()
	defer p.procMu.Unlock()
	var errs []error
	for pid, pl := range p.procs {
		for _, links := range pl.files {
			errs = append(errs, closeLinks(links))
		}
		delete(p.procs, pid)
	}
	return errors.Join(errs...)
}
