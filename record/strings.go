package record

import (
	"strings"
	"unicode/utf8"
)

// Sanitize makes a string taken from a record safe to export: each run of
// invalid UTF-8 becomes U+FFFD, and the result is cut to at most maxLen
// bytes at a rune boundary. Exporters (Prometheus) drop series whose
// labels are not valid UTF-8.
func Sanitize(s string, maxLen int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= maxLen {
		return s
	}
	cut := maxLen
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
