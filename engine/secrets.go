package engine

import (
	"reflect"
	"slices"
	"strings"
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
const Redacted = "[redacted]"

// minSecretLen is the shortest secret the engine scrubs: a shorter one
// (a four-letter password) would redact common words and IDs from
// everything the MAS says.
const minSecretLen = 8

// secretList is the configured secrets the engine scrubs, longest first
// (a secret that contains another is replaced whole).
type secretList []string

// newSecretList keeps the secrets of at least minSecretLen bytes, once each.
func newSecretList(secrets []string) secretList {
	var out secretList
	for _, s := range secrets {
		if len(s) >= minSecretLen && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	slices.SortStableFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// text returns s with every secret replaced by Redacted (s itself, not a
// copy, when it holds none).
func (l secretList) text(s string) string {
	for _, sec := range l {
		if strings.Contains(s, sec) {
			s = strings.ReplaceAll(s, sec, Redacted)
		}
	}
	return s
}

// scrub returns text with the configured secrets replaced by Redacted.
func (s *System) scrub(text string) string { return s.secrets.text(text) }

// Scrub returns text with the configured secrets (Config.Secrets) replaced
// by Redacted, for layers that answer with what they were given (the MCP
// server's errors).
func (s *System) Scrub(text string) string { return s.secrets.text(text) }

// scrubbed returns v with the configured secrets replaced in every string
// it holds, through exported struct fields, pointers, slices, maps and
// interfaces (map keys are left as they are; v must hold no cycle): every
// field of what crosses into the engine is covered, those added later too. What holds a secret is copied, never changed in
// place (callers and executors keep what they passed); v itself is
// returned when it holds none. An error's text is scrubbed by scrubError,
// not here.
func scrubbed[T any](l secretList, v T) T {
	if len(l) == 0 {
		return v
	}
	if out, changed := l.value(reflect.ValueOf(&v).Elem()); changed {
		return out.Interface().(T)
	}
	return v
}

// value is scrubbed on a reflected value: it returns a scrubbed copy and
// true, or v and false when v holds no secret.
func (l secretList) value(v reflect.Value) (reflect.Value, bool) {
	switch v.Kind() {
	case reflect.String:
		s := l.text(v.String())
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
		e, changed := l.value(v.Elem())
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
			f, changed := l.value(v.Field(i))
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
			e, changed := l.value(v.Index(i))
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
			e, changed := l.value(it.Value())
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

// scrubError returns err, or when its text holds a secret an error with
// the text scrubbed that still wraps err (errors.Is keeps working).
func (s *System) scrubError(err error) error {
	if err == nil {
		return nil
	}
	return ScrubbedError(err, s.scrub)
}

// ScrubbedError returns err, or when scrub changes its text an error with
// the scrubbed text that still wraps err (errors.Is and errors.As see what
// they saw).
func ScrubbedError(err error, scrub func(string) string) error {
	msg := err.Error()
	if clean := scrub(msg); clean != msg {
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

// scrubOutput returns an executor's output with the configured secrets
// replaced everywhere in it, its error's text included.
func (s *System) scrubOutput(out *Output) *Output {
	if len(s.secrets) == 0 {
		return out
	}
	c := scrubbed(s.secrets, *out)
	c.Err = s.scrubError(out.Err)
	return &c
}
