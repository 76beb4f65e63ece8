package downstream

import (
	"encoding/base64"
	"encoding/json"
	"net/url"
	"regexp"
	"strings"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/secret"
	"github.com/mas-mcp/mas-mcp/llm"
)

// A server's configuration holds its credentials: header values (an
// Authorization token), env values (a stdio server's API key), the URL's
// user information and query, secret flags among the args. Servers echo
// them back (a proxy quoting the Authorization header in its error, a
// failed login on stderr, net/http quoting the URL), so each server has a
// scrubber made from its own configuration, applied to everything of the
// server that mas-mcp keeps or shows: step errors and results, trail
// entries, log lines (stderr included).

// redacted replaces a secret.
const redacted = "[REDACTED]"

// secretName matches flag and variable names that say their value is a
// secret (--api-key, --token=…, -password).
var secretName = regexp.MustCompile(`(?i)(key|token|secret|passw|pwd|auth|credential|cookie|session|signature)`)

// scrubber replaces a server's configured secrets by [REDACTED], by
// internal/secret's rule: values under secret.MinLen bytes are left alone,
// as they are too likely to occur by chance (env DEBUG=1, a port, "true"):
// replacing them would mangle results and errors. Fixed at creation; safe
// for concurrent use; a nil scrubber changes nothing.
type scrubber struct {
	l *secret.List
}

// newScrubber collects sc's secrets: the values of headers and env
// variables named like a secret (Authorization, X-Api-Key, GITHUB_TOKEN) or
// that look random (and the credentials of an "Authorization: Scheme
// credentials" value) — not every value: "application/json" or
// NODE_ENV=production hidden in every result would mangle them, nor an
// absolute path, which a file server's results name — the URL's user name and
// password and its secret-looking query values (named like a secret, or
// looksRandom; as written and decoded: not a date or a version, which
// results are full of), the values of secret flags among the args, and the
// same of URLs in env values and args. Values under secret.MinLen
// characters are left alone.
func newScrubber(sc ServerConfig) *scrubber {
	var secrets []string
	add := func(vs ...string) {
		for _, v := range vs {
			secrets = append(secrets, strings.TrimSpace(v))
		}
	}
	addURL := func(raw string) {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			return
		}
		if u.User != nil {
			pw, _ := u.User.Password()
			add(u.User.String(), u.User.Username(), pw)
		}
		for part := range strings.SplitSeq(u.RawQuery, "&") {
			k, v, _ := strings.Cut(part, "=")
			dv, err := url.QueryUnescape(v)
			if err != nil {
				dv = v
			}
			if secretName.MatchString(k) || looksRandom(dv) {
				add(v, dv)
			}
		}
	}
	for k, v := range sc.Headers {
		if !secretName.MatchString(k) && !looksRandom(v) {
			continue // Accept: application/json, X-Region: europe-west
		}
		add(v)
		if scheme, cred, ok := strings.Cut(strings.TrimSpace(v), " "); ok {
			add(cred)
			if strings.EqualFold(scheme, "Basic") {
				if b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred)); err == nil {
					_, pw, _ := strings.Cut(string(b), ":")
					add(string(b), pw)
				}
			}
		}
	}
	for k, v := range sc.Env {
		if (secretName.MatchString(k) || looksRandom(v)) && !strings.HasPrefix(v, "/") {
			add(v)
		}
		addURL(v)
	}
	addURL(sc.URL)
	for i, a := range sc.Args {
		if name, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(name, "-") && secretName.MatchString(name) {
			add(v)
		}
		if i > 0 && secretFlag(sc.Args[i-1]) {
			add(a)
		}
		addURL(a)
	}
	l := secret.New(redacted, secrets...)
	if l == nil {
		return nil
	}
	return &scrubber{l: l}
}

// looksRandom reports whether a value looks like a token rather than a
// word, a date or a version: 16 characters or more, letters and digits.
func looksRandom(v string) bool {
	return len(v) >= 16 && strings.ContainsAny(v, "0123456789") &&
		strings.ContainsFunc(v, func(r rune) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' })
}

// secretFlag reports whether a is a flag whose value follows it and is a
// secret (--token X).
func secretFlag(a string) bool {
	return strings.HasPrefix(a, "-") && !strings.Contains(a, "=") && secretName.MatchString(a)
}

// text scrubs s.
func (s *scrubber) text(t string) string {
	if s == nil {
		return t
	}
	return s.l.Text(t)
}

// err returns err with its text scrubbed; it still unwraps to err, so
// errors.Is and errors.As see what they saw.
func (s *scrubber) err(err error) error {
	if s == nil || err == nil {
		return err
	}
	return s.l.Error(err)
}

// value returns v with every string in it (keys included) scrubbed: plain
// JSON data is walked; anything else is turned into plain JSON data first.
func (s *scrubber) value(v any) any {
	if s == nil || v == nil {
		return v
	}
	switch x := v.(type) {
	case string:
		return s.l.Text(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, vv := range x {
			out[s.l.Text(k)] = s.value(vv)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, vv := range x {
			out[i] = s.value(vv)
		}
		return out
	case map[string]string:
		out := make(map[string]string, len(x))
		for k, vv := range x {
			out[s.l.Text(k)] = s.l.Text(vv)
		}
		return out
	case bool, float64, int, int64, json.Number:
		return v
	}
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var data any
	if err := json.Unmarshal(b, &data); err != nil {
		return v
	}
	return s.value(data)
}

// output scrubs a step's error and result.
func (s *scrubber) output(out *engine.Output) *engine.Output {
	if s == nil || out == nil {
		return out
	}
	out.Err = s.err(out.Err)
	if out.Result != nil {
		out.Result, _ = s.value(out.Result).(map[string]any)
	}
	return out
}

// redactArgs is a stdio server's args as logs and errors show them: the
// values of secret flags (--token X, --api-key=X) and the credentials and
// query values of URLs are replaced.
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		switch name, _, ok := strings.Cut(a, "="); {
		case ok && strings.HasPrefix(name, "-") && secretName.MatchString(name):
			out[i] = name + "=" + redacted
		case i > 0 && secretFlag(args[i-1]):
			out[i] = redacted
		case strings.Contains(a, "://"):
			if u, err := url.Parse(a); err == nil && u.Host != "" && (u.User != nil || u.RawQuery != "") {
				out[i] = llm.RedactURL(a)
			} else {
				out[i] = a
			}
		default:
			out[i] = a
		}
	}
	return out
}
