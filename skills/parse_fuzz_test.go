package skills

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Run one with: go test -run='^$' -fuzz=FuzzBlock -fuzztime=20s ./skills/
// Crashers go to testdata/fuzz/<FuzzName>/ and then run as plain tests.

func FuzzBlock(f *testing.F) {
	for _, seed := range []struct{ s, tag string }{
		{"<a>x</a>", "a"},
		{"<a><a>x</a>y</a>", "a"},
		{"<a>x</a> </a> <a>", "a"},
		{"</a><a>", "a"},
		{"<think><a>1</a></think><a>2</a>", "a"},
		{"<<a>>x<</a>>", "<a>"},
		{"<planned_step>\r\n[]\r\n</planned_step>", "planned_step"},
		{"<>x</>", ""},
	} {
		f.Add(seed.s, seed.tag)
	}
	f.Fuzz(func(t *testing.T, s, tag string) {
		got, ok := Block(s, tag)
		if !ok {
			if got != "" {
				t.Fatalf("Block(%q, %q) = %q, false; want \"\" when not found", s, tag, got)
			}
		} else {
			if !strings.Contains(s, got) {
				t.Fatalf("Block(%q, %q) = %q, not a substring", s, tag, got)
			}
			if !strings.Contains(s, "<"+tag+">") || !strings.Contains(s, "</"+tag+">") {
				t.Fatalf("Block(%q, %q) found a block without both tags", s, tag)
			}
			if strings.TrimSpace(got) != got {
				t.Fatalf("Block(%q, %q) = %q, not trimmed", s, tag, got)
			}
		}
		// A block holding no tag of its own name comes back unchanged when
		// wrapped again, even with other text and an unclosed tag around it.
		if tag != "" && !strings.ContainsAny(tag, "<>") &&
			!strings.Contains(got, "<"+tag+">") && !strings.Contains(got, "</"+tag+">") {
			wrapped := "x</" + tag + "> <" + tag + ">" + got + "</" + tag + "> <" + tag + ">"
			if again, ok := Block(wrapped, tag); !ok || again != got {
				t.Fatalf("Block(%q, %q) = %q, %v; want %q", wrapped, tag, again, ok, got)
			}
		}
		// The extractors never panic and answer in one line (tags are the
		// skills' constants, so a line break in one may show).
		for _, err := range []error{ExtractJSON(s, tag, new(any)), extractTextErr(s, tag)} {
			if err != nil && strings.Contains(err.Error(), "\n") && !strings.Contains(tag, "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
		}
	})
}

func extractTextErr(s, tag string) error {
	_, err := ExtractText(s, tag)
	return err
}

func FuzzStripReasoning(f *testing.F) {
	for _, seed := range []string{
		"",
		"<think>x</think>answer",
		"<THINKING>\r\nx\r\n</thinking>\n<summary>s</summary>",
		"reasoning</think>answer</think>more",
		"<think>unclosed",
		"<thi<think>x</think>nk>y</think>",
		"<_think>a</_think><quick_think>b</quick_think>",
		"a<think>b<thinking>c</think>d</thinking>e",
		"<thin\u212a>x</thin\u212a>",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := StripReasoning(s)
		if len(got) > len(s) {
			t.Fatalf("StripReasoning(%q) = %q, longer than the input", s, got)
		}
		if tag := reasoningTagIn(got); tag != "" {
			t.Fatalf("StripReasoning(%q) = %q, still holds %s", s, got, tag)
		}
		if again := StripReasoning(got); again != got {
			t.Fatalf("not idempotent: %q → %q → %q", s, got, again)
		}
		if reasoningTagIn(s) == "" && got != s {
			t.Fatalf("StripReasoning(%q) = %q, changed text without reasoning tags", s, got)
		}
	})
}

// reasoningTagIn returns a reasoning tag found in s by a plain search,
// independent of the scanner under test, or "".
func reasoningTagIn(s string) string {
	lower := strings.Map(func(r rune) rune {
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, s)
	for _, tag := range []string{"<think>", "</think>", "<thinking>", "</thinking>"} {
		if strings.Contains(lower, tag) {
			return tag
		}
	}
	return ""
}

func FuzzNormalizeJSON(f *testing.F) {
	for _, seed := range []string{
		`{"a": [1, 2.5e-3, true, null], "b": "x\"y\\"}`,
		"```json\n{\"a\": 1, # c\n \"b\": [True, None,],}\n```",
		"Here:\n```\n[1, /* two */ 2]\n```\nbye",
		`{“a”: “say "hi"”}`,
		`{"url": "http://x/#f", "s": "/* no */ True, // no"}`,
		"[1,,]", "[,]", `{"a":,}`, "[1/**/2]", "/* open", "“", "```", "```null```",
		"[1, # x\r\n2,\r\n]",
		`"\u00e9 日本 😀"`,
		"\xff\xfe",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		norm, err := NormalizeJSON(s)
		if err != nil {
			if norm != "" {
				t.Fatalf("NormalizeJSON(%q) = %q with error %v", s, norm, err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
		} else {
			if !json.Valid([]byte(norm)) {
				t.Fatalf("NormalizeJSON(%q) = %q, not valid JSON", s, norm)
			}
			if again, err := NormalizeJSON(norm); err != nil || again != norm {
				t.Fatalf("not idempotent: %q → %q → %q, %v", s, norm, again, err)
			}
		}
		checkSpans(t, s)
		var got any
		decErr := DecodeJSON(s, &got)
		if (decErr == nil) != (err == nil) {
			t.Fatalf("NormalizeJSON error %v but DecodeJSON error %v", err, decErr)
		}
		if decErr != nil && strings.Contains(decErr.Error(), "\n") {
			t.Fatalf("error is not one line: %q", decErr)
		}
		if json.Valid([]byte(s)) {
			if err != nil || norm != s {
				t.Fatalf("valid JSON %q normalized to %q, %v", s, norm, err)
			}
			var want any
			if err := json.Unmarshal([]byte(s), &want); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("DecodeJSON(%q) mismatch (-encoding/json +got):\n%s", s, diff)
			}
		}
	})
}

// checkSpans checks that every byte the normalizer copied maps back to the
// same byte of src, so error positions point at what the model wrote.
func checkSpans(t *testing.T, src string) {
	n, err := normalize(src)
	if err != nil {
		return
	}
	for o, b := range n.out {
		p := n.srcPos(o)
		switch {
		case p < len(src) && src[p] == b:
		case b == '"' || b == '\\' || b == ' ': // written for a smart quote, an escape or a comment
		case isWordByte(b) && p < len(src) && isWordByte(src[p]): // True, False, None
		default:
			t.Fatalf("normalize(%q): out[%d] = %q maps to src[%d] (%q)", src, o, b, p, src[min(p, len(src)):])
		}
	}
}
