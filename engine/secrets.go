package engine

import (
	"reflect"

	"github.com/mas-mcp/mas-mcp/internal/secret"
)

// Secrets never enter the state (beyond the spec): the MAS's own secrets
// (Config.Secrets: the LLM API key, the store's credentials, operators'
// tokens and passwords) are replaced with Redacted in every text taken in,
// wherever it comes from — an operator's call (a message, a task's name
// and intention, an instruction, an interrupt, an approval's note and
// arguments), an executor's output (a model's plan, message or summary, a
// tool's result, an error) — before it reaches a task, an agent, a
// message, the store, a log line or a prompt. What holds a secret is
// scrubbed as a whole: the public methods scrub their arguments, runStep
// scrubs what an executor returns, and clip (every text bounded as it is
// taken in) scrubs what it bounds.

// Redacted replaces a secret in the texts the engine takes in (the word
// the trail uses too).
const Redacted = secret.Redacted

// Which secrets are scrubbed, and how, is internal/secret's rule: those of
// at least secret.MinLen bytes, wherever they appear; shorter ones (a
// four-letter password) are not, anywhere: they would redact common words
// and IDs from everything the MAS says.

// Scrub returns text with the configured secrets (Config.Secrets) replaced
// by Redacted, for layers that answer with what they were given (the MCP
// server's errors).
func (s *System) Scrub(text string) string { return s.secrets.Text(text) }

// scrubbed returns v with the configured secrets replaced in every string
// it holds, through exported struct fields, pointers, slices, maps and
// interfaces (map keys are left as they are; v must hold no cycle): every
// field of what crosses into the engine is covered, those added later too. What holds a secret is copied, never changed in
// place (callers and executors keep what they passed); v itself is
// returned when it holds none. An error's text is scrubbed by ScrubError,
// not here.
func scrubbed[T any](l *secret.List, v T) T {
	if l.Len() == 0 {
		return v
	}
	if out, changed := scrubValue(l, reflect.ValueOf(&v).Elem()); changed {
		return out.Interface().(T)
	}
	return v
}

// scrubValue is scrubbed on a reflected value: it returns a scrubbed copy
// and true, or v and false when v holds no secret.
func scrubValue(l *secret.List, v reflect.Value) (reflect.Value, bool) {
	switch v.Kind() {
	case reflect.String:
		s := l.Text(v.String())
		if s == v.String() {
			return v, false
		}
		out := reflect.New(v.Type()).Elem()
		out.SetString(s)
		return out, true
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return v, false
		}
		e, changed := scrubValue(l, v.Elem())
		if !changed {
			return v, false
		}
		out := reflect.New(v.Type()).Elem()
		if v.Kind() == reflect.Interface {
			out.Set(e)
			return out, true
		}
		p := reflect.New(v.Type().Elem())
		p.Elem().Set(e)
		out.Set(p)
		return out, true
	case reflect.Struct:
		var out reflect.Value
		for i := range v.NumField() {
			if !v.Type().Field(i).IsExported() {
				continue
			}
			f, changed := scrubValue(l, v.Field(i))
			if !changed {
				continue
			}
			if !out.IsValid() {
				out = reflect.New(v.Type()).Elem()
				out.Set(v)
			}
			out.Field(i).Set(f)
		}
		return made(out, v)
	case reflect.Slice, reflect.Array:
		var out reflect.Value
		for i := range v.Len() {
			e, changed := scrubValue(l, v.Index(i))
			if !changed {
				continue
			}
			if !out.IsValid() {
				if v.Kind() == reflect.Slice {
					out = reflect.MakeSlice(v.Type(), v.Len(), v.Len())
					reflect.Copy(out, v)
				} else {
					out = reflect.New(v.Type()).Elem()
					out.Set(v)
				}
			}
			out.Index(i).Set(e)
		}
		return made(out, v)
	case reflect.Map:
		var out reflect.Value
		for it := v.MapRange(); it.Next(); {
			e, changed := scrubValue(l, it.Value())
			if !changed {
				continue
			}
			if !out.IsValid() {
				out = reflect.MakeMapWithSize(v.Type(), v.Len())
				for c := v.MapRange(); c.Next(); {
					out.SetMapIndex(c.Key(), c.Value())
				}
			}
			out.SetMapIndex(it.Key(), e)
		}
		return made(out, v)
	}
	return v, false
}

// made returns (out, true) when out was made (v held a secret), else (v, false).
func made(out, v reflect.Value) (reflect.Value, bool) {
	if out.IsValid() {
		return out, true
	}
	return v, false
}

// ScrubError returns err, or when its text holds a configured secret an
// error with the text scrubbed that still wraps err (errors.Is and
// errors.As see what they saw), for layers that answer with errors quoting
// what they were given (the MCP server's).
func (s *System) ScrubError(err error) error { return s.secrets.Error(err) }

// scrubOutput returns an executor's output with the configured secrets
// replaced everywhere in it, its error's text included.
func (s *System) scrubOutput(out *Output) *Output {
	if s.secrets.Len() == 0 {
		return out
	}
	c := scrubbed(s.secrets, *out)
	c.Err = s.ScrubError(out.Err)
	return &c
}
