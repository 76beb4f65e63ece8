package skills

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"
)

// Sentinel errors of ExtractJSON and ExtractText. The errors returned wrap
// them with the tag name ("missing <planned_step> block"), so a caller tests
// with errors.Is and shows the model err.Error().
var (
	// ErrNoBlock: no complete <tag>…</tag> block outside reasoning. Optional
	// blocks (react_action, get_more_info, persistent_memory) test for it.
	ErrNoBlock = errors.New("missing block")
	// ErrEmptyBlock: the block is present but holds nothing (only whitespace,
	// or for JSON only comments or an empty code fence). An empty
	// <tool_decision> block is an answer ("stop calling the tool"), not a fault.
	ErrEmptyBlock = errors.New("empty block")
)

// errNoValue marks JSON text that is blank after normalization.
var errNoValue = errors.New("no JSON value")

// blockError is a missing or empty block, worded for the model.
type blockError struct {
	kind error // ErrNoBlock or ErrEmptyBlock
	tag  string
	hint string // optional: why the block was not found
}

func (e *blockError) Error() string {
	msg := strings.TrimSuffix(e.kind.Error(), " block") + " <" + e.tag + "> block"
	if e.hint != "" {
		msg += ": " + e.hint
	}
	return msg
}

func (e *blockError) Unwrap() error { return e.kind }

// ExtractJSON decodes the skill block <tag> of an LLM answer s into v:
// StripReasoning, then Block (the last complete block wins), then DecodeJSON.
//
// Errors are one line, precise and meant to be sent back to the model
// verbatim: "missing <planned_step> block" (wraps ErrNoBlock), "empty
// <tool_decision> block" (wraps ErrEmptyBlock), or "<planned_step> block:
// invalid JSON at line 3, column 14: …" with positions inside the block.
// On a decoding error v may be partly filled.
func ExtractJSON(s, tag string, v any) error {
	body, err := extractBlock(s, tag)
	if err != nil {
		return err
	}
	if err := DecodeJSON(body, v); err != nil {
		if errors.Is(err, errNoValue) {
			return &blockError{kind: ErrEmptyBlock, tag: tag, hint: "it holds no JSON value"}
		}
		return fmt.Errorf("<%s> block: %w", tag, err)
	}
	return nil
}

// ExtractText returns the trimmed content of the skill block <tag> of an LLM
// answer s (summary, _think, quick_think, process_message): StripReasoning,
// then Block. Errors are as for ExtractJSON; blank content is an error
// wrapping ErrEmptyBlock ("empty <summary> block").
func ExtractText(s, tag string) (string, error) {
	return extractBlock(s, tag)
}

func extractBlock(s, tag string) (string, error) {
	stripped := StripReasoning(s)
	body, ok := Block(stripped, tag)
	if !ok {
		return "", &blockError{kind: ErrNoBlock, tag: tag, hint: missingHint(s, stripped, tag)}
	}
	if body == "" {
		return "", &blockError{kind: ErrEmptyBlock, tag: tag}
	}
	return body, nil
}

// missingHint says why a block the model may believe it wrote was not found.
func missingHint(raw, stripped, tag string) string {
	open, end := "<"+tag+">", "</"+tag+">"
	switch {
	case tag == "":
		return "no tag name given"
	case strings.Contains(stripped, open) && !strings.Contains(stripped, end):
		return open + " is never closed with " + end
	case strings.Contains(stripped, end) && !strings.Contains(stripped, open):
		return "found " + end + " without an opening " + open
	case strings.Contains(stripped, open):
		return end + " comes before " + open + "; write " + open + "…" + end
	case strings.Contains(raw, open):
		return "the only " + open + " is inside <think>…</think> reasoning, which is ignored; write the block after the reasoning"
	}
	return ""
}

// Block returns the trimmed content of the last complete <tag>…</tag> block
// of s, and whether there is one. Tags match exactly and case-sensitively:
// no attributes, no spaces inside the brackets. "Last complete" means the
// last closing tag </tag> of s together with the nearest opening <tag>
// before it; an opening tag without a closing one after it is ignored. With
// nested or repeated tags the content may therefore contain a stray </tag>
// (in "<t>a</t> b</t>" the block is "a</t> b"), which the JSON decoder then
// reports. The result is always a substring of s; an empty tag finds nothing.
func Block(s, tag string) (string, bool) {
	if tag == "" {
		return "", false
	}
	open, end := "<"+tag+">", "</"+tag+">"
	c := strings.LastIndex(s, end)
	if c < 0 {
		return "", false
	}
	o := strings.LastIndex(s[:c], open)
	if o < 0 {
		return "", false
	}
	return strings.TrimSpace(s[o+len(open) : c]), true
}

