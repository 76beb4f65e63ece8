package llm

import (
	"net/url"
	"strings"

	"github.com/mas-mcp/mas-mcp/internal/secret"
)

// Providers and proxies put secrets into their error bodies: the key itself
// (a proxy echoing the Authorization header), a masked form of it (OpenAI:
// "Incorrect API key provided: sk-abc*********LEAK"), the request URL with
// the base URL's credentials and query. A scrubber removes all of these from
// any text before it becomes an error or a log record, since such text ends
// up in step errors every client can read.

// Which secrets are scrubbed where they appear whole is internal/secret's
// rule, the MAS's one: those of secret.MinLen bytes or more (shorter ones
// would make errors unreadable, and are not scrubbed elsewhere either).

// minRun is the shortest run of a secret's characters that is scrubbed
// wherever it appears: shorter runs of an API key are too likely to occur
// by chance, longer ones give part of the key away. As long as the
// shortest secret scrubbed whole: a run gives as much away as one.
const minRun = secret.MinLen

// minVisible is how many characters of a secret in a row a masked form may
// show before it counts as giving part of the secret away (maskedSpans).
const minVisible = 4

// scrubber removes secrets from text. Fixed at creation; safe for
// concurrent use.
type scrubber struct {
	// exact are the secrets scrubbed where they appear whole.
	exact *secret.List
	// runs holds every run of minRun characters of each secret: any
	// longer run of the secret is a chain of them.
	runs map[string]bool
	// masked are the secrets whose masked forms are scrubbed (exact's).
	masked []string
}

// newScrubber scrubs apiKey and what base (the base URL, may be nil)
// carries: user name, password, the whole user information, the whole
// query, each query value (as sent and decoded).
func newScrubber(apiKey string, base *url.URL) *scrubber {
	s := &scrubber{runs: map[string]bool{}}
	secrets := []string{apiKey}
	if base != nil {
		if base.User != nil {
			pw, _ := base.User.Password()
			secrets = append(secrets, base.User.String(), base.User.Username(), pw)
		}
		if base.RawQuery != "" {
			secrets = append(secrets, base.RawQuery)
			for part := range strings.SplitSeq(base.RawQuery, "&") {
				k, v, found := strings.Cut(part, "=")
				if !found {
					v = k // a bare parameter may be the secret itself
				}
				secrets = append(secrets, v)
				if dv, err := url.QueryUnescape(v); err == nil {
					secrets = append(secrets, dv)
				}
			}
		}
	}
	s.exact = secret.New(redacted, secrets...)
	s.masked = s.exact.All()
	for _, sec := range s.masked {
		for i := 0; i+minRun <= len(sec); i++ {
			s.runs[sec[i:i+minRun]] = true
		}
	}
	return s
}

// scrub returns text with every part derived from a secret replaced by
// [REDACTED]: the secret, any run of minRun or more of its characters, and
// masked forms of it (see maskedSpans).
func (s *scrubber) scrub(text string) string {
	if s == nil || s.exact.Len() == 0 {
		return text
	}
	hide := make([]bool, len(text))
	mark := func(from, to int) {
		for i := from; i < to; i++ {
			hide[i] = true
		}
	}
	s.exact.Mark(text, hide)
	for i := 0; i+minRun <= len(text); i++ {
		if s.runs[text[i:i+minRun]] {
			mark(i, i+minRun)
		}
	}
	for _, sp := range s.maskedSpans(text) {
		mark(sp[0], sp[1])
	}
	return secret.Cover(text, hide, redacted)
}

// maskedSpans finds masked forms of the secrets: a word made of key
// characters and at least one mask ("**" or more, "…", "...") whose visible
// part before the first mask is a prefix of a secret, whose visible part
// after the last mask is a suffix of one, or which shows minVisible or more
// characters of one in a row (sk-…abcd, sk-abc*********LEAK,
// sk-…7f3**********LEAK). Both ends need at least three characters: "sk-"
// is the prefix of every OpenAI key, so a masked OpenAI key is always
// found.
func (s *scrubber) maskedSpans(text string) [][2]int {
	if len(s.masked) == 0 {
		return nil
	}
	var spans [][2]int
	for i := 0; i < len(text); {
		if maskAt(text, i) == 0 && !keyChar(text[i]) {
			i++
			continue
		}
		// A word: key characters and masks.
		start := i
		var parts []string // visible segments, "" where a mask is
		seg := start
		hasMask := false
		for i < len(text) {
			if n := maskAt(text, i); n > 0 {
				parts = append(parts, text[seg:i], "")
				hasMask = true
				i += n
				seg = i
				continue
			}
			if !keyChar(text[i]) {
				break
			}
			i++
		}
		parts = append(parts, text[seg:i])
		if hasMask && s.revealing(parts) {
			spans = append(spans, [2]int{start, i})
		}
	}
	return spans
}

// revealing reports whether the visible segments of a masked word give
// part of a secret away.
func (s *scrubber) revealing(parts []string) bool {
	first, last := parts[0], parts[len(parts)-1]
	for _, sec := range s.masked {
		if len(first) >= 3 && strings.HasPrefix(sec, first) {
			return true
		}
		if len(last) >= 3 && strings.HasSuffix(sec, last) {
			return true
		}
		for _, p := range parts {
			if len(p) >= minVisible && strings.Contains(sec, p) {
				return true
			}
		}
	}
	return false
}

// maskAt is the length of the mask starting at text[i], 0 if none.
func maskAt(text string, i int) int {
	switch {
	case strings.HasPrefix(text[i:], "…"):
		return len("…")
	case strings.HasPrefix(text[i:], "..."), strings.HasPrefix(text[i:], "**"):
		n := 0
		for i+n < len(text) && text[i+n] == text[i] {
			n++
		}
		return n
	}
	return 0
}

// keyChar: the characters API keys and tokens are made of.
func keyChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// RedactURL renders a base URL for logs and errors: its user information
// and the value of each query parameter are replaced by [REDACTED] (the
// parameter names stay, to show what was configured); the rest is shown.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "[unparsable URL]"
	}
	user, query := u.User != nil, u.RawQuery
	u.User, u.RawQuery, u.ForceQuery = nil, "", false
	out := u.String()
	if user {
		if scheme, rest, ok := strings.Cut(out, "://"); ok {
			out = scheme + "://" + redacted + "@" + rest
		}
	}
	if query != "" {
		var parts []string
		for part := range strings.SplitSeq(query, "&") {
			if k, _, found := strings.Cut(part, "="); found {
				parts = append(parts, k+"="+redacted)
			} else {
				parts = append(parts, redacted)
			}
		}
		out += "?" + strings.Join(parts, "&")
	}
	return out
}
