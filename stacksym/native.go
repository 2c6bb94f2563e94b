// Package stacksym turns the words of launch stacks (record.Stack) into
// frames: native return addresses through the ELF symbol tables of the
// files a process maps (/proc/PID/maps), Python frames by reading their
// code objects from the process's memory (/proc/PID/mem). Every read is
// bounded; whatever cannot be read resolves to a frame with its address
// only. A Resolver is not safe for concurrent use.
//
// A pid names another process once its process exits, so what a Resolver
// keeps of a pid (maps, open memory file, code objects) goes when its
// owner says the process left (Forget: the receiver, when its client
// disconnects) and when /proc/PID/stat's start time is no longer the one
// read with the maps (checked at most every startCheckEvery).
package stacksym

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpuprobe/gpuprobe/internal/procread"
)

// Bounds of what a Resolver reads and keeps.
const (
	maxMapsBytes  = 4 << 20 // of one /proc/PID/maps
	maxProcs      = 256     // processes whose maps are kept
	maxCodeCached = 4096    // Python code objects kept per process
	maxCodeBytes  = 4 << 20 // bytes of the Python code objects kept per process
	// startCheckEvery spaces the start-time reads of one process: a
	// resolve is at most a few per sampled launch, and a pid reused
	// within it is caught by Forget when the receiver knows.
	startCheckEvery = time.Second
)

// Frame is one resolved frame.
type Frame struct {
	Function string // symbol or Python qualified name; "" when unknown
	File     string // the mapped file (native) or the code's filename (Python)
	Line     int    // Python line; 0 for native frames or unknown
	Addr     uint64 // return address or code object address
	Python   bool
}

// String formats the frame as one line of code.stacktrace.
func (f Frame) String() string {
	fn := f.Function
	if fn == "" {
		fn = "??"
	}
	if f.Python {
		return fmt.Sprintf("  File %q, line %d, in %s", f.File, f.Line, fn)
	}
	return fmt.Sprintf("  at %s (%s+%#x)", fn, filepath.Base(f.File), f.Addr)
}

// mapping is one executable mapping of a process, and its file's
// identity once the file was opened.
type mapping struct {
	lo, hi, off uint64
	path        string
	key         fileKey
	opened      bool // key is known
	failed      bool // the file could not be opened
}

// Resolver resolves stacks of processes, caching their maps and Python
// code objects; the files' symbols are cached in Files.
type Resolver struct {
	// Proc is the proc file system's root ("/proc" when empty).
	Proc string
	// Files caches the symbol tables, shared with other Resolvers; a
	// Resolver makes its own when nil.
	Files *Files
	procs map[uint32]*proc
	now   func() time.Time // time.Now when nil (tests set it)
}

// proc is what a Resolver keeps of one process.
type proc struct {
	maps      []mapping
	mem       *os.File
	code      map[uint64]*codeInfo
	codeBytes int       // line tables and names held in code
	start     string    // /proc/PID/stat's start time when maps were read ("" unreadable)
	checked   time.Time // when start was last compared
}

func (r *Resolver) root() string {
	if r.Proc == "" {
		return "/proc"
	}
	return r.Proc
}

func (r *Resolver) clock() time.Time {
	if r.now == nil {
		return time.Now()
	}
	return r.now()
}

// procOf returns pid's state, reading its maps the first time and again
// when its start time changed (another process has the pid).
func (r *Resolver) procOf(pid uint32) *proc {
	if r.procs == nil {
		r.procs = map[uint32]*proc{}
	}
	now := r.clock()
	if p := r.procs[pid]; p != nil {
		if now.Sub(p.checked) < startCheckEvery {
			return p
		}
		p.checked = now
		if r.startTime(pid) == p.start {
			return p
		}
		r.Forget(pid)
	}
	if len(r.procs) >= maxProcs {
		for k := range r.procs {
			r.Forget(k)
			break
		}
	}
	p := &proc{code: map[uint64]*codeInfo{}, start: r.startTime(pid), checked: now}
	p.maps, _ = readMaps(filepath.Join(r.root(), strconv.Itoa(int(pid)), "maps"))
	r.procs[pid] = p
	return p
}

// startTime reads field 22 of /proc/PID/stat, "" when it cannot.
func (r *Resolver) startTime(pid uint32) string {
	b, err := procread.File(filepath.Join(r.root(), strconv.Itoa(int(pid)), "stat"), procread.MaxStat)
	i := bytes.LastIndexByte(b, ')')
	if err != nil || i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:])) // fields 3 on
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// Forget drops what r keeps of process pid (it exited, or may have).
func (r *Resolver) Forget(pid uint32) {
	if p := r.procs[pid]; p != nil {
		if p.mem != nil {
			p.mem.Close()
		}
		delete(r.procs, pid)
	}
}

// readMaps reads the executable file mappings of a maps file.
func readMaps(path string) ([]mapping, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("stacksym: %w", err)
	}
	defer f.Close()
	var out []mapping
	sc := bufio.NewScanner(io.LimitReader(f, maxMapsBytes))
	sc.Buffer(make([]byte, 0, 4096), 1<<16)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 || !strings.Contains(fs[1], "x") || !strings.HasPrefix(fs[5], "/") {
			continue
		}
		lo, hi, ok := strings.Cut(fs[0], "-")
		a, e1 := strconv.ParseUint(lo, 16, 64)
		b, e2 := strconv.ParseUint(hi, 16, 64)
		o, e3 := strconv.ParseUint(fs[2], 16, 64)
		if !ok || e1 != nil || e2 != nil || e3 != nil {
			continue
		}
		out = append(out, mapping{lo: a, hi: b, off: o, path: strings.Join(fs[5:], " ")})
	}
	return out, sc.Err()
}

// Native resolves return addresses of process pid, appending to out.
func (r *Resolver) Native(pid uint32, addrs []uint64, out []Frame) []Frame {
	p := r.procOf(pid)
	for _, a := range addrs {
		f := Frame{Addr: a}
		if m := findMap(p.maps, a); m != nil {
			f.File = m.path
			f.Addr = a - m.lo + m.off
			// The call is the instruction before the return address.
			f.Function = r.symbol(pid, m, f.Addr-1)
		}
		out = append(out, f)
	}
	return out
}

func findMap(ms []mapping, a uint64) *mapping {
	for i := range ms {
		if a >= ms[i].lo && a < ms[i].hi {
			return &ms[i]
		}
	}
	return nil
}

// symbol names the function holding file offset off of mapping m of
// process pid. The file is opened through the process's root (its mount
// namespace) to learn its identity, and again when a name is not cached.
func (r *Resolver) symbol(pid uint32, m *mapping, off uint64) string {
	if r.Files == nil {
		r.Files = &Files{}
	}
	if m.failed {
		return ""
	}
	path := filepath.Join(r.root(), strconv.Itoa(int(pid)), "root", m.path)
	var t *table
	ok := false
	if m.opened {
		t, ok = r.Files.get(m.key)
	}
	var f *os.File
	if !ok {
		var err error
		if f, err = os.Open(path); err != nil {
			m.failed = true
			return ""
		}
		defer f.Close()
		t, m.key = r.Files.tableOf(f)
		m.opened = true
	}
	if t == nil {
		return ""
	}
	i := t.lookup(off)
	if i < 0 {
		return ""
	}
	if n, ok := t.cachedName(i); ok {
		return n
	}
	if f == nil {
		var err error
		if f, err = os.Open(path); err != nil {
			return ""
		}
		defer f.Close()
		if k, ok := keyOf(f); !ok || k != m.key {
			return "" // the path names another file now
		}
	}
	return t.nameOf(f, i)
}