// StripReasoning removes reasoning sections from an LLM answer so that
// blocks written while "thinking" are never taken as the answer.
//
// The reasoning tags are <think>, </think>, <thinking> and </thinking>,
// matched ASCII case-insensitively and exactly otherwise (so the think
// skill's <_think> and <quick_think> blocks are untouched). From left to
// right:
//   - an opening tag and everything up to the first closing tag of the same
//     name is removed; several such sections may appear anywhere;
//   - an opening tag that is never closed removes everything from it to the
//     end of s (the model ran out of tokens while reasoning): an answer that
//     starts with an unclosed <think> becomes "";
//   - when the first reasoning tag of s is a closing tag, everything before
//     it is reasoning and is removed (models whose chat template already
//     wrote the opening <think> answer "…reasoning…</think>answer");
//   - any other stray closing tag is removed by itself.
//
// A removed section between two pieces of kept text is replaced by one space
// so no new tag can form across the cut; the rest of s is kept byte for
// byte, whitespace included. The result holds no reasoning tag, so
// StripReasoning is idempotent; s without reasoning tags is returned as is.
func StripReasoning(s string) string {
	var b strings.Builder
	kept := 0     // s[kept:] is not yet copied to b
	seen := false // a reasoning tag occurred before
	for i := 0; ; {
		k := strings.IndexByte(s[i:], '<')
		if k < 0 {
			break
		}
		i += k
		name, closing, n := reasoningTagAt(s, i)
		if n == 0 {
			i++
			continue
		}
		from, to := i, i+n
		switch {
		case closing && !seen:
			from = 0
		case !closing:
			to = len(s)
			if j := closingTag(s, i+n, name); j >= 0 {
				to = j + len("</>") + len(name)
			}
		}
		seen = true
		b.WriteString(s[kept:from])
		if b.Len() > 0 && to < len(s) && !strings.HasSuffix(b.String(), " ") {
			b.WriteByte(' ')
		}
		kept, i = to, to
	}
	if !seen {
		return s
	}
	b.WriteString(s[kept:])
	return b.String()
}

// reasoningTagAt reports the reasoning tag that starts at s[i], if any: its
// lower-case name, whether it is a closing tag and its length (0: none).
func reasoningTagAt(s string, i int) (name string, closing bool, n int) {
	j := i + 1
	if j < len(s) && s[j] == '/' {
		closing = true
		j++
	}
	for _, name := range [...]string{"thinking", "think"} {
		if hasPrefixFold(s[min(j, len(s)):], name+">") {
			return name, closing, j + len(name) + 1 - i
		}
	}
	return "", false, 0
}

// closingTag returns the index of the first closing reasoning tag called
// name at or after from, or -1.
func closingTag(s string, from int, name string) int {
	for i := from; ; {
		k := strings.IndexByte(s[i:], '<')
		if k < 0 {
			return -1
		}
		i += k
		if got, closing, _ := reasoningTagAt(s, i); closing && got == name {
			return i
		}
		i++
	}
}

// hasPrefixFold is strings.HasPrefix ignoring case, for an ASCII prefix.
// Comparing equal byte lengths keeps Unicode folding out (the 3-byte Kelvin
// sign folds to k but cannot match a 1-byte k).
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// NormalizeJSON turns the lenient JSON that models write into strict JSON
// and checks that the result is one valid JSON value. It tolerates, and
// guesses nothing beyond:
//   - a markdown code fence (```json … ``` or ``` … ```), also with text
//     around it: the first fenced section is taken. A fence line is one
//     that starts (after spaces) with three backticks; a lone fence is
//     dropped when only blanks are on one side of it;
//   - comments outside strings: "# …" and "// …" to the end of the line and
//     "/* … */" (replaced by a space);
//   - one trailing comma after a value before "]" or "}";
//   - the Python literals True, False and None as whole words outside
//     strings (→ true, false, null);
//   - smart quotes “ ” used as string delimiters, around keys and, by the
//     same rule, around values: a string opened by either ends at the next
//     one, and a plain " inside it is escaped.
//
// Everything inside ordinary "…" strings is copied byte for byte, so
// strings may hold #, //, True, commas, escapes and any Unicode. Single
// quotes, unquoted keys, NaN and the like stay errors. Valid JSON is
// returned unchanged, so NormalizeJSON is idempotent.
//
// Errors are single lines like DecodeJSON's, with positions in src.
func NormalizeJSON(src string) (string, error) {
	n, err := normalize(src)
	if err != nil {
		return "", err
	}
	var raw json.RawMessage // Unmarshal validates the whole text first
	if err := json.Unmarshal(n.out, &raw); err != nil {
		return "", n.explain(err)
	}
	return string(n.out), nil
}

