package procres

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// The application's OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, as its
// shim sent them in HELLO. The OpenTelemetry SDK specification: the
// attributes are key=value pairs separated by commas, in the W3C Baggage
// format without metadata; "," and "=" in keys and values are
// percent-encoded, other characters may be; values are strings; on any
// error the whole variable is discarded and the error reported. Whitespace
// around keys and values is trimmed, and empty members are skipped.
//
// Beyond the specification, because the values come from a process the
// collector does not trust, a decoded key or value holding a control
// character or invalid UTF-8, a key over MaxKeyLen bytes, a value over
// MaxValueLen bytes, or more than MaxAttrs pairs is an error too.

// Bounds of the application's attributes.
const (
	MaxAttrs    = 64   // pairs in OTEL_RESOURCE_ATTRIBUTES
	MaxKeyLen   = 256  // bytes of a decoded key
	MaxValueLen = 1024 // bytes of a decoded value (and of OTEL_SERVICE_NAME)
)

// Names of the environment variables, as errors name them.
const (
	EnvServiceName = "OTEL_SERVICE_NAME"
	EnvResAttrs    = "OTEL_RESOURCE_ATTRIBUTES"
)

// Attr is one attribute of the application's.
type Attr struct{ Key, Value string }

// FieldError says why a variable was discarded.
type FieldError struct {
	Field  string // EnvServiceName or EnvResAttrs
	Pair   int    // 1-based pair of OTEL_RESOURCE_ATTRIBUTES (0: the variable as a whole)
	Reason string
}

// Error implements error.
func (e *FieldError) Error() string {
	if e.Pair > 0 {
		return fmt.Sprintf("%s: pair %d: %s; the variable is ignored", e.Field, e.Pair, e.Reason)
	}
	return fmt.Sprintf("%s: %s; the variable is ignored", e.Field, e.Reason)
}

// ParseServiceName checks OTEL_SERVICE_NAME (taken as it is, not
// percent-decoded); "" for an empty or blank value.
func ParseServiceName(s string) (string, error) {
	s = strings.TrimSpace(s)
	if reason := checkText(s, MaxValueLen); reason != "" {
		return "", &FieldError{Field: EnvServiceName, Reason: reason}
	}
	return s, nil
}

// ParseResAttrs decodes OTEL_RESOURCE_ATTRIBUTES. Later pairs win over
// earlier ones of the same key.
func ParseResAttrs(s string) ([]Attr, error) {
	var out []Attr
	pair := 0
	for member := range strings.SplitSeq(s, ",") {
		pair++
		if strings.TrimSpace(member) == "" {
			continue
		}
		k, v, ok := strings.Cut(member, "=")
		if !ok {
			return nil, &FieldError{Field: EnvResAttrs, Pair: pair, Reason: "no '='"}
		}
		key, err := decode(strings.TrimSpace(k), MaxKeyLen)
		if err == "" && key == "" {
			err = "empty key"
		}
		if err != "" {
			return nil, &FieldError{Field: EnvResAttrs, Pair: pair, Reason: "key: " + err}
		}
		val, err := decode(strings.TrimSpace(v), MaxValueLen)
		if err != "" {
			return nil, &FieldError{Field: EnvResAttrs, Pair: pair, Reason: fmt.Sprintf("value of %q: %s", key, err)}
		}
		if len(out) == MaxAttrs {
			return nil, &FieldError{Field: EnvResAttrs, Reason: fmt.Sprintf("more than %d pairs", MaxAttrs)}
		}
		out = append(out, Attr{key, val})
	}
	return dedup(out), nil
}

// dedup keeps the last pair of each key, in the order of their last
// occurrence.
func dedup(as []Attr) []Attr {
	last := make(map[string]int, len(as))
	for i, a := range as {
		last[a.Key] = i
	}
	out := as[:0]
	for i, a := range as {
		if last[a.Key] == i {
			out = append(out, a)
		}
	}
	return out
}

// decode percent-decodes s and checks the result; it returns the reason
// when s is not acceptable.
func decode(s string, max int) (string, string) {
	if !strings.Contains(s, "%") {
		return s, checkText(s, max)
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		hi, lo := unhex(s, i+1), unhex(s, i+2)
		if hi < 0 || lo < 0 {
			return "", fmt.Sprintf("malformed percent-encoding at byte %d", i)
		}
		b.WriteByte(byte(hi<<4 | lo))
		i += 2
		if b.Len() > max {
			break
		}
	}
	return b.String(), checkText(b.String(), max)
}

// unhex is the value of the hex digit s[i], -1 if there is none.
func unhex(s string, i int) int {
	if i >= len(s) {
		return -1
	}
	switch c := s[i]; {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// checkText says why s is not an acceptable decoded key or value: too
// long, invalid UTF-8, or holding a control character.
func checkText(s string, max int) string {
	switch {
	case len(s) > max:
		return fmt.Sprintf("longer than %d bytes", max)
	case !utf8.ValidString(s):
		return "invalid UTF-8"
	}
	for i, r := range s {
		if r < 0x20 || r == 0x7f || (0x80 <= r && r < 0xa0) {
			return fmt.Sprintf("control character %U at byte %d", r, i)
		}
	}
	return ""
}
