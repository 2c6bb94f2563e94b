// Package discover finds the CUDA libraries that host uprobes attach to:
// libcuda (the driver), libcudart (the runtime) and executables that link
// the runtime statically (nvcc's default).
//
// Sources are the paths of the configuration (FromConfig), the dynamic
// linker's cache (FromLdconfig) and the executable mappings of running
// processes, containers included (Scanner, ScanProcs). A Watcher combines
// them and reports each library file once.
//
// Identity: uprobes attach to an inode, so a Library is one (Dev, Ino) as
// fstat(2) gives it for the descriptor its ELF was read through. Symlinks
// and hard links to one file are one Library. A file is opened once per
// check (internal/libfile): a file renamed over the path meanwhile is
// never read under the first file's identity, and the attach checks the
// identity again (hostprobe.Probes.AttachInode).
//
// Ownership: files from the configuration and ldconfig, root's library
// locations, must be owned by root (or the collector's user) and not be
// writable by every user. Files that processes map may belong to their
// user (a virtual environment's libcudart) but not be writable by every
// user; refusals are counted in ScanStats.Refused.
package discover

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/gpuprobe/gpuprobe/gpuprobe/hostprobe/internal/libfile"
)

// Kind is what a library file is to CUDA.
type Kind int

// Kinds of library.
const (
	// KindUnknown is the zero value: not a CUDA library.
	KindUnknown Kind = iota
	// KindDriver is libcuda.so*, the driver API.
	KindDriver
	// KindRuntime is libcudart.so*, the shared runtime.
	KindRuntime
	// KindStaticRuntime is an executable that defines cudaLaunchKernel in
	// its .symtab or .dynsym: the runtime linked statically (nvcc's default).
	KindStaticRuntime
)

// String names the kind.
func (k Kind) String() string {
	switch k {
	case KindDriver:
		return "driver"
	case KindRuntime:
		return "runtime"
	case KindStaticRuntime:
		return "static-runtime"
	default:
		return fmt.Sprintf("unknown(%d)", int(k))
	}
}

// Library is one CUDA library file to probe.
type Library struct {
	// Path is a path the collector can open. For a file seen in another
	// mount namespace it is /proc/<pid>/root/<path in the process>, valid
	// while that process lives.
	Path string
	// Dev and Ino are stat(2)'s st_dev and st_ino of Path: the identity.
	Dev, Ino uint64
	// Kind says what the file is.
	Kind Kind
	// Source says where it was found: "config host_probes::library_paths[0]",
	// "ldconfig", "pid 1234 maps", "pid 1234 exe".
	Source string
	// PIDs are the processes it was seen mapped in (sorted; empty for the
	// config and ldconfig sources).
	PIDs []int
}

// Key is a library's identity.
type Key struct {
	// Dev is st_dev.
	Dev uint64
	// Ino is st_ino.
	Ino uint64
}

// Key returns l's identity.
func (l Library) Key() Key { return Key{l.Dev, l.Ino} }

// String describes l in one line.
func (l Library) String() string {
	s := fmt.Sprintf("%s %s (dev %d ino %d, %s)", l.Kind, l.Path, l.Dev, l.Ino, l.Source)
	if len(l.PIDs) > 0 {
		s += fmt.Sprintf(" pids %v", l.PIDs)
	}
	return s
}

// KindOfName classifies a file by its base name: libcuda.so and
// libcuda.so.<anything> are the driver, libcudart.so[.<anything>] the
// runtime; anything else is KindUnknown.
func KindOfName(name string) Kind {
	name = filepath.Base(name)
	switch {
	case isSoName(name, "libcuda.so"):
		return KindDriver
	case isSoName(name, "libcudart.so"):
		return KindRuntime
	}
	return KindUnknown
}

func isSoName(name, stem string) bool {
	return name == stem || (strings.HasPrefix(name, stem+".") && len(name) > len(stem)+1)
}

// fileID is what the collector knows about a file from stat(2).
type fileID struct {
	dev, ino uint64
	size     int64
	mtimeNS  int64
}

func (f fileID) key() Key { return Key{f.dev, f.ino} }

// idOfFile is the identity of an open file.
func idOfFile(f *libfile.File) fileID {
	return fileID{dev: f.ID.Dev, ino: f.ID.Ino, size: f.ID.Size, mtimeNS: f.ID.MtimeNS}
}

// statID stats path (following symlinks) and returns its identity. It
// fails for anything but a regular file. Only for files that are not
// read afterwards (the mount namespace links); a library is opened with
// libfile.Open.
func statID(path string) (fileID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, err
	}
	return idOf(path, fi)
}

func idOf(path string, fi fs.FileInfo) (fileID, error) {
	if !fi.Mode().IsRegular() {
		return fileID{}, fmt.Errorf("%s: not a regular file (%s)", path, fi.Mode().Type())
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, fmt.Errorf("%s: no stat_t from the file system", path)
	}
	return fileID{
		dev:     uint64(st.Dev), //nolint:unconvert // st_dev is not uint64 on every GOARCH
		ino:     st.Ino,
		size:    fi.Size(),
		mtimeNS: fi.ModTime().UnixNano(),
	}, nil
}

// isGone reports whether err means the file or process went away, which is
// normal while scanning /proc.
func isGone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

// sortLibraries orders libraries by path, then identity, for stable output.
func sortLibraries(libs []Library) {
	slices.SortFunc(libs, func(a, b Library) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		if a.Dev != b.Dev {
			return cmpU64(a.Dev, b.Dev)
		}
		return cmpU64(a.Ino, b.Ino)
	})
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
