// Package secret is the one rule for which of the MAS's secrets are
// scrubbed from text, and the scrubber every layer uses: the engine (every
// text it takes in), the trails (every entry they keep or return), the MCP
// server and the monitor's API (answers that quote what they were given),
// the downstream pool (a server's configured credentials), the LLM client
// (the API key and the base URL's credentials) and the store (NATS
// credentials in its connect errors). Which values count as secrets is
// each layer's business (a server's Authorization header, the API key);
// which of them are scrubbed, and how, is decided here.
//
// The rule: a secret is scrubbed wherever it appears, whole, when it is at
// least MinLen bytes long; a shorter one is not scrubbed at all, anywhere.
// Secrets are also found as JSON and Go quoting spell them (a password
// with a quote or an ampersand in an encoded trail entry or a %q message).
//
// Why no shorter ones, not even as whole words only: short values that are
// configured as secrets are the ones most likely to be ordinary words —
// the dummy API keys of local endpoints ("ollama", "EMPTY", "none"), a
// four-letter password ("test", "admin") — and a whole-word rule would
// still redact every "ollama" and "admin" from the state, the prompts and
// the trail, mangling what the agents read. A value that short is also
// guessed faster than it is leaked. So the MAS does not pretend to hide
// it: it warns at start that it is too short to be scrubbed (internal/app)
// and scrubs nothing in its name, the same in every layer (before, the
// trail redacted 4–7 byte secrets that the state, the resources and the
// logs showed anyway).
package secret

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// MinLen is the shortest secret scrubbed (bytes); see the package comment.
const MinLen = 8

// Redacted replaces a secret in the MAS's state, its trail and its answers.
// The LLM client and the downstream pool write "[REDACTED]", the store's
// connect errors "****": each layer keeps the word its users know.
const Redacted = "[redacted]"

// Scrubbed reports whether a secret s is scrubbed (MinLen or longer).
func Scrubbed(s string) bool { return len(s) >= MinLen }

// List is a set of secrets to scrub from text. Fixed at creation; safe for
// concurrent use. A nil List scrubs nothing.
type List struct {
	// kept are the secrets given that are scrubbed, once each, longest
	// first.
	kept []string
	// forms are kept and how JSON and Go quoting spell them, once each,
	// longest first (a secret that contains another is replaced whole).
	forms []string
	// bforms are forms as bytes.
	bforms [][]byte
	// with replaces a secret.
	with string
}

// New returns the List of those of secrets that are scrubbed (Scrubbed),
// each replaced by with; nil when none is.
func New(with string, secrets ...string) *List {
	l := &List{with: with}
	for _, s := range secrets {
		if Scrubbed(s) && !slices.Contains(l.kept, s) {
			l.kept = append(l.kept, s)
		}
	}
	if len(l.kept) == 0 {
		return nil
	}
	for _, s := range l.kept {
		for _, f := range spellings(s) {
			if !slices.Contains(l.forms, f) {
				l.forms = append(l.forms, f)
			}
		}
	}
	longestFirst := func(a, b string) int { return len(b) - len(a) }
	slices.SortStableFunc(l.kept, longestFirst)
	slices.SortStableFunc(l.forms, longestFirst)
	for _, f := range l.forms {
		l.bforms = append(l.bforms, []byte(f))
	}
	return l
}

// spellings are s as written and as JSON (with and without HTML escaping)
// and Go's %q spell it inside their quotes, and those spelt once more as
// JSON: a tool call's result is JSON kept as a text inside the trail's
// JSON entry, where a secret with a quote, a backslash or an ampersand is
// escaped twice.
func spellings(s string) []string {
	once := quoted(s)
	out := slices.Clone(once)
	for _, f := range once[1:] {
		for _, g := range quoted(f)[2:] { // as JSON
			if !slices.Contains(out, g) {
				out = append(out, g)
			}
		}
	}
	return out
}

