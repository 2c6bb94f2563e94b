package discover

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Mapping is one line of /proc/<pid>/maps.
type Mapping struct {
	// Start and End are the address range.
	Start, End uint64
	// Perms is the permission field, e.g. "r-xp".
	Perms string
	// Offset is the file offset of Start.
	Offset uint64
	// DevMajor and DevMinor are the device of the mapped file.
	DevMajor, DevMinor uint32
	// Inode is the mapped file's inode number (0: anonymous).
	Inode uint64
	// Path is the path column, unescaped ("" for anonymous mappings; it
	// can also be a pseudo-path such as "[vdso]").
	Path string
	// Deleted is set when the kernel marked the path " (deleted)" (the
	// suffix is removed from Path).
	Deleted bool
}

// Exec reports whether the mapping is executable.
func (m Mapping) Exec() bool { return len(m.Perms) >= 3 && m.Perms[2] == 'x' }

// File reports whether the mapping is backed by a file that still has the
// path shown: an absolute path, not deleted, with an inode.
func (m Mapping) File() bool {
	return !m.Deleted && m.Inode != 0 && strings.HasPrefix(m.Path, "/")
}

// ParseMapsLine parses one line of /proc/<pid>/maps:
//
//	7f3a1c000000-7f3a1c021000 r-xp 00002000 08:01 1234567    /usr/lib/libcuda.so.1
func ParseMapsLine(line string) (Mapping, error) {
	var m Mapping
	rest := line
	field := func(name string) (string, error) {
		rest = strings.TrimLeft(rest, " ")
		i := strings.IndexByte(rest, ' ')
		if i < 0 {
			if rest == "" {
				return "", fmt.Errorf("missing the %s field", name)
			}
			f := rest
			rest = ""
			return f, nil
		}
		f := rest[:i]
		rest = rest[i+1:]
		return f, nil
	}
	addr, err := field("address")
	if err != nil {
		return m, err
	}
	lo, hi, ok := strings.Cut(addr, "-")
	if !ok {
		return m, fmt.Errorf("address %q: want <start>-<end>", addr)
	}
	if m.Start, err = strconv.ParseUint(lo, 16, 64); err != nil {
		return m, fmt.Errorf("address start %q: not hexadecimal", lo)
	}
	if m.End, err = strconv.ParseUint(hi, 16, 64); err != nil {
		return m, fmt.Errorf("address end %q: not hexadecimal", hi)
	}
	if m.End < m.Start {
		return m, fmt.Errorf("address %q: end before start", addr)
	}
	if m.Perms, err = field("perms"); err != nil {
		return m, err
	}
	if len(m.Perms) != 4 || strings.Trim(m.Perms[:3], "rwx-") != "" || strings.Trim(m.Perms[3:], "ps") != "" {
		return m, fmt.Errorf("perms %q: want four characters like r-xp", m.Perms)
	}
	off, err := field("offset")
	if err != nil {
		return m, err
	}
	if m.Offset, err = strconv.ParseUint(off, 16, 64); err != nil {
		return m, fmt.Errorf("offset %q: not hexadecimal", off)
	}
	dev, err := field("dev")
	if err != nil {
		return m, err
	}
	maj, mnr, ok := strings.Cut(dev, ":")
	if !ok {
		return m, fmt.Errorf("dev %q: want <major>:<minor>", dev)
	}
	ma, err1 := strconv.ParseUint(maj, 16, 32)
	mi, err2 := strconv.ParseUint(mnr, 16, 32)
	if err1 != nil || err2 != nil {
		return m, fmt.Errorf("dev %q: not hexadecimal major:minor", dev)
	}
	m.DevMajor, m.DevMinor = uint32(ma), uint32(mi)
	ino, err := field("inode")
	if err != nil {
		return m, err
	}
	if m.Inode, err = strconv.ParseUint(ino, 10, 64); err != nil {
		return m, fmt.Errorf("inode %q: not a decimal number", ino)
	}
	path := strings.TrimLeft(rest, " ")
	if p, ok := strings.CutSuffix(path, " (deleted)"); ok {
		path, m.Deleted = p, true
	}
	m.Path = unescapeMapsPath(path)
	return m, nil
}

// unescapeMapsPath undoes the kernel's escaping of a newline in a path
// ("\012").
func unescapeMapsPath(p string) string {
	if !strings.Contains(p, `\012`) {
		return p
	}
	return strings.ReplaceAll(p, `\012`, "\n")
}

// procStat is what the scanner needs from /proc/<pid>/stat.
type procStat struct {
	// startTime is field 22: when the process started, in clock ticks
	// after boot. A pid with another start time is another process.
	startTime uint64
	// vsize is field 23: the virtual memory size. It changes when the
	// process maps or unmaps memory, dlopen included.
	vsize uint64
}

// parseProcStat parses /proc/<pid>/stat. The command name (field 2) can
// hold spaces and parentheses, so fields are counted after its last ')'.
func parseProcStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, errors.New("no ')' closing the command name")
	}
	fields := strings.Fields(string(b[i+1:]))
	// fields[0] is field 3 (state): field n is fields[n-3].
	const startIdx, vsizeIdx = 22 - 3, 23 - 3
	if len(fields) <= vsizeIdx {
		return procStat{}, fmt.Errorf("%d fields after the command name, want at least %d", len(fields), vsizeIdx+1)
	}
	st, err := strconv.ParseUint(fields[startIdx], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("field 22 (starttime) %q: not a number", fields[startIdx])
	}
	vs, err := strconv.ParseUint(fields[vsizeIdx], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("field 23 (vsize) %q: not a number", fields[vsizeIdx])
	}
	return procStat{startTime: st, vsize: vs}, nil
}