// DecodeJSON normalizes src like NormalizeJSON and decodes it into v with
// encoding/json's defaults (numbers into any become float64, unknown fields
// are ignored). An error is one line naming the problem and where it is in
// src, e.g. `invalid JSON at line 2, column 9: invalid character '}'
// looking for beginning of value (near "\"type\": }")` or `wrong type at
// line 1, column 30: field "need_reply" must be a boolean, got string`.
// On error v may be partly filled.
func DecodeJSON(src string, v any) error {
	n, err := normalize(src)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(n.out, v); err != nil {
		return n.explain(err)
	}
	return nil
}

// jsonError is a decoding error worded for the model; it wraps the
// encoding/json error (or errNoValue) for errors.As.
type jsonError struct {
	msg string
	err error
}

func (e *jsonError) Error() string { return e.msg }
func (e *jsonError) Unwrap() error { return e.err }

// normalizer holds strict JSON built from lenient src, and where each output
// byte came from so that errors point into the model's own text.
type normalizer struct {
	src   string
	out   []byte
	spans []srcSpan // sorted by out; see srcPos
	// out indexes of the last two significant (non-space) bytes, -1 if none;
	// they decide whether a comma before "]" or "}" is a trailing one.
	last, prev int
}

// srcSpan says: out[out] came from src[src], and so on byte for byte until the
// next span.
type srcSpan struct{ out, src int }

