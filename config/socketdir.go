package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// socketDirMode is the mode of a socket directory the collector creates:
// anyone may reach the socket (its own mode and the peer checks decide
// who may connect), only its owner may change what the directory holds.
const socketDirMode = 0o755

// EnsureSocketDir prepares the directory that will hold the agent socket
// (socket is its path) at start. A missing directory is created, owned by
// the collector (root, normally) with mode 0755; its parent must exist. An
// existing one must be a directory owned by root or the collector's uid,
// and not group- or world-writable unless it has the sticky bit and root
// owns it (/tmp's shape), so that no other user can replace the socket.
// Errors name agent::socket.
func EnsureSocketDir(socket string) error {
	dir := filepath.Dir(socket)
	if err := os.Mkdir(dir, socketDirMode); err == nil {
		// Mkdir's mode passes through the umask; clients need 0755.
		if err := os.Chmod(dir, socketDirMode); err != nil {
			return fmt.Errorf("agent::socket: directory %s: %w", dir, err)
		}
	} else if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("agent::socket: creating directory %s: %w", dir, err)
	}
	if err := checkSocketDir(dir); err != nil {
		return fmt.Errorf("agent::socket: %w", err)
	}
	return nil
}

// CheckSocketDirUsable reports, without changing anything, whether
// EnsureSocketDir would succeed for socket on this machine: the directory
// exists and is safe, or its parent exists to create it in.
func CheckSocketDirUsable(socket string) error {
	dir := filepath.Dir(socket)
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		parent := filepath.Dir(dir)
		if fi, err := os.Stat(parent); err != nil || !fi.IsDir() {
			return fmt.Errorf("agent::socket: directory %s is missing and cannot be created: its parent %s is not a directory", dir, parent)
		}
		return nil
	}
	if err := checkSocketDir(dir); err != nil {
		return fmt.Errorf("agent::socket: %w", err)
	}
	return nil
}

// checkSocketDir checks an existing socket directory (EnsureSocketDir).
func checkSocketDir(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case err != nil:
		return fmt.Errorf("directory %s: %w", dir, err)
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("directory %s: no owner information", dir)
	}
	euid := uint32(os.Geteuid())
	if st.Uid != 0 && st.Uid != euid {
		return fmt.Errorf("directory %s is owned by uid %d, want root or the collector's uid %d", dir, st.Uid, euid)
	}
	sticky := fi.Mode()&fs.ModeSticky != 0 && st.Uid == 0
	if perm := fi.Mode().Perm(); perm&0o022 != 0 && !sticky {
		return fmt.Errorf("directory %s is group- or world-writable (mode %04o) without the sticky bit and root ownership", dir, perm)
	}
	return nil
}
