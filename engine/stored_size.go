package engine

import (
	"strings"
	"unicode/utf8"
)

// storedLen is how many bytes s takes in a stored document, without its
// quotes: its bytes as JSON writes them. The store writes '<', '>' and '&'
// as they are (store/write.go); a quote, a backslash, \b, \f, \n, \r and
// \t take two bytes, another control character six (\u0001), U+2028 and
// U+2029 six, a byte of invalid UTF-8 six (\ufffd). The document bounds
// (MaxDocumentBytes) count texts with it: a text of control characters
// stores at six times its bytes, past the room between the bound and the
// store's limit. It runs on every change of a document, over texts of up
// to MaxTextChars: ASCII written as it is is passed over eight bytes at a
// time, and what is not ASCII is looked at only when there is some.
func storedLen(s string) int {
	n, wide, i := len(s), false, 0
	for ; i+8 <= len(s); i += 8 {
		b := s[i : i+8]
		w := uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
			uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
		if w&highBits == 0 && byteBelow(w, 0x20)|byteBelow(w^('"'*lowBits), 1)|byteBelow(w^('\\'*lowBits), 1) == 0 {
			continue
		}
		wide = wide || w&highBits != 0
		for j := range 8 {
			n += int(escapedExtra[b[j]])
		}
	}
	for ; i < len(s); i++ {
		n += int(escapedExtra[s[i]])
		wide = wide || s[i] >= utf8.RuneSelf
	}
	if wide {
		n += wideExtra(s)
	}
	return n
}

const lowBits, highBits = 0x0101010101010101, 0x8080808080808080

// byteBelow is non-zero when a byte of w is below k (k at most 0x80).
func byteBelow(w, k uint64) uint64 { return (w - k*lowBits) &^ w & highBits }

// escapedExtra is how many bytes JSON adds to each ASCII byte (none to
// the bytes of a wider character: wideExtra counts those).
var escapedExtra = func() (t [256]uint8) {
	for c := range 0x20 {
		t[c] = 5 // \u00XX
	}
	for _, c := range []byte{'"', '\\', '\b', '\f', '\n', '\r', '\t'} {
		t[c] = 1
	}
	return t
}()

// wideExtra is how many bytes JSON adds to the characters of s that are
// not ASCII: U+2028 and U+2029 (three bytes) are written as six, a byte
// of invalid UTF-8 as six (\ufffd).
func wideExtra(s string) int {
	const sep = len(`\u2028`) - len("\u2028")
	if utf8.ValidString(s) {
		return sep * (strings.Count(s, "\u2028") + strings.Count(s, "\u2029"))
	}
	n := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			n += len(`\ufffd`) - 1
		case r == '\u2028' || r == '\u2029':
			n += sep
		}
		i += size
	}
	return n
}