func normalize(src string) (*normalizer, error) {
	n := &normalizer{src: src, last: -1, prev: -1}
	i, end := fenced(src)
	s := src[:end]
	for i < len(s) {
		c := s[i]
		switch {
		case isSpace(c):
			j := i + 1
			for j < len(s) && isSpace(s[j]) {
				j++
			}
			n.emit(i, s[i:j])
			i = j
		case c == '"':
			j := i + 1
			for j < len(s) && s[j] != '"' {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			j = min(j+1, len(s))
			n.token(i, s[i:j])
			i = j
		case c == '#' || strings.HasPrefix(s[i:], "//"):
			if k := strings.IndexByte(s[i:], '\n'); k >= 0 {
				i += k
			} else {
				i = len(s)
			}
		case strings.HasPrefix(s[i:], "/*"):
			k := strings.Index(s[i+2:], "*/")
			if k < 0 {
				return nil, &jsonError{msg: fmt.Sprintf("invalid JSON at %s: unterminated /* comment%s", n.where(i), n.near(i+2))}
			}
			n.emit(i, " ")
			i += 2 + k + 2
		case isWordByte(c):
			j := i + 1
			for j < len(s) && isWordByte(s[j]) {
				j++
			}
			w := s[i:j]
			switch w {
			case "True":
				w = "true"
			case "False":
				w = "false"
			case "None":
				w = "null"
			}
			n.token(i, w)
			i = j
		case isSmartQuote(s[i:]):
			i = n.smartString(s, i)
		case c == ']' || c == '}':
			n.dropTrailingComma()
			n.token(i, s[i:i+1])
			i++
		default:
			n.token(i, s[i:i+1])
			i++
		}
	}
	if n.last < 0 {
		return nil, &jsonError{msg: "invalid JSON: no value (the text is empty or only comments)", err: errNoValue}
	}
	return n, nil
}

// smartString copies the string opened by the smart quote at s[i] as a
// plain JSON string and returns the index after its closing quote.
func (n *normalizer) smartString(s string, i int) int {
	n.emit(i, `"`)
	i += len("“")
	for i < len(s) {
		j := i
		for j < len(s) && s[j] != '"' && s[j] != '\\' && s[j] != "“"[0] {
			j++
		}
		n.emit(i, s[i:j])
		i = j
		switch {
		case i == len(s):
		case isSmartQuote(s[i:]):
			n.emit(i, `"`)
			n.markToken()
			return i + len("”")
		case s[i] == '"':
			n.emit(i, `\"`)
			i++
		case s[i] == '\\':
			j := min(i+2, len(s))
			n.emit(i, s[i:j])
			i = j
		default: // another three-byte character starting like “
			n.emit(i, s[i:i+1])
			i++
		}
	}
	n.markToken() // unterminated: encoding/json reports the end of input
	return i
}

func isSmartQuote(s string) bool {
	return strings.HasPrefix(s, "“") || strings.HasPrefix(s, "”")
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func isWordByte(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// emit appends text that stands for src[p:], starting a new span when p
// does not continue the current one.
func (n *normalizer) emit(p int, text string) {
	if k := len(n.spans) - 1; k < 0 || n.spans[k].src+len(n.out)-n.spans[k].out != p {
		n.spans = append(n.spans, srcSpan{out: len(n.out), src: p})
	}
	n.out = append(n.out, text...)
}

// token emits a significant token.
func (n *normalizer) token(p int, text string) {
	n.emit(p, text)
	n.markToken()
}

// markToken records that the last output byte ends a significant token.
func (n *normalizer) markToken() {
	n.prev, n.last = n.last, len(n.out)-1
}

// dropTrailingComma deletes the comma just before a "]" or "}" when it
// follows a value; "[,]" and "[1,,]" are left for the decoder to reject.
func (n *normalizer) dropTrailingComma() {
	c := n.last
	if c < 0 || n.out[c] != ',' || n.prev < 0 || strings.IndexByte("[{,:", n.out[n.prev]) >= 0 {
		return
	}
	// Only whitespace follows the comma in out. Remove the comma and shift
	// the spans behind it so every later byte keeps its source position.
	tail := c+1 < len(n.out)
	q := 0
	if tail {
		q = n.srcPos(c + 1)
	}
	n.out = append(n.out[:c], n.out[c+1:]...)
	k := sort.Search(len(n.spans), func(i int) bool { return n.spans[i].out >= c })
	rest := n.spans[k:]
	if len(rest) > 0 && rest[0].out == c {
		rest = rest[1:]
	}
	for i := range rest {
		rest[i].out--
	}
	n.spans = append(n.spans[:k], rest...)
	if tail && (k == len(n.spans) || n.spans[k].out != c) {
		n.spans = slices.Insert(n.spans, k, srcSpan{out: c, src: q})
	}
	n.last, n.prev = n.prev, -1
}

// srcPos maps an offset in out to the offset in src it came from.
func (n *normalizer) srcPos(o int) int {
	k := sort.Search(len(n.spans), func(i int) bool { return n.spans[i].out > o }) - 1
	if k < 0 {
		return 0
	}
	return max(0, min(n.spans[k].src+o-n.spans[k].out, len(n.src)))
}

// explain rewords an encoding/json error on out as a one-line message with
// its position in src.
func (n *normalizer) explain(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		msg := syn.Error()
		p := n.srcPos(int(syn.Offset) - 1)
		if int(syn.Offset) >= len(n.out) && strings.HasPrefix(msg, "unexpected end") {
			p = n.srcPos(len(n.out)-1) + 1
			msg = "unexpected end of input (an unclosed string, array or object?)"
		}
		return &jsonError{msg: fmt.Sprintf("invalid JSON at %s: %s%s", n.where(p), msg, n.near(p)), err: err}
	case errors.As(err, &typ):
		what := "the value"
		if typ.Field != "" {
			what = fmt.Sprintf("field %q", typ.Field)
		}
		p := n.srcPos(int(typ.Offset) - 1)
		return &jsonError{msg: fmt.Sprintf("wrong type at %s: %s must be %s, got %s%s",
			n.where(p), what, jsonKind(typ.Type), typ.Value, n.near(p)), err: err}
	}
	var inv *json.InvalidUnmarshalError
	if errors.As(err, &inv) {
		return fmt.Errorf("decode JSON: %w", err) // a caller's bug, not the model's
	}
	return &jsonError{msg: "invalid JSON value: " + strings.ReplaceAll(err.Error(), "\n", " "), err: err}
}

// where describes src offset p as "line L, column C" (1-based, columns in
// characters).
func (n *normalizer) where(p int) string {
	p = min(p, len(n.src))
	line := 1 + strings.Count(n.src[:p], "\n")
	start := strings.LastIndexByte(n.src[:p], '\n') + 1
	return fmt.Sprintf("line %d, column %d", line, 1+utf8.RuneCountInString(n.src[start:p]))
}

// near quotes a short excerpt of src around offset p, ending just after it,
// or returns "" when src is blank there.
func (n *normalizer) near(p int) string {
	from, to := max(0, p-30), min(len(n.src), p+10)
	for from < p && !utf8.RuneStart(n.src[from]) {
		from++
	}
	for to < len(n.src) && !utf8.RuneStart(n.src[to]) {
		to++
	}
	if strings.TrimSpace(n.src[from:to]) == "" {
		return ""
	}
	return fmt.Sprintf(" (near %q)", n.src[from:to])
}

// jsonKind names the JSON kind a Go type decodes from.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	switch k := t.Kind(); {
	case k == reflect.Bool:
		return "a boolean"
	case reflect.Int <= k && k <= reflect.Uintptr: // every integer kind
		return "an integer"
	case k == reflect.Float32 || k == reflect.Float64:
		return "a number"
	case k == reflect.String:
		return "a string"
	case k == reflect.Slice || k == reflect.Array:
		return "an array"
	case k == reflect.Map || k == reflect.Struct:
		return "an object"
	case k == reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return "a " + t.String()
}

// fenced returns the bounds of the content of the first markdown code fence
// of s, or of all of s when there is no fence.
func fenced(s string) (from, to int) {
	open := fenceLine(s, 0)
	if open < 0 {
		return 0, len(s)
	}
	start := open + 3
	for start < len(s) && s[start] == '`' {
		start++
	}
	eol := strings.IndexByte(s[start:], '\n')
	if eol < 0 {
		eol = len(s) - start
	}
	if isInfoString(strings.TrimSpace(s[start : start+eol])) {
		start += eol
	}
	if end := closingFence(s, start); end >= 0 {
		return start, end
	}
	// A lone fence: drop it when only blanks are on one side of it.
	switch {
	case strings.TrimSpace(s[:open]) == "":
		return start, len(s)
	case strings.TrimSpace(s[start:]) == "":
		return 0, open
	}
	return 0, len(s)
}

// fenceLine returns the index of the first ``` that starts a line (after
// spaces or tabs) at or after from, or -1.
func fenceLine(s string, from int) int {
	for i := from; i < len(s); {
		j := i
		for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
			j++
		}
		if strings.HasPrefix(s[j:], "```") {
			return j
		}
		k := strings.IndexByte(s[j:], '\n')
		if k < 0 {
			return -1
		}
		i = j + k + 1
	}
	return -1
}

