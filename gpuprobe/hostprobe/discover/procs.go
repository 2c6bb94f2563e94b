package discover

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/gpuprobe/gpuprobe/gpuprobe/hostprobe/internal/libfile"
	"github.com/gpuprobe/gpuprobe/internal/procread"
)

// DefaultRescanEvery is how many scans a process's maps may go without
// being parsed again while its virtual memory size stays the same.
const DefaultRescanEvery = 30

// ScanOptions configure a Scanner.
type ScanOptions struct {
	// ProcRoot is the proc file system (default "/proc").
	ProcRoot string
	// RescanEvery bounds how many scans a known process's maps go
	// unparsed (default DefaultRescanEvery; 1 parses every scan).
	RescanEvery int
	// Logger gets malformed input and skipped files (default: none).
	Logger *zap.Logger
}

// ScanStats count a Scanner's work.
type ScanStats struct {
	// Scans is the number of completed scans.
	Scans uint64
	// Processes is the number of processes seen by the last scan.
	Processes int
	// MapsParsed counts /proc/<pid>/maps files parsed, over all scans.
	MapsParsed uint64
	// ExeChecks counts executables inspected for a static runtime (cache
	// misses), over all scans.
	ExeChecks uint64
	// MalformedLines counts maps and stat lines skipped as malformed.
	MalformedLines uint64
	// MapsTruncated counts maps files read only to procread.MaxMapsBytes.
	MapsTruncated uint64
	// Refused counts mapped libraries and executables skipped because
	// every user may write them, over all scans.
	Refused uint64
	// LastDuration is how long the last scan took.
	LastDuration time.Duration
	// TotalDuration is the time spent scanning, over all scans.
	TotalDuration time.Duration
}

// Scanner finds CUDA libraries mapped by running processes. It keeps state
// between scans so that a scan costs little more than reading
// /proc/<pid>/stat of each process:
//
//   - A process is known by (pid, start time): field 22 of /proc/<pid>/stat.
//     A pid with a new start time is a new process and is parsed in full.
//   - A known process's maps are parsed again when its virtual memory size
//     (field 23 of the same stat line) changed, which dlopen of libcuda at
//     the first CUDA call does, or when RescanEvery scans have passed since
//     the last parse (a safety net for a map and an unmap of equal size).
//     procfs reports size 0 for every maps file, so the vsize stands in for
//     "maps changed size".
//   - The main executable is checked for a static runtime whenever the maps
//     are parsed; the verdict is cached per (dev, ino, size, mtime), so each
//     executable file is read once.
//
// Processes that exit during a scan are skipped silently. Scan must not be
// called concurrently; Stats may be called from any goroutine.
type Scanner struct {
	procRoot    string
	rescanEvery uint64
	log         *zap.Logger
	warnedBad   bool

	scanNo uint64
	pids   map[int]*pidState
	buf    [4096]byte // /proc/<pid>/stat, read on every scan
	exes   exeCache
	// checked counts ELF inspections per executable (tests: a verdict is
	// cached even while other processes on the machine come and go).
	checked map[Key]int

	mu    sync.Mutex
	stats ScanStats
}

type pidState struct {
	start    uint64
	vsize    uint64
	parsedAt uint64 // scan number of the last maps parse
	libs     []pidLib
	exe      fileID // zero if unknown
	shim     bool   // maps gpuprobe's shim (IsShimPath)
}

type pidLib struct {
	key     Key
	path    string
	kind    Kind
	source  string
	viaRoot bool // path goes through /proc/<pid>/root
}

// NewScanner returns a Scanner of opts.ProcRoot.
func NewScanner(opts ScanOptions) *Scanner {
	s := &Scanner{
		procRoot:    opts.ProcRoot,
		rescanEvery: DefaultRescanEvery,
		log:         opts.Logger,
		pids:        make(map[int]*pidState),
	}
	if s.procRoot == "" {
		s.procRoot = "/proc"
	}
	if opts.RescanEvery > 0 {
		s.rescanEvery = uint64(opts.RescanEvery)
	}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	return s
}

// ScanProcs scans procRoot once, without a cache: the CUDA libraries
// mapped by its processes.
func ScanProcs(procRoot string) ([]Library, error) {
	return NewScanner(ScanOptions{ProcRoot: procRoot}).Scan()
}

