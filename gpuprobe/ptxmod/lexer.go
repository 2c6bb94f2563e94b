package ptxmod

import (
	"bytes"
	"fmt"
	"sort"
)

// tokKind is the kind of a token.
type tokKind uint8

const (
	tokEOF    tokKind = iota
	tokWord           // .directive, opcode.with.suffixes, %reg, $label, name
	tokNumber         // 12, 0x1f, 0f3F800000, 1.5
	tokString         // "text" (with its quotes)
	tokPunct          // one character: { } ( ) [ ] ; , : @ ! + - < > = | ...
)

// token is a span of the source; the bytes before it back to the end of
// the previous token are its leading trivia (white space and comments).
type token struct {
	pos  int // first byte
	end  int // one past the last byte
	kind tokKind
	nl   bool
}

// lexer splits PTX source into tokens. It never copies text: tokens are
// offsets into src.
type lexer struct {
	src       []byte
	lines     []int32 // offset of the first byte of each line (sources are < 2 GiB: Limits.MaxBytes)
	maxTokens int     // Limits.MaxTokens
}

// SyntaxError reports malformed PTX at a line and column.
type SyntaxError struct {
	Line, Col int    // 1-based; Col counts bytes
	Msg       string // what is wrong
}

// Error returns "ptx: line:col: msg".
func (e *SyntaxError) Error() string {
	return fmt.Sprintf("ptx: %d:%d: %s", e.Line, e.Col, e.Msg)
}

// newLineTable returns the offset of each line, in a slice of exactly
// that size (counted first: 4 bytes a line, no garbage from growing).
func newLineTable(src []byte) []int32 {
	lines := make([]int32, 1, bytes.Count(src, []byte{'\n'})+1)
	for i, c := range src {
		if c == '\n' {
			lines = append(lines, int32(i+1))
		}
	}
	return lines
}

// position returns the 1-based line and column of a byte offset.
func position(lines []int32, off int) (line, col int) {
	i := sort.Search(len(lines), func(i int) bool { return int(lines[i]) > off }) - 1
	if i < 0 {
		i = 0
	}
	return i + 1, off - int(lines[i]) + 1
}

// position returns the line and column of an offset, from the line
// table, or without one (Cost builds none) by counting.
func (lx *lexer) position(off int) (line, col int) {
	if lx.lines != nil {
		return position(lx.lines, off)
	}
	nl := bytes.LastIndexByte(lx.src[:off], '\n')
	return bytes.Count(lx.src[:off], []byte{'\n'}) + 1, off - nl
}

func (lx *lexer) errorf(off int, format string, args ...any) error {
	line, col := lx.position(off)
	return &SyntaxError{Line: line, Col: col, Msg: fmt.Sprintf(format, args...)}
}

func isWordStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '$' || c == '%' || c == '.'
}

func isWordChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '$' || c == '.'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// punct lists the one-character tokens PTX uses.
const punct = "{}()[];,:@!+-<>=|*/~&^?"

// tokenize returns the tokens of src, ending with a tokEOF whose pos is
// len(src) (its trivia is the end of the file). A first pass counts the
// tokens (stopping past lx.maxTokens) in a small reused buffer, so the
// slice returned is allocated once at its exact size: nothing is
// reserved from len(src), and no garbage is left by growing.
func (lx *lexer) tokenize() ([]token, error) {
	_, n, err := lx.scan(make([]token, 0, 1<<10), true)
	if err != nil {
		return nil, err
	}
	toks, _, err := lx.scan(make([]token, 0, n), false)
	return toks, err
}

// scan tokenizes src into toks and returns them and their number. With
// count set it reuses toks whenever it is full and returns only the
// number.
func (lx *lexer) scan(toks []token, count bool) ([]token, int, error) {
	src := lx.src
	seen := 0 // tokens dropped from a full counting buffer
	i := 0
	for {
		// Trivia: white space and comments.
		nl := false
		for i < len(src) {
			c := src[i]
			if isSpace(c) {
				if c == '\n' {
					nl = true
				}
				i++
				continue
			}
			if c == '/' && i+1 < len(src) && src[i+1] == '/' {
				for i < len(src) && src[i] != '\n' {
					i++
				}
				continue
			}
			if c == '/' && i+1 < len(src) && src[i+1] == '*' {
				start := i
				i += 2
				for i+1 < len(src) && !(src[i] == '*' && src[i+1] == '/') {
					if src[i] == '\n' {
						nl = true
					}
					i++
				}
				if i+1 >= len(src) {
					return nil, 0, lx.errorf(start, "unterminated /* comment")
				}
				i += 2
				continue
			}
			break
		}
		if i >= len(src) {
			toks = append(toks, token{kind: tokEOF, pos: i, end: i, nl: nl})
			if count {
				return nil, seen + len(toks), nil
			}
			return toks, len(toks), nil
		}
		if count && len(toks) == cap(toks) {
			seen += len(toks)
			toks = toks[:0]
		}
		start := i
		if seen+len(toks) >= lx.maxTokens {
			line, col := lx.position(start)
			return nil, 0, &LimitError{Line: line, Col: col, Limit: "Limits.MaxTokens",
				What: fmt.Sprintf("more than %d tokens", lx.maxTokens)}
		}
		c := src[i]
		var kind tokKind
		switch {
		case isWordStart(c):
			kind = tokWord
			i++
			for i < len(src) {
				if isWordChar(src[i]) {
					i++
				} else if src[i] == ':' && i+2 < len(src) && src[i+1] == ':' && isWordChar(src[i+2]) {
					i += 2 // shared::cta, L2::128B
				} else {
					break
				}
			}
		case isDigit(c):
			kind = tokNumber
			i++
			for i < len(src) && isWordChar(src[i]) {
				if (src[i] == 'e' || src[i] == 'E') && i+1 < len(src) && (src[i+1] == '+' || src[i+1] == '-') && decimal(src[start:i]) {
					i += 2
					continue
				}
				i++
			}
		case c == '"':
			kind = tokString
			i++
			for i < len(src) && src[i] != '"' {
				if src[i] == '\\' {
					i++
				}
				if i < len(src) && src[i] == '\n' {
					return nil, 0, lx.errorf(start, "string not closed before the end of the line")
				}
				i++
			}
			if i >= len(src) {
				return nil, 0, lx.errorf(start, "string not closed before the end of the file")
			}
			i++
		case indexOf(punct, c) >= 0:
			kind = tokPunct
			i++
		default:
			if c < 0x20 || c >= 0x7f {
				return nil, 0, lx.errorf(start, "unexpected byte %#02x", c)
			}
			return nil, 0, lx.errorf(start, "unexpected character %q", c)
		}
		toks = append(toks, token{kind: kind, pos: start, end: i, nl: nl || seen+len(toks) == 0})
	}
}

// decimal reports whether a number so far is a plain decimal (so that an
// e/E followed by a sign is an exponent, not a hex digit).
func decimal(b []byte) bool {
	if len(b) > 1 && b[0] == '0' && (b[1] == 'x' || b[1] == 'X' || b[1] == 'f' || b[1] == 'F' || b[1] == 'd' || b[1] == 'D') {
		return false
	}
	for _, c := range b {
		if !isDigit(c) && c != '.' {
			return false
		}
	}
	return true
}

func indexOf(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}