// closingFence returns the index of the ``` that closes a fence whose
// content starts at from: one that starts a line or ends one, or -1.
func closingFence(s string, from int) int {
	for i := from; ; {
		k := strings.Index(s[i:], "```")
		if k < 0 {
			return -1
		}
		i += k
		b := i // back to the line start over blanks?
		for b > from && (s[b-1] == ' ' || s[b-1] == '\t') {
			b--
		}
		e := i + 3 // on to the line end over backticks and blanks?
		for e < len(s) && s[e] == '`' {
			e++
		}
		for e < len(s) && (s[e] == ' ' || s[e] == '\t' || s[e] == '\r') {
			e++
		}
		if b == 0 || s[b-1] == '\n' || e == len(s) || s[e] == '\n' {
			return i
		}
		// Past the whole run of backticks: none of its later positions
		// can close the fence either (each is as far from a line start),
		// and stepping one at a time walked a long run again at each
		// (a model repeating backticks made the scan quadratic).
		for i += 3; i < len(s) && s[i] == '`'; i++ {
		}
	}
}

// isInfoString reports whether the rest of an opening fence line is a
// language name such as json, jsonc or json5.
func isInfoString(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isWordByte(s[i]) && s[i] != '-' && s[i] != '+' && s[i] != '.' {
			return false
		}
	}
	return true
}