// Stats returns the counters so far.
func (s *Scanner) Stats() ScanStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Scan lists the CUDA libraries mapped by the processes now running, one
// Library per file with every pid that maps it. It fails only when the
// proc file system cannot be read at all.
func (s *Scanner) Scan() ([]Library, error) {
	t0 := time.Now()
	self, err := statID(filepath.Join(s.procRoot, "self", "ns", "mnt"))
	if err != nil {
		return nil, fmt.Errorf("scanning %s: the collector's mount namespace: %w", s.procRoot, err)
	}
	d, err := os.Open(s.procRoot)
	if err != nil {
		return nil, fmt.Errorf("scanning %s: %w", s.procRoot, err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, fmt.Errorf("scanning %s: %w", s.procRoot, err)
	}
	s.scanNo++
	var parsed, exeChecks, bad uint64
	alive := make(map[int]bool, len(names))
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 0 {
			continue
		}
		p, e, b, ok := s.scanPID(pid, self.key())
		parsed += p
		exeChecks += e
		bad += b
		if ok {
			alive[pid] = true
		}
	}
	keepExe := map[fileID]bool{}
	for pid, ps := range s.pids {
		if !alive[pid] {
			delete(s.pids, pid)
			continue
		}
		keepExe[ps.exe] = true
	}
	s.exes.prune(keepExe)
	libs := s.aggregate()
	dur := time.Since(t0)
	s.mu.Lock()
	s.stats.Scans++
	s.stats.Processes = len(alive)
	s.stats.MapsParsed += parsed
	s.stats.ExeChecks += exeChecks
	s.stats.MalformedLines += bad
	s.stats.LastDuration = dur
	s.stats.TotalDuration += dur
	s.mu.Unlock()
	return libs, nil
}

// scanPID brings the state of one process up to date. It returns the maps
// files parsed (0 or 1), executables inspected, malformed lines, and
// whether the process is alive.
func (s *Scanner) scanPID(pid int, self Key) (parsed, exeChecks, bad uint64, ok bool) {
	dir := filepath.Join(s.procRoot, strconv.Itoa(pid))
	b, err := readSmall(filepath.Join(dir, "stat"), s.buf[:])
	if err != nil {
		if !isGone(err) {
			s.log.Debug("discover: reading stat", zap.Int("pid", pid), zap.Error(err))
		}
		return 0, 0, 0, false
	}
	st, err := parseProcStat(b)
	if err != nil {
		s.malformed(fmt.Errorf("%s: %w", filepath.Join(dir, "stat"), err))
		return 0, 0, 1, false
	}
	ps := s.pids[pid]
	if ps == nil || ps.start != st.startTime {
		ps = &pidState{start: st.startTime}
		s.pids[pid] = ps
	} else if ps.vsize == st.vsize && s.scanNo-ps.parsedAt < s.rescanEvery {
		return 0, 0, 0, true
	}
	var shim bool
	libs, exe, exeChecks, bad, err := s.readPID(pid, dir, self, &shim)
	if err != nil {
		delete(s.pids, pid)
		return 1, exeChecks, bad, false
	}
	ps.vsize, ps.parsedAt, ps.libs, ps.exe, ps.shim = st.vsize, s.scanNo, libs, exe, shim
	return 1, exeChecks, bad, true
}

