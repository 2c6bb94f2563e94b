package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// CheckSocketDir checks the directory that will hold the agent socket
// (socket is its path). The collector runs as root and never creates it:
// the directory must exist (e.g. systemd's RuntimeDirectory=gpuprobe), be a
// directory, be owned by root or the collector's uid, and not be
// world-writable unless it has the sticky bit and root owns it (/tmp's
// shape), so that no other user can replace the socket.
func CheckSocketDir(socket string) error {
	dir := filepath.Dir(socket)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("directory %s does not exist (the collector does not create it: "+
			"create it with the owner and mode that clients need)", dir)
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
	if perm := fi.Mode().Perm(); perm&0o002 != 0 && (fi.Mode()&fs.ModeSticky == 0 || st.Uid != 0) {
		return fmt.Errorf("directory %s is world-writable (mode %04o) without the sticky bit and root ownership", dir, perm)
	}
	return nil
}
