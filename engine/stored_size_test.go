package engine

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// storedJSON is s as the store writes it (store/write.go): encoding/json
// without HTML escaping, quotes included.
func storedJSON(t testing.TB, s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func TestStoredLenIsTheEncodedSize(t *testing.T) {
	for _, s := range []string{
		"", "plain ascii text", "<p>a & b</p>", `"quoted" \ back`, "\b\f\n\r\t", "\x00\x01\x1f\x7f",
		"研究任务", "\u2028\u2029", "\xff\xfe", "\xe2\x80", "€uro", strings.Repeat("\x01", 17),
		strings.Repeat("abcdefg\"", 5), "abcdefgh研究ijklmnop\u2028qrstuvwx\xffyz",
	} {
		if got, want := storedLen(s)+2, len(storedJSON(t, s)); got != want {
			t.Errorf("storedLen(%q)+2 = %d, want %d", s, got, want)
		}
	}
}

func FuzzStoredLen(f *testing.F) {
	for _, s := range []string{"", "plain ascii text", "\x01\"\\\n", "研究\u2028", "\xff\xe2\x80abcdefgh"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := storedLen(s)+2, len(storedJSON(t, s)); got != want {
			t.Fatalf("storedLen(%q)+2 = %d, want %d", s, got, want)
		}
	})
}

// BenchmarkStoredLen measures storedLen over a text of MaxTextChars
// (16,000) characters of each kind.
func BenchmarkStoredLen(b *testing.B) {
	for _, c := range []struct{ name, unit string }{
		{"ascii", "plain text "}, {"chinese", "研究任务"}, {"controls", "\x01"},
	} {
		s := strings.Repeat(c.unit, 16_000/len([]rune(c.unit)))
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(s)))
			for b.Loop() {
				storedLen(s)
			}
		})
	}
}
