// Package libfile opens a library file once for the root collector, so
// that the file whose identity and owner are checked is the file whose
// ELF is parsed and the file the uprobes attach to.
//
// Checking by path and then opening the path again lets anyone who can
// rename in a directory on the path (or who controls a container's root,
// reached through /proc/<pid>/root) swap the file in between. A File is
// one descriptor: fstat(2) gives its identity, its ELF is read through
// it, and the uprobes attach through Path, /proc/self/fd/<n>, which the
// kernel resolves to the same inode while the File is open.
package libfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// MaxOpen bounds the Files open at once in this process. Discovery and
// attaching hold one each while they work; the bound keeps a bug or a
// flood of candidates from exhausting the collector's descriptors.
const MaxOpen = 16

var slots = make(chan struct{}, MaxOpen)

// ErrTooManyOpen says MaxOpen Files are open already.
var ErrTooManyOpen = fmt.Errorf("more than %d library files open at once", MaxOpen)

// ID is a file's identity and version as fstat(2) gives them.
type ID struct {
	Dev, Ino uint64
	Size     int64
	MtimeNS  int64
}

// File is one open regular file.
type File struct {
	*os.File
	// ID is fstat's identity of the descriptor.
	ID ID
	// UID is the owner, Mode the permission bits.
	UID  uint32
	Mode fs.FileMode
	// Name is the path the file was opened by.
	Name string
}

// Open opens path read-only without following a symlink in its last
// component (resolve symlinks first where they are expected) and checks
// that it is a regular file. Close it when done.
func Open(path string) (*File, error) {
	return open(path, func(flags int) (int, error) { return unix.Open(path, flags|unix.O_NOFOLLOW, 0) })
}

// OpenLink opens path following symlinks: for the kernel's own links
// such as /proc/<pid>/exe, which name the file a process runs, and for
// callers that check the identity they get.
func OpenLink(path string) (*File, error) {
	return open(path, func(flags int) (int, error) { return unix.Open(path, flags, 0) })
}

// OpenIn opens path as a process whose root directory is root sees it
// (root is typically /proc/<pid>/root): symlinks on the way, absolute
// ones included, resolve inside root, and the last component is not
// followed. It needs openat2(2) (Linux 5.6); where that is missing, it
// opens root+path like Open, and the caller's identity checks remain.
func OpenIn(root, path string) (*File, error) {
	name := root + "/" + strings.TrimLeft(path, "/")
	return open(name, func(flags int) (int, error) {
		dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, err
		}
		defer unix.Close(dir)
		fd, err := unix.Openat2(dir, path, &unix.OpenHow{
			Flags:   uint64(flags | unix.O_NOFOLLOW),
			Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err == unix.ENOSYS {
			return unix.Open(name, flags|unix.O_NOFOLLOW, 0)
		}
		return fd, err
	})
}

func open(path string, openFn func(flags int) (int, error)) (*File, error) {
	select {
	case slots <- struct{}{}:
	default:
		return nil, &os.PathError{Op: "open", Path: path, Err: ErrTooManyOpen}
	}
	f, err := openFD(path, openFn)
	if err != nil {
		<-slots
		return nil, err
	}
	return f, nil
}

func openFD(path string, openFn func(flags int) (int, error)) (*File, error) {
	// O_NONBLOCK: opening a FIFO must not hang the collector; it is
	// cleared once fstat says the file is regular.
	flags := unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOCTTY | unix.O_NONBLOCK
	var fd int
	var err error
	// EAGAIN: openat2 asks for a retry when a rename raced the lookup.
	for try := 0; ; try++ {
		fd, err = openFn(flags)
		if (err != unix.EINTR && err != unix.EAGAIN) || try == 8 {
			break
		}
	}
	if err != nil {
		if err == unix.ELOOP {
			err = fmt.Errorf("a symlink where none is followed, or a loop: %w", err)
		}
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: not a regular file (mode %#o)", path, st.Mode&unix.S_IFMT)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return &File{
		File: os.NewFile(uintptr(fd), path),
		ID: ID{
			Dev:     uint64(st.Dev), //nolint:unconvert // st_dev is not uint64 on every GOARCH
			Ino:     st.Ino,
			Size:    st.Size,
			MtimeNS: st.Mtim.Nano(),
		},
		UID:  st.Uid,
		Mode: fs.FileMode(st.Mode & 0o7777),
		Name: path,
	}, nil
}

// Path is a path that names this open file, for APIs that take a path
// (cilium/ebpf's link.OpenExecutable): valid while f is open.
func (f *File) Path() string { return "/proc/self/fd/" + strconv.Itoa(int(f.Fd())) }

// Close closes the descriptor.
func (f *File) Close() error {
	if f.File == nil {
		return nil
	}
	err := f.File.Close()
	f.File = nil
	<-slots
	return err
}

// Errors of the ownership checks.
var (
	ErrWorldWritable = errors.New("writable by every user")
	ErrNotRootOwned  = errors.New("not owned by root or the collector's user")
)

// CheckWritable refuses a file that every user may write: what it
// holds, and so what the probes attach to, is anyone's to change.
func (f *File) CheckWritable() error {
	if f.Mode&0o002 != 0 {
		return fmt.Errorf("%s: %w (mode %#o)", f.Name, ErrWorldWritable, f.Mode)
	}
	return nil
}

// CheckOwner refuses a file owned by another user than root (or the
// collector's own user, when it does not run as root), and one writable
// by every user.
func (f *File) CheckOwner() error {
	if err := f.CheckWritable(); err != nil {
		return err
	}
	if f.UID != 0 && int(f.UID) != os.Geteuid() {
		return fmt.Errorf("%s: %w (uid %d)", f.Name, ErrNotRootOwned, f.UID)
	}
	return nil
}
