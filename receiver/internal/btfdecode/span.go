package btfdecode

import "strings"

// SpanHint says which fields of a record hold the start and end timestamps
// of an interval, so that the record can become a span; without both, the
// receiver makes a span event.
type SpanHint struct {
	Start int  // index in the fields Decode returns
	End   int  // index in the fields Decode returns
	OK    bool // both were found
}

// Span returns the decoder's span hint.
func (d *Decoder) Span() SpanHint { return d.span }

// Start and end field names, most specific first. The last path segment of
// a field is compared without regard to case.
var (
	startNames = []string{"start_ns", "ts_start", "start_ts", "begin_ns", "start_time", "start", "begin"}
	endNames   = []string{"end_ns", "ts_end", "end_ts", "finish_ns", "end_time", "end", "finish"}
)

// findSpan picks the integer fields named like a start and an end. Among
// several candidates the most specific name wins, then the first field.
func findSpan(leaves []leaf) SpanHint {
	start, end := pick(leaves, startNames), pick(leaves, endNames)
	if start < 0 || end < 0 || start == end {
		return SpanHint{Start: -1, End: -1}
	}
	return SpanHint{Start: start, End: end, OK: true}
}

func pick(leaves []leaf, names []string) int {
	for _, want := range names {
		for i := range leaves {
			l := &leaves[i]
			if l.Kind != KindInt && l.Kind != KindUint {
				continue
			}
			if l.Size != 8 && l.BitSize == 0 {
				continue // nanosecond timestamps need 64 bits
			}
			name := l.Name
			if j := strings.LastIndexByte(name, '.'); j >= 0 {
				name = name[j+1:]
			}
			if strings.EqualFold(name, want) {
				return i
			}
		}
	}
	return -1
}
