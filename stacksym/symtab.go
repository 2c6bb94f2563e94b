package stacksym

import (
	"bufio"
	"debug/elf"
	"io"
	"os"
	"sort"
	"sync"
	"syscall"
)

// Bounds of the symbol tables a Files keeps.
const (
	maxFiles      = 64       // symbol tables kept
	maxTableBytes = 64 << 20 // bytes of the kept tables together
	maxSymtab     = 64 << 20 // bytes of one symbol table section read
	maxNames      = 4096     // names kept per table (read from the file on a miss)
	maxName       = 1024     // bytes of one symbol name read
	symEntryBytes = 16       // a kept symbol: address, size, name offset
)

// fileKey is a mapped file's identity: the same library mapped by many
// processes (or containers sharing an image layer) is one file.
type fileKey struct {
	dev, ino uint64
	size     int64
	mtime    int64
}

// keyOf returns the identity of the open file f.
func keyOf(f *os.File) (fileKey, bool) {
	fi, err := f.Stat()
	if err != nil {
		return fileKey{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.Mode().IsRegular() {
		return fileKey{}, false
	}
	return fileKey{dev: uint64(st.Dev), ino: st.Ino, size: fi.Size(), mtime: fi.ModTime().UnixNano()}, true
}

// table is one file's function symbols, sorted by address, and its load
// segments. Names stay in the file: a table keeps each symbol's offset
// into its string table and reads a name the first time it is asked for.
type table struct {
	addr           []uint64
	size           []uint32 // the symbol's size, capped at 2^32-1 (0: unknown)
	name           []uint32 // offset into the string table
	loads          []elf.ProgHeader
	strOff, strLen uint64 // the string table's place in the file

	mu    sync.Mutex        // guards names
	names map[uint32]string // names read so far, by offset
	used  uint64            // Files' clock at the last lookup (LRU)
}

// bytes is what t holds, for the Files budget.
func (t *table) bytes() int { return len(t.addr)*symEntryBytes + len(t.loads)*64 + maxNames*64 }

// Files caches the symbol tables of mapped files for Resolvers, shared by
// any number of them and safe for concurrent use: at most maxFiles tables
// of maxTableBytes together, the least recently used evicted first.
type Files struct {
	mu    sync.Mutex
	byKey map[fileKey]*entry
	bytes int
	clock uint64
	// Loads counts the tables read from files (a reused table is not
	// read again).
	Loads uint64
}

// entry is one file's table, ready once loaded.
type entry struct {
	once   sync.Once
	t      *table // nil: the file has no usable symbols
	loaded bool   // guarded by Files.mu: once has run
}

// get returns the table of the file k names: ok is false when it is
// not known (never loaded, or evicted); t is nil for a file without
// usable symbols.
func (fs *Files) get(k fileKey) (t *table, ok bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	e := fs.byKey[k]
	if e == nil || (e.t == nil && !e.loaded) {
		return nil, false
	}
	if e.t != nil {
		fs.clock++
		e.t.used = fs.clock
	}
	return e.t, true
}

// tableOf returns the table of open file f, loading it on first use.
func (fs *Files) tableOf(f *os.File) (*table, fileKey) {
	k, ok := keyOf(f)
	if !ok {
		return nil, k
	}
	fs.mu.Lock()
	if fs.byKey == nil {
		fs.byKey = map[fileKey]*entry{}
	}
	e := fs.byKey[k]
	if e == nil {
		e = &entry{}
		fs.byKey[k] = e
		fs.Loads++
	}
	fs.mu.Unlock()
	e.once.Do(func() {
		e.t = loadTable(f)
		fs.admit(k, e)
	})
	if e.t != nil {
		fs.mu.Lock()
		fs.clock++
		e.t.used = fs.clock
		fs.mu.Unlock()
	}
	return e.t, k
}

// admit counts a loaded entry against the budget, evicting the least
// recently used tables until it fits.
func (fs *Files) admit(k fileKey, e *entry) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	e.loaded = true
	if e.t == nil {
		return // remembered as empty: a file without symbols is not read twice
	}
	fs.bytes += e.t.bytes()
	for (fs.bytes > maxTableBytes || len(fs.byKey) > maxFiles) && fs.evictOne(k) {
	}
}

// evictOne drops the least recently used table but keep's; false when
// there is none.
func (fs *Files) evictOne(keep fileKey) bool {
	var old fileKey
	var oldest *entry
	for k, e := range fs.byKey {
		if k == keep {
			continue
		}
		if !e.loaded {
			continue // being loaded
		}
		if oldest == nil || e.t == nil || (oldest.t != nil && e.t.used < oldest.t.used) {
			old, oldest = k, e
			if e.t == nil {
				break
			}
		}
	}
	if oldest == nil {
		return false
	}
	if oldest.t != nil {
		fs.bytes -= oldest.t.bytes()
	}
	delete(fs.byKey, old)
	return true
}

// loadTable reads the function symbols of ELF file f (.symtab, else
// .dynsym; each section at most maxSymtab bytes); nil when none.
func loadTable(f *os.File) *table {
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil
	}
	t := &table{}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD {
			t.loads = append(t.loads, p.ProgHeader)
		}
	}
	for _, name := range []string{".symtab", ".dynsym"} {
		s := ef.Section(name)
		if s == nil || s.Size > maxSymtab || s.Type == elf.SHT_NOBITS || int(s.Link) >= len(ef.Sections) {
			continue
		}
		str := ef.Sections[s.Link]
		if readSyms(t, ef, s) && len(t.addr) > 0 {
			t.strOff, t.strLen = str.Offset, str.Size
			break
		}
		t.addr, t.size, t.name = nil, nil, nil
	}
	if len(t.addr) == 0 {
		return nil
	}
	sort.Sort(byAddr{t})
	t.names = map[uint32]string{}
	return t
}