// quoted is s, as Go's %q and as JSON (with and without HTML escaping)
// spell it inside their quotes, in that order.
func quoted(s string) []string {
	out := []string{s, strings.Trim(strconv.Quote(s), `"`)}
	for _, html := range []bool{true, false} {
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(html)
		if enc.Encode(s) == nil {
			out = append(out, strings.TrimSuffix(strings.TrimSuffix(b.String(), "\n"), `"`)[1:])
		}
	}
	return out
}

// Len is how many secrets l scrubs.
func (l *List) Len() int {
	if l == nil {
		return 0
	}
	return len(l.kept)
}

// All returns the secrets l scrubs, longest first (not a copy: do not
// change it).
func (l *List) All() []string {
	if l == nil {
		return nil
	}
	return l.kept
}

// Text returns s with every secret replaced (s itself when it holds none).
// Where secrets overlap or touch, one replacement covers them all, so no
// part of one is left beside another's replacement.
func (l *List) Text(s string) string {
	if l == nil || !l.in(s) {
		return s
	}
	hide := make([]bool, len(s))
	l.Mark(s, hide)
	return Cover(s, hide, l.with)
}

// Bytes is Text on b (b itself when it holds none).
func (l *List) Bytes(b []byte) []byte {
	if l == nil || !slices.ContainsFunc(l.bforms, func(f []byte) bool { return bytes.Contains(b, f) }) {
		return b
	}
	return []byte(l.Text(string(b)))
}

// in reports whether s holds a secret, whole or cut by a clip.
func (l *List) in(s string) bool {
	clipped := strings.Contains(s, ClipMark)
	for _, f := range l.forms {
		if strings.Contains(s, f) || clipped && strings.Contains(s, f[:MinLen]) {
			return true
		}
	}
	return false
}

// Mark sets hide[i] for every byte i of s that is part of a secret (hide is
// len(s) long): for scrubbers that hide more than the secrets themselves
// (the LLM client hides runs and masked forms of its key), then Cover.
func (l *List) Mark(s string, hide []bool) {
	if l == nil {
		return
	}
	clipped := strings.Contains(s, ClipMark)
	for _, f := range l.forms {
		for i := 0; ; {
			j := strings.Index(s[i:], f)
			if j < 0 {
				break
			}
			for k := i + j; k < i+j+len(f); k++ {
				hide[k] = true
			}
			i += j + 1
		}
		if clipped {
			markClipped(s, f, hide)
		}
	}
}

// ClipMark is what ends a value cut short to be quoted (the server's
// errors quote the first bytes of what a client sent, then "…").
const ClipMark = "…"

// markClipped marks where s holds the first MinLen bytes or more of f,
// cut right before a ClipMark: a secret a clip cut in two, which no longer
// matches whole.
func markClipped(s, f string, hide []bool) {
	head := f[:MinLen]
	for i := 0; ; {
		j := strings.Index(s[i:], head)
		if j < 0 {
			return
		}
		at := i + j
		n := MinLen
		for at+n < len(s) && n < len(f) && s[at+n] == f[n] {
			n++
		}
		if n < len(f) && strings.HasPrefix(s[at+n:], ClipMark) {
			for k := at; k < at+n; k++ {
				hide[k] = true
			}
		}
		i = at + 1
	}
}

// Cover returns s with each run of hidden bytes (hide is len(s) long)
// replaced by with.
func Cover(s string, hide []bool, with string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		if !hide[i] {
			b.WriteByte(s[i])
			i++
			continue
		}
		b.WriteString(with)
		for i < len(s) && hide[i] {
			i++
		}
	}
	return b.String()
}

// Error returns err, or when its text holds a secret an error with the
// text scrubbed that still wraps err (errors.Is and errors.As see what
// they saw).
func (l *List) Error(err error) error {
	if err == nil || l == nil {
		return err
	}
	msg := err.Error()
	if clean := l.Text(msg); clean != msg {
		return &scrubbedError{msg: clean, err: err}
	}
	return err
}

// scrubbedError is an error whose text had a secret.
type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }
