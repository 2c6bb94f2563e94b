package ptxmod

import (
	"bytes"
	"errors"
	"fmt"
)

// Limits bound what parsing a module may cost: its memory is about 24
// bytes a token plus the statements (Stmt, Func) built from them, so
// bounding the text, its tokens and its functions bounds the parse.
type Limits struct {
	MaxBytes  int // bytes of source
	MaxTokens int // tokens (a token is 24 bytes; PTX from nvcc has about one per 4 bytes)
	MaxFuncs  int // .entry and .func definitions and declarations
}

// DefaultLimits are Parse's: 1 GiB of text, 1<<28 tokens, 1<<20
// functions, which nothing nvcc writes comes near.
var DefaultLimits = Limits{MaxBytes: 1 << 30, MaxTokens: 1 << 28, MaxFuncs: 1 << 20}

// ErrLimit is wrapped by every *LimitError.
var ErrLimit = errors.New("limit exceeded")

// LimitError says that a module passes one of its Limits.
type LimitError struct {
	Line, Col int    // where the limit was passed, 1-based
	Limit     string // "Limits.MaxBytes", "Limits.MaxTokens" or "Limits.MaxFuncs"
	What      string // what passed it
}

// Error returns "ptx: line:col: what (limit)".
func (e *LimitError) Error() string {
	return fmt.Sprintf("ptx: %d:%d: %s (%s)", e.Line, e.Col, e.What, e.Limit)
}

// Unwrap returns ErrLimit.
func (e *LimitError) Unwrap() error { return ErrLimit }

// CostPerToken bounds the bytes parsing allocates per token: the token,
// its share of the statements, operands and memory accesses built from
// it, garbage included. TestParseCost measures the shapes that cost the
// most: 24 for "{{{…", ~170 for nvcc-like bodies, ~280 for "ld [a];".
const CostPerToken = 320

// Cost returns an upper bound of the bytes ParseLimits(src, l) allocates,
// from one counting pass over src that allocates nothing: the caller can
// reserve memory before parsing. It fails as ParseLimits would when src
// passes MaxBytes or MaxTokens.
func Cost(src []byte, l Limits) (int64, error) {
	if len(src) > l.MaxBytes {
		return 0, &LimitError{Line: 1, Col: 1, Limit: "Limits.MaxBytes",
			What: fmt.Sprintf("%d bytes of PTX, more than %d", len(src), l.MaxBytes)}
	}
	lx := lexer{src: src, maxTokens: l.MaxTokens}
	var buf [256]token
	_, n, err := lx.scan(buf[:0], true)
	if err != nil {
		return 0, err
	}
	lines := int64(bytes.Count(src, []byte{'\n'})) + 1
	return int64(n)*CostPerToken + 4*lines + costFixed, nil
}

// costFixed is what parsing allocates whatever the source (the Module,
// the counting buffer, maps of names).
const costFixed = 64 << 10