// readPID parses the maps of one process and checks its executable;
// *shim says whether it maps the shim. An error means the process is
// gone.
func (s *Scanner) readPID(pid int, dir string, self Key, shim *bool) (libs []pidLib, exe fileID, exeChecks, bad uint64, err error) {
	// Paths through /proc/<pid>/root are valid in every case; paths as the
	// process sees them only when it shares the collector's mount
	// namespace. Prefer those: they outlive the process.
	viaRoot := true
	if ns, err := statID(filepath.Join(dir, "ns", "mnt")); err == nil {
		viaRoot = ns.key() != self
	} else if isGone(err) {
		return nil, exe, 0, 0, err
	}
	root := filepath.Join(dir, "root")
	resolve := func(p string) string {
		if viaRoot {
			return filepath.Join(root, p)
		}
		return p
	}
	// open opens a path as the process sees it: through its root with
	// openat2's RESOLVE_IN_ROOT, so that a symlink in a container's
	// tree never leads into the collector's.
	open := func(p string) (*libfile.File, error) {
		if viaRoot {
			return libfile.OpenIn(root, p)
		}
		return libfile.Open(p)
	}
	mapsPath := filepath.Join(dir, "maps")
	mf, err := os.Open(mapsPath)
	if err != nil {
		return nil, exe, 0, 0, err
	}
	seen := map[string]bool{}
	n := 0
	sc, err := procread.Lines(mf, procread.MaxMapsBytes, procread.MaxMapsLine, func(line []byte, cut bool) bool {
		n++
		if len(line) == 0 {
			return true
		}
		m, err := ParseMapsLine(string(line))
		if err == nil && cut {
			err = fmt.Errorf("longer than %d bytes", procread.MaxMapsLine)
		}
		if err != nil {
			bad++
			s.malformed(fmt.Errorf("%s line %d %q: %w", mapsPath, n, line, err))
			return true
		}
		if lib, ok := s.mappedLib(pid, m, seen, resolve, open, viaRoot); ok {
			libs = append(libs, lib)
		} else if m.Exec() && IsShimPath(m.Path) {
			*shim = true
		}
		return true
	})
	mf.Close()
	if err != nil {
		return nil, exe, 0, bad, err
	}
	if sc.Truncated {
		s.mu.Lock()
		s.stats.MapsTruncated++
		s.mu.Unlock()
		s.log.Debug("discover: maps longer than its bound; libraries mapped past it are not seen",
			zap.Int("pid", pid), zap.Int64("bytes", sc.Bytes))
	}
	// The main executable: a static runtime has no CUDA name to match.
	exePath := filepath.Join(dir, "exe")
	// The kernel's link names the file the process runs: open it once,
	// so that the verdict cached for its identity is about its contents
	// even if the process execs meanwhile.
	ef, err := libfile.OpenLink(exePath)
	if err != nil {
		return libs, fileID{}, 0, bad, nil // kernel thread, or gone: the next scan tells
	}
	exe = idOfFile(ef)
	if err := ef.CheckWritable(); err != nil {
		ef.Close()
		s.refused(pid, err)
		return libs, exe, 0, bad, nil
	}
	info, miss, err := s.exes.get(ef)
	ef.Close()
	if miss {
		exeChecks = 1
		if s.checked == nil || len(s.checked) > 4096 {
			s.checked = map[Key]int{}
		}
		s.checked[exe.key()]++
	}
	if err != nil || info.kind() != KindStaticRuntime {
		return libs, exe, exeChecks, bad, nil
	}
	target, err := os.Readlink(exePath)
	if err != nil || strings.HasSuffix(target, " (deleted)") || !strings.HasPrefix(target, "/") {
		return libs, exe, exeChecks, bad, nil
	}
	p := resolve(target)
	if id, err := s.openID(target, open); err != nil || id.key() != exe.key() {
		s.log.Debug("discover: executable path does not name the running executable", zap.Int("pid", pid), zap.String("path", p))
		return libs, exe, exeChecks, bad, nil
	}
	libs = append(libs, pidLib{key: exe.key(), path: p, kind: KindStaticRuntime, source: fmt.Sprintf("pid %d exe", pid), viaRoot: viaRoot})
	return libs, exe, exeChecks, bad, nil
}

// openID opens path (as the process sees it) with open, takes its identity from the descriptor
// and refuses a file writable by every user; a refusal is counted.
func (s *Scanner) openID(path string, open func(string) (*libfile.File, error)) (fileID, error) {
	f, err := open(path)
	if err != nil {
		return fileID{}, err
	}
	defer f.Close()
	if err := f.CheckWritable(); err != nil {
		s.refused(0, err)
		return fileID{}, err
	}
	return idOfFile(f), nil
}

// refused reports a file refused by the ownership checks: the first as a
// warning, the rest at debug level, all counted in ScanStats.Refused.
func (s *Scanner) refused(pid int, err error) {
	s.mu.Lock()
	s.stats.Refused++
	first := s.stats.Refused == 1
	s.mu.Unlock()
	if first {
		s.log.Warn("discover: refusing a file (further ones at debug level)", zap.Int("pid", pid), zap.Error(err))
		return
	}
	s.log.Debug("discover: refusing a file", zap.Int("pid", pid), zap.Error(err))
}

// malformed reports a malformed line: the first as a warning, the rest at
// debug level (they are counted in ScanStats.MalformedLines).
func (s *Scanner) malformed(err error) {
	if !s.warnedBad {
		s.warnedBad = true
		s.log.Warn("discover: skipping malformed proc line (further ones at debug level)", zap.Error(err))
		return
	}
	s.log.Debug("discover: skipping malformed proc line", zap.Error(err))
}

