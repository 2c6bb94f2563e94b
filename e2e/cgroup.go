package e2e

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Cgroup2Mount returns where the cgroup v2 hierarchy is mounted, from
// /proc/self/mountinfo: /sys/fs/cgroup on a v2 host, /sys/fs/cgroup/unified
// on a hybrid one.
func Cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("cgroup v2: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "id parent maj:min root mountpoint opts [optional...] - fstype src opts"
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields := strings.Fields(pre)
		if ok && len(fields) >= 5 && strings.HasPrefix(post, "cgroup2 ") {
			return fields[4], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("cgroup v2: reading /proc/self/mountinfo: %w", err)
	}
	return "", errors.New("cgroup v2: no cgroup2 file system in /proc/self/mountinfo")
}

// ContainerCgroup is a cgroup v2 directory named as Docker's systemd
// driver names a container's scope (docker-<id>.scope), for starting
// processes that look containerised to the collector.
type ContainerCgroup struct {
	ID   string // the container id: 64 lowercase hex digits
	Path string // the directory
}

// NewContainerCgroups creates a parent cgroup gpuprobe-e2e-<random> under
// the cgroup v2 mount and n container scopes in it. It needs root and a
// writable cgroup2 hierarchy; remove them with RemoveCgroups(parent).
func NewContainerCgroups(n int) (parent string, cgs []ContainerCgroup, err error) {
	mnt, err := Cgroup2Mount()
	if err != nil {
		return "", nil, err
	}
	parent = filepath.Join(mnt, "gpuprobe-e2e-"+randomHex(4))
	if err := os.Mkdir(parent, 0o755); err != nil {
		return "", nil, fmt.Errorf("cgroup v2 at %s is not writable: %w", mnt, err)
	}
	for range n {
		id := randomHex(32)
		c := ContainerCgroup{ID: id, Path: filepath.Join(parent, "docker-"+id+".scope")}
		if err := os.Mkdir(c.Path, 0o755); err != nil {
			_ = RemoveCgroups(parent)
			return "", nil, fmt.Errorf("cgroup v2 at %s is not writable: %w", mnt, err)
		}
		cgs = append(cgs, c)
	}
	return parent, cgs, nil
}

// RemoveCgroups removes parent and the cgroups directly in it, retrying
// for a while each that is still busy (a process that just exited may be
// counted in it for a moment).
func RemoveCgroups(parent string) error {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return fmt.Errorf("remove cgroups: %w", err)
	}
	var errs []error
	for _, e := range ents {
		if e.IsDir() {
			errs = append(errs, rmdirCgroup(filepath.Join(parent, e.Name())))
		}
	}
	errs = append(errs, rmdirCgroup(parent))
	return errors.Join(errs...)
}

func rmdirCgroup(dir string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := syscall.Rmdir(dir)
		if err == nil || err != syscall.EBUSY || time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("rmdir %s: %w", dir, err)
			}
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// randomHex returns 2n random lowercase hex digits.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails on Linux
	return hex.EncodeToString(b)
}
