package ptxmod

import (
	"bytes"
	"fmt"
	"sort"
)

// edit replaces src[pos:end] (empty for an insertion) with text.
type edit struct {
	pos, end int
	text     string
	seq      int
}

func (m *Module) add(pos, end int, text string) {
	m.edits = append(m.edits, edit{pos: pos, end: end, text: text, seq: m.seq})
	m.seq++
}

// Edited reports whether any edit has been recorded.
func (m *Module) Edited() bool { return len(m.edits) > 0 }

// Reset drops all recorded edits.
func (m *Module) Reset() { m.edits, m.seq = nil, 0 }

// Insert inserts text at a byte offset of the source. Insertions at the
// same offset come out in the order they were made.
func (m *Module) Insert(off int, text string) {
	m.add(off, off, text)
}

// Replace replaces a span of the source with text.
func (m *Module) Replace(s Span, text string) {
	m.add(s.Pos, s.End, text)
}

// InsertBefore inserts text before a statement. When only white space
// precedes the statement on its line, the text goes at the start of that
// line, so that text ending in a newline becomes lines of its own;
// otherwise (a label on the same line, say) it goes right before the
// statement. A label before the statement stays before the text, so
// branches to it run the inserted code.
func (m *Module) InsertBefore(s *Stmt, text string) {
	m.Insert(m.lineStartBefore(s.Pos), text)
}

// InsertAfter inserts text after a statement: after the end of its line
// when only white space or a // comment follows it there, otherwise right
// after it.
func (m *Module) InsertAfter(s *Stmt, text string) {
	m.Insert(m.lineEndAfter(s.End), text)
}

// InsertTop inserts text at the top of a function body: before the first
// statement that follows the leading declarations, or before the closing
// brace of a body that has none.
func (m *Module) InsertTop(f *Func, text string) error {
	if !f.HasBody {
		return fmt.Errorf("ptx: %s has no body", f)
	}
	if f.Top != nil {
		m.InsertBefore(f.Top, text)
		return nil
	}
	m.Insert(m.lineStartBefore(f.BodyClose), text)
	return nil
}

// InsertAfterHeader inserts module-scope text (declarations, functions)
// after the .version/.target/.address_size lines, before anything else.
func (m *Module) InsertAfterHeader(text string) error {
	if m.version == nil || m.target == nil {
		return fmt.Errorf("ptx: module has no .version or .target header")
	}
	m.Insert(m.header, text)
	return nil
}

// AppendParam adds a parameter declaration (such as ".param .u64 gpuprobe_launch")
// at the end of a function's parameter list, creating the list when the
// function has none.
func (m *Module) AppendParam(f *Func, decl string) {
	switch {
	case f.ParamList.End == 0:
		m.Insert(f.NameSpan.End, "(\n\t"+decl+"\n)")
	case len(f.Params) == 0:
		m.Insert(f.ParamList.End-1, decl)
	default:
		m.Insert(f.Params[len(f.Params)-1].End, ",\n\t"+decl)
	}
}

// ReconcileVersion raises .version to major.minor when the module's is
// lower (the probes need at least that ISA), and leaves it otherwise. It
// reports whether it changed the version.
func (m *Module) ReconcileVersion(major, minor int) (bool, error) {
	if m.version == nil {
		return false, fmt.Errorf("ptx: module has no .version directive")
	}
	if major < m.Major || major == m.Major && minor <= m.Minor {
		return false, nil
	}
	m.Replace(m.versionNum, fmt.Sprintf("%d.%d", major, minor))
	return true, nil
}

// SetTarget replaces what follows .target (for example "sm_90" or
// "sm_80, debug").
func (m *Module) SetTarget(target string) error {
	if m.target == nil {
		return fmt.Errorf("ptx: module has no .target directive")
	}
	m.Replace(m.targetArgs, target)
	return nil
}

// lineStartBefore returns the start of the line of off when only spaces
// and tabs precede off on it, else off.
func (m *Module) lineStartBefore(off int) int {
	i := off
	for i > 0 && (m.src[i-1] == ' ' || m.src[i-1] == '\t') {
		i--
	}
	if i == 0 || m.src[i-1] == '\n' {
		return i
	}
	return off
}

// lineEndAfter returns the offset past the newline that ends the line of
// off when only spaces, tabs or a // comment follow off on it, else off.
func (m *Module) lineEndAfter(off int) int {
	i := off
	for i < len(m.src) && (m.src[i] == ' ' || m.src[i] == '\t' || m.src[i] == '\r') {
		i++
	}
	if i+1 < len(m.src) && m.src[i] == '/' && m.src[i+1] == '/' {
		for i < len(m.src) && m.src[i] != '\n' {
			i++
		}
	}
	switch {
	case i == len(m.src):
		return i
	case m.src[i] == '\n':
		return i + 1
	}
	return off
}

// Bytes returns the module with the edits applied; with no edits it is
// the source, byte for byte. Overlapping replacements are an error.
func (m *Module) Bytes() ([]byte, error) {
	if len(m.edits) == 0 {
		return bytes.Clone(m.src), nil
	}
	es := make([]edit, len(m.edits))
	copy(es, m.edits)
	sort.SliceStable(es, func(i, j int) bool {
		if es[i].pos != es[j].pos {
			return es[i].pos < es[j].pos
		}
		return es[i].seq < es[j].seq
	})
	var out bytes.Buffer
	n := len(m.src)
	for _, e := range es {
		n += len(e.text)
	}
	out.Grow(n)
	at := 0 // source copied up to here
	for _, e := range es {
		if e.pos < at || e.pos > len(m.src) || e.end < e.pos || e.end > len(m.src) {
			line, col := m.Position(min(max(e.pos, 0), len(m.src)))
			return nil, fmt.Errorf("ptx: edit at %d:%d overlaps an earlier replacement or lies outside the module", line, col)
		}
		out.Write(m.src[at:e.pos])
		out.WriteString(e.text)
		at = max(at, e.end, e.pos)
	}
	out.Write(m.src[at:])
	return out.Bytes(), nil
}

// Text returns the source text of a span.
func (m *Module) Text(s Span) string { return string(m.src[s.Pos:s.End]) }
