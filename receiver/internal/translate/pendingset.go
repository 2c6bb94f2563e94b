package translate

// The pending launches by (source, launch id). A source numbers its
// launches in order, so each source has a table of its own (idTable),
// open-addressed on the id's low bits: the launches in flight take
// consecutive slots, a lookup reads one slot of a few hot cache lines and
// hashes nothing. Ids that do not fall that way (a launch id reused, or
// pending far longer than its neighbours) go a few slots on, and past
// maxProbe slots to a map, so no pattern of ids costs more than a map
// lookup.

// pendingSet is the launch table's pending launches (graph runs aside),
// by source: each source's launches by id and its queue (srcQueue).
type pendingSet struct {
	bySrc map[uint32]*srcQueue
	last  *srcQueue // the source looked up last: the poll loop reads one ring at a time
	n     int       // pending launches, every source's
}

// find returns source src's queue, nil if it has none.
func (ps *pendingSet) find(src uint32) *srcQueue {
	if q := ps.last; q != nil && q.src == src {
		return q
	}
	q := ps.bySrc[src]
	if q != nil {
		ps.last = q
	}
	return q
}

// of returns source src's queue, made on first use.
func (ps *pendingSet) of(src uint32) *srcQueue {
	q := ps.find(src)
	if q == nil {
		q = &srcQueue{src: src}
		ps.bySrc[src] = q
		ps.last = q
	}
	return q
}

// get returns the pending launch of key, nil if none.
func (ps *pendingSet) get(key srcKey) *launch {
	if q := ps.find(key.src); q != nil {
		return q.ids.get(key.id)
	}
	return nil
}

// put adds launch l as key's (none pending).
func (ps *pendingSet) put(key srcKey, l *launch) {
	ps.of(key.src).ids.put(key.id, l)
	ps.n++
}

// del forgets key's pending launch.
func (ps *pendingSet) del(key srcKey) {
	if q := ps.find(key.src); q != nil && q.ids.del(key.id) {
		ps.n--
	}
}

// forget drops source src's queue (its launches are gone).
func (ps *pendingSet) forget(src uint32) {
	if q := ps.bySrc[src]; q != nil {
		ps.n -= q.ids.len()
	}
	delete(ps.bySrc, src)
	ps.last = nil
}

const (
	maxProbe   = 8  // slots an id may lie past its own before it goes to the map
	minIDSlots = 64 // the smallest table
)

// idTable maps one source's launch ids to its pending launches: an id's
// slot is its low bits, or the next free one within maxProbe (linear
// probing; a removal moves the entries after it back, so that a lookup
// stops at the first free slot); over holds the ids that found none.
// It grows when half full and shrinks when an eighth is.
type idTable struct {
	slots []idSlot // a power of two, or none
	n     int      // entries in slots
	over  map[uint64]*launch
}

type idSlot struct {
	id uint64
	l  *launch // nil: free
}

func (t *idTable) len() int { return t.n + len(t.over) }

// get returns the launch of id, nil if none.
func (t *idTable) get(id uint64) *launch {
	if i := t.index(id); i >= 0 {
		return t.slots[i].l
	}
	if len(t.over) > 0 {
		return t.over[id]
	}
	return nil
}

// index returns id's slot, -1 if it is not in slots.
func (t *idTable) index(id uint64) int {
	mask := uint64(len(t.slots) - 1)
	for i, p := id&mask, 0; p < maxProbe && len(t.slots) > 0; i, p = (i+1)&mask, p+1 {
		switch s := &t.slots[i]; {
		case s.l == nil:
			return -1
		case s.id == id:
			return int(i)
		}
	}
	return -1
}

// put adds l as id's launch (id has none).
func (t *idTable) put(id uint64, l *launch) {
	if 2*(t.n+1) > len(t.slots) {
		t.resize(max(minIDSlots, 2*len(t.slots)))
	}
	t.insert(id, l)
}

// insert puts l in id's slot or one of the maxProbe after it, else in
// over.
func (t *idTable) insert(id uint64, l *launch) {
	mask := uint64(len(t.slots) - 1)
	for i, p := id&mask, 0; p < maxProbe; i, p = (i+1)&mask, p+1 {
		if t.slots[i].l == nil {
			t.slots[i] = idSlot{id, l}
			t.n++
			return
		}
	}
	if t.over == nil {
		t.over = map[uint64]*launch{}
	}
	t.over[id] = l
}

// del removes id's launch; false if it had none.
func (t *idTable) del(id uint64) bool {
	i := t.index(id)
	if i < 0 {
		_, ok := t.over[id]
		delete(t.over, id)
		return ok
	}
	t.shiftBack(uint64(i))
	t.n--
	if len(t.slots) > minIDSlots && 8*t.n < len(t.slots) {
		t.resize(len(t.slots) / 2)
	}
	return true
}

// shiftBack frees slot i, moving back the entries after it that may lie
// there (their own slot is not after i), so that every entry stays
// reachable from its own slot without a free one in between. Only the
// maxProbe-1 slots after the hole can hold such an entry: the scan stops
// there, not at the end of a run of consecutive ids.
func (t *idTable) shiftBack(i uint64) {
	mask := uint64(len(t.slots) - 1)
	for j := (i + 1) & mask; t.slots[j].l != nil && (j-i)&mask < maxProbe; j = (j + 1) & mask {
		if home := t.slots[j].id & mask; (j-home)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = idSlot{}
}

// resize rebuilds the table with n slots, over's ids included.
func (t *idTable) resize(n int) {
	old, over := t.slots, t.over
	t.slots, t.n, t.over = make([]idSlot, n), 0, nil
	for _, s := range old {
		if s.l != nil {
			t.insert(s.id, s.l)
		}
	}
	for id, l := range over {
		t.insert(id, l)
	}
}