// readSyms appends the defined function symbols of section s to t,
// streaming it; false when it cannot be read.
func readSyms(t *table, ef *elf.File, s *elf.Section) bool {
	entSize := 24
	if ef.Class == elf.ELFCLASS32 {
		entSize = 16
	}
	bo := ef.ByteOrder
	rd := bufio.NewReaderSize(s.Open(), 64<<10)
	b := make([]byte, entSize)
	if _, err := io.ReadFull(rd, b); err != nil { // entry 0 is the null symbol
		return false
	}
	for {
		if _, err := io.ReadFull(rd, b); err != nil {
			return err == io.EOF
		}
		var name uint32
		var info uint8
		var value, size uint64
		if entSize == 24 {
			name, info, value, size = bo.Uint32(b), b[4], bo.Uint64(b[8:]), bo.Uint64(b[16:])
		} else {
			name, value, size, info = bo.Uint32(b), uint64(bo.Uint32(b[4:])), uint64(bo.Uint32(b[8:])), b[12]
		}
		if elf.ST_TYPE(info) != elf.STT_FUNC || value == 0 {
			continue
		}
		t.addr = append(t.addr, value)
		t.size = append(t.size, uint32(min(size, 1<<32-1)))
		t.name = append(t.name, name)
	}
}

// byAddr sorts a table's symbols by address.
type byAddr struct{ t *table }

func (s byAddr) Len() int           { return len(s.t.addr) }
func (s byAddr) Less(i, j int) bool { return s.t.addr[i] < s.t.addr[j] }
func (s byAddr) Swap(i, j int) {
	t := s.t
	t.addr[i], t.addr[j] = t.addr[j], t.addr[i]
	t.size[i], t.size[j] = t.size[j], t.size[i]
	t.name[i], t.name[j] = t.name[j], t.name[i]
}

// lookup returns the symbol holding file offset off: its index, or -1.
func (t *table) lookup(off uint64) int {
	va, ok := uint64(0), false
	for _, l := range t.loads {
		if off >= l.Off && off < l.Off+l.Filesz {
			va, ok = off-l.Off+l.Vaddr, true
			break
		}
	}
	if !ok {
		return -1
	}
	i := sort.Search(len(t.addr), func(i int) bool { return t.addr[i] > va }) - 1
	if i < 0 || (t.size[i] != 0 && va >= t.addr[i]+uint64(t.size[i])) {
		return -1
	}
	return i
}

// cachedName returns symbol i's name if it was read already.
func (t *table) cachedName(i int) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, ok := t.names[t.name[i]]
	return n, ok
}

// nameOf returns symbol i's name, read from f (the table's file) on a
// miss; "" when it cannot be read.
func (t *table) nameOf(f io.ReaderAt, i int) string {
	off := t.name[i]
	t.mu.Lock()
	n, ok := t.names[off]
	t.mu.Unlock()
	if ok {
		return n
	}
	if f == nil || uint64(off) >= t.strLen {
		return ""
	}
	b := make([]byte, min(maxName, t.strLen-uint64(off)))
	m, _ := f.ReadAt(b, int64(t.strOff)+int64(off))
	b = b[:m]
	end := 0
	for end < len(b) && b[end] != 0 {
		end++
	}
	n = string(b[:end])
	t.mu.Lock()
	if len(t.names) >= maxNames {
		clear(t.names)
	}
	t.names[off] = n
	t.mu.Unlock()
	return n
}
