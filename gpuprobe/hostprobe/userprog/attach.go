package userprog

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/gpuprobe/gpuprobe/gpuprobe/hostprobe/internal/libfile"
)

// Resolver turns the <binary> of a uprobe section (an absolute path or a
// library name such as libcudart.so) into the files to attach to.
type Resolver func(binary string) ([]string, error)

// DefaultResolve resolves an absolute (or relative) path that exists as
// itself; any other name through the dynamic linker's cache (ldconfig -p):
// every library of this machine's architecture whose file name starts with
// binary (libcudart.so finds libcudart.so.12 and libcudart.so.13).
func DefaultResolve(binary string) ([]string, error) {
	if strings.ContainsRune(binary, '/') {
		if _, err := os.Stat(binary); err != nil {
			return nil, fmt.Errorf("binary %q: %w", binary, err)
		}
		return []string{binary}, nil
	}
	entries, err := ldconfigEntries()
	if err != nil {
		return nil, fmt.Errorf("binary %q: %w", binary, err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.name, binary) && e.arch == hostLdconfigArch() {
			out = append(out, e.path)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("binary %q: no such file, and no library of that name in ldconfig's cache", binary)
	}
	return out, nil
}

// SearchDirs returns a Resolver that looks for files whose name starts
// with binary in dirs (in order), and falls back to DefaultResolve when
// none matches. Absolute paths resolve as themselves.
func SearchDirs(dirs ...string) Resolver {
	return func(binary string) ([]string, error) {
		if strings.ContainsRune(binary, '/') {
			return DefaultResolve(binary)
		}
		var out []string
		for _, d := range dirs {
			ents, err := os.ReadDir(d)
			if err != nil {
				continue // a configured directory that is absent is not fatal
			}
			for _, e := range ents {
				if !e.IsDir() && strings.HasPrefix(e.Name(), binary) {
					out = append(out, filepath.Join(d, e.Name()))
				}
			}
		}
		if len(out) > 0 {
			return out, nil
		}
		return DefaultResolve(binary)
	}
}

// ldconfigEntry is one line of ldconfig -p.
type ldconfigEntry struct{ name, arch, path string }

// hostLdconfigArch is the architecture tag ldconfig -p prints for this
// machine's libraries ("x86-64", "AArch64"); "" where it prints none.
func hostLdconfigArch() string {
	switch runtime.GOARCH {
	case "amd64":
		return "x86-64"
	case "arm64":
		return "AArch64"
	}
	return ""
}

// ldconfigEntries runs ldconfig -p (bounded to 10 s) and parses its lines
// "\tname (libc6,x86-64) => /path".
func ldconfigEntries() ([]ldconfigEntry, error) {
	bin := ""
	for _, c := range []string{"/sbin/ldconfig", "/usr/sbin/ldconfig"} {
		if _, err := os.Stat(c); err == nil {
			bin = c
			break
		}
	}
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("ldconfig"); err != nil {
			return nil, fmt.Errorf("ldconfig not found: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "-p").Output()
	if err != nil {
		return nil, fmt.Errorf("%s -p: %w", bin, err)
	}
	return parseLdconfig(out), nil
}

// parseLdconfig parses ldconfig -p output; lines it does not understand
// (the header) are skipped.
func parseLdconfig(out []byte) []ldconfigEntry {
	var entries []ldconfigEntry
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		lhs, path, ok := strings.Cut(line, " => ")
		if !ok {
			continue
		}
		name, flags, ok := strings.Cut(lhs, " (")
		if !ok {
			continue
		}
		flags = strings.TrimSuffix(flags, ")")
		arch := ""
		for _, f := range strings.Split(flags, ",") {
			if f == "x86-64" || f == "AArch64" {
				arch = f
			}
		}
		entries = append(entries, ldconfigEntry{name: strings.TrimSpace(name), arch: arch, path: strings.TrimSpace(path)})
	}
	return entries
}

// attach resolves p's binary and attaches p to every file, once per file
// (files are deduplicated by their real path: two names of one library are
// one inode, and a second uprobe on it would count every call twice).
func (s *Set) attach(p *program) {
	if p.rep.Symbol == "" {
		return // the section error is already reported
	}
	files, err := s.resolve(p.rep.Binary)
	if err != nil {
		p.rep.Errors = append(p.rep.Errors, fmt.Errorf("program %q (section %q): resolve: %w", p.rep.Name, p.rep.Section, err))
		return
	}
	for _, f := range files {
		s.attachFile(p, f)
	}
}

// attachFile attaches p to one file unless it is attached there already.
// The file is opened once: the symbol is looked up in, and the probe
// attached to, that descriptor's inode (through /proc/self/fd/N), not
// whatever the path names a moment later. Files are deduplicated by
// their real path and by that inode.
func (s *Set) attachFile(p *program, file string) {
	real, err := filepath.EvalSymlinks(file)
	if err != nil {
		p.rep.Errors = append(p.rep.Errors, fmt.Errorf("program %q (section %q): %s: %w", p.rep.Name, p.rep.Section, file, err))
		return
	}
	if _, ok := p.links[real]; ok {
		return
	}
	f, err := libfile.OpenLink(file)
	if err == nil {
		err = f.CheckWritable()
		defer f.Close() // after the probe is attached
	}
	if err != nil {
		p.rep.Errors = append(p.rep.Errors, fmt.Errorf("program %q (section %q): %w", p.rep.Name, p.rep.Section, err))
		return
	}
	id := [2]uint64{f.ID.Dev, f.ID.Ino}
	if p.inodes[id] {
		return
	}
	ex, err := link.OpenExecutable(f.Path())
	if err != nil {
		p.rep.Errors = append(p.rep.Errors, fmt.Errorf("program %q (section %q): %w", p.rep.Name, p.rep.Section, err))
		return
	}
	opts := &link.UprobeOptions{PID: 0} // every process that maps the file
	var l link.Link
	if p.rep.Return {
		l, err = ex.Uretprobe(p.rep.Symbol, p.prog, opts)
	} else {
		l, err = ex.Uprobe(p.rep.Symbol, p.prog, opts)
	}
	if err != nil {
		if errors.Is(err, link.ErrNoSymbol) {
			err = fmt.Errorf("symbol %q not found in %s: %w", p.rep.Symbol, real, err)
		}
		p.rep.Errors = append(p.rep.Errors, fmt.Errorf("program %q (section %q): attach to %s: %w", p.rep.Name, p.rep.Section, real, err))
		return
	}
	p.links[real] = l
	if p.inodes == nil {
		p.inodes = map[[2]uint64]bool{}
	}
	p.inodes[id] = true
	p.rep.Attached = append(p.rep.Attached, real)
	sort.Strings(p.rep.Attached)
}

// AttachFile attaches the programs whose section names binary to file as
// well (a library found later, e.g. inside a container through
// /proc/<pid>/root). It returns the programs newly attached and the errors.
func (s *Set) AttachFile(binary, file string) (int, error) {
	n := 0
	var errs []error
	for _, p := range s.progs {
		if p.rep.Binary != binary || p.rep.Symbol == "" {
			continue
		}
		before, nerr := len(p.links), len(p.rep.Errors)
		s.attachFile(p, file)
		if len(p.links) > before {
			n++
		}
		errs = append(errs, p.rep.Errors[nerr:]...)
	}
	return n, errors.Join(errs...)
}