// aggregate merges the processes' libraries into one Library per file.
// The path kept is the first in pid order that does not go through
// /proc/<pid>/root, else the lowest pid's.
func (s *Scanner) aggregate() []Library {
	pids := make([]int, 0, len(s.pids))
	for pid := range s.pids {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	type agg struct {
		lib     Library
		viaRoot bool
	}
	byKey := map[Key]*agg{}
	var order []Key
	for _, pid := range pids {
		for _, pl := range s.pids[pid].libs {
			a := byKey[pl.key]
			if a == nil {
				a = &agg{lib: Library{Path: pl.path, Dev: pl.key.Dev, Ino: pl.key.Ino, Kind: pl.kind, Source: pl.source}, viaRoot: pl.viaRoot}
				byKey[pl.key] = a
				order = append(order, pl.key)
			} else if a.viaRoot && !pl.viaRoot {
				a.lib.Path, a.lib.Source, a.viaRoot = pl.path, pl.source, false
			}
			if n := len(a.lib.PIDs); n == 0 || a.lib.PIDs[n-1] != pid {
				a.lib.PIDs = append(a.lib.PIDs, pid)
			}
		}
	}
	libs := make([]Library, 0, len(order))
	for _, k := range order {
		libs = append(libs, byKey[k].lib)
	}
	sortLibraries(libs)
	return libs
}

// Process is a running process that maps CUDA libraries, as a Scan saw
// it.
type Process struct {
	// PID and Start identify the process: Start is when it started (clock
	// ticks after boot, field 22 of /proc/<pid>/stat), so a pid reused
	// by a new process has another Start.
	PID   int
	Start uint64
	// Libs are the CUDA files it maps (its executable, if that links the
	// runtime statically), each with the path the collector reaches it
	// by for this process; PIDs is empty.
	Libs []Library
	// Shim says whether it maps gpuprobe's shim (IsShimPath): it records
	// its own launches once it has a session, at its first CUDA call.
	Shim bool
}

// Processes returns the processes of the last Scan that map a CUDA
// library, by pid. Like Scan, it must not be called concurrently.
func (s *Scanner) Processes() []Process {
	var out []Process
	for pid, ps := range s.pids {
		if len(ps.libs) == 0 {
			continue
		}
		pr := Process{PID: pid, Start: ps.start, Shim: ps.shim}
		for _, pl := range ps.libs {
			pr.Libs = append(pr.Libs, Library{Path: pl.path, Dev: pl.key.Dev, Ino: pl.key.Ino, Kind: pl.kind, Source: pl.source})
		}
		out = append(out, pr)
	}
	slices.SortFunc(out, func(a, b Process) int { return a.PID - b.PID })
	return out
}

// IsShimPath says whether a mapped file is gpuprobe's shim: a file named
// libgpuprobe.so or libgpuprobe-*.so (the selftime build). A process can
// map such a file to pass for one with the shim; it only leaves its own
// launches without host probes.
func IsShimPath(path string) bool {
	b := filepath.Base(path)
	return b == "libgpuprobe.so" || strings.HasPrefix(b, "libgpuprobe-") && strings.HasSuffix(b, ".so")
}

// mkdev encodes a device number as Linux's st_dev does.
func mkdev(major, minor uint32) uint64 {
	ma, mi := uint64(major), uint64(minor)
	return (mi & 0xff) | ((ma & 0xfff) << 8) | ((mi &^ 0xff) << 12) | ((ma &^ 0xfff) << 32)
}

// mappedLib is the CUDA library a maps line m of pid maps, if it is one
// not seen yet that the process still reaches by its path.
func (s *Scanner) mappedLib(pid int, m Mapping, seen map[string]bool, resolve func(string) string,
	open func(string) (*libfile.File, error), viaRoot bool) (pidLib, bool) {
	if !m.Exec() || !m.File() || seen[m.Path] {
		return pidLib{}, false
	}
	kind := KindOfName(m.Path)
	if kind == KindUnknown {
		return pidLib{}, false
	}
	seen[m.Path] = true
	p := resolve(m.Path)
	id, err := s.openID(m.Path, open)
	if err != nil {
		s.log.Debug("discover: mapped library not reachable", zap.Int("pid", pid), zap.String("path", p), zap.Error(err))
		return pidLib{}, false
	}
	if id.ino != m.Inode && id.dev == mkdev(m.DevMajor, m.DevMinor) {
		// The path names another file now (the library was replaced
		// by a rename): a probe on it would miss this process.
		s.log.Debug("discover: mapped library replaced", zap.Int("pid", pid), zap.String("path", p))
		return pidLib{}, false
	}
	return pidLib{key: id.key(), path: p, kind: kind, source: fmt.Sprintf("pid %d maps", pid), viaRoot: viaRoot}, true
}

// readSmall reads a small one-line proc file into buf with three system
// calls (no stat, no poller registration: this runs for every process on
// every scan). A file longer than buf is an error.
func readSmall(path string, buf []byte) ([]byte, error) {
	fd, err := openRetry(path)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	n := 0
	for n < len(buf) {
		m, err := syscall.Read(fd, buf[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			return buf[:n], nil
		}
		n += m
		// proc files of one line are generated whole by the first read:
		// a short read ending the line is the end (a second read would
		// make the kernel generate the text again to find EOF).
		if n < len(buf) && buf[n-1] == '\n' {
			return buf[:n], nil
		}
	}
	return nil, fmt.Errorf("%s: longer than %d bytes", path, len(buf))
}

func openRetry(path string) (int, error) {
	for {
		fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != syscall.EINTR {
			return fd, err
		}
	}
}
