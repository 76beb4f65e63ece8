package skills

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestStripReasoning(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"no reasoning", "<summary> done </summary>", "<summary> done </summary>"},
		{"empty", "", ""},
		{"preamble", "<think>\nplan it\n</think>\n\n<planned_step>[]</planned_step>", "\n\n<planned_step>[]</planned_step>"},
		{"thinking tag", "<thinking>x</thinking>answer", "answer"},
		{"case-insensitive", "<THINK>x</Think>answer<Thinking>y</THINKING>", "answer"},
		{"several sections", "a<think>x</think>b<thinking>y</thinking>c", "a b c"},
		{"multiline", "<think>\nline 1\nline 2\n</think>rest", "rest"},
		{"crlf", "<think>\r\nx\r\n</think>\r\nanswer\r\n", "\r\nanswer\r\n"},
		{"unclosed at start is all reasoning", "<think>I will answer <summary>s</summary>", ""},
		{"unclosed after the answer", "<summary>s</summary>\n<think>more", "<summary>s</summary>\n"},
		{"leading close: opening tag was in the prompt", "reasoning <summary>fake</summary></think>\nanswer", "\nanswer"},
		{"stray close after a section", "<think>a</think>b</think>c", "b c"},
		{"closes only by its own name", "<think>a</thinking>b</think>c", "c"},
		{"other name inside", "<thinking>a<think>b</think>c</thinking>d", "d"},
		{"first close ends the section", "<think>a<think>b</think>c</think>d", "c d"},
		{"skill blocks untouched", "<_think>x</_think><quick_think>y</quick_think>", "<_think>x</_think><quick_think>y</quick_think>"},
		{"similar tags untouched", "<thinker>a</thinker><think >b</think >< think>c", "<thinker>a</thinker><think >b</think >< think>c"},
		{"kelvin sign is not k", "<thin\u212a>x</thin\u212a>", "<thin\u212a>x</thin\u212a>"},
		{"cut joins with a space", "foo<think>x</think>bar", "foo bar"},
		{"no double space", "foo <think>x</think>bar", "foo bar"},
		{"no tag forms across a cut", "<thi<think>x</think>nk>y</think>", "<thi nk>y"},
		{"unicode kept", "<think>é</think>日本語 “x”", "日本語 “x”"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := StripReasoning(tt.in)
			if got != tt.want {
				t.Errorf("StripReasoning(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if again := StripReasoning(got); again != got {
				t.Errorf("not idempotent: %q then %q", got, again)
			}
		})
	}
}

func TestBlock(t *testing.T) {
	tests := []struct {
		name, in, tag string
		want          string
		wantOK        bool
	}{
		{"simple", "<summary>done</summary>", "summary", "done", true},
		{"trimmed", "text <summary>\n  done \r\n</summary> text", "summary", "done", true},
		{"empty block", "<summary> \n </summary>", "summary", "", true},
		{"last complete wins", "<a>1</a> and <a>2</a>", "a", "2", true},
		{"unclosed later opening ignored", "<a>1</a> then <a>2", "a", "1", true},
		{"unclosed earlier opening ignored", "<a> draft… <a>2</a>", "a", "2", true},
		{"nested: nearest opening before last closing", "<a><a>x</a>y</a>", "a", "x</a>y", true},
		{"stray closing after a block", "<a>x</a> y </a>", "a", "x</a> y", true},
		{"closing only", "x</a>", "a", "", false},
		{"closing before opening", "</a> x <a>", "a", "", false},
		{"opening only", "<a> x", "a", "", false},
		{"none", "plain text", "a", "", false},
		{"case-sensitive", "<A>x</A>", "a", "", false},
		{"no attributes", `<a id="1">x</a>`, "a", "", false},
		{"no spaces in brackets", "< a >x</ a >", "a", "", false},
		{"longer tag names are other tags", "<planned_step_x>1</planned_step_x><planned_step>2</planned_step><x_planned_step>3</x_planned_step>", "planned_step", "2", true},
		{"underscore tag", "<think>r</think><_think>mine</_think>", "_think", "mine", true},
		{"crlf", "<a>\r\n[1]\r\n</a>\r\n", "a", "[1]", true},
		{"empty tag", "<>x</>", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Block(tt.in, tt.tag)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("Block(%q, %q) = %q, %v; want %q, %v", tt.in, tt.tag, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestNormalizeJSON(t *testing.T) {
	tests := []struct {
		name, in string
		want     string // strict JSON, when wantErr is ""
		wantErr  string // a substring of the error
	}{
		{"valid JSON unchanged", " {\"a\": [1, 2.5e-3, true, null],\n\t\"b\": \"x\"}\r\n", " {\"a\": [1, 2.5e-3, true, null],\n\t\"b\": \"x\"}\r\n", ""},
		{"scalar", `"x"`, `"x"`, ""},

		// Code fences.
		{"fence json", "```json\n{\"a\": 1}\n```", "\n{\"a\": 1}\n", ""},
		{"fence without language", "```\n[1]\n```", "\n[1]\n", ""},
		{"fence with upper-case language", "```JSON\n[1]\n```", "\n[1]\n", ""},
		{"fence with text around", "Here it is:\n```json\n[1]\n```\nHope this helps, ``` bye", "\n[1]\n", ""},
		{"indented fence", "  ```json\n  [1]\n  ```\n", "\n  [1]\n  ", ""},
		{"fence crlf", "```json\r\n[1]\r\n```\r\n", "\n[1]\r\n", ""},
		{"one-line fence", "```[1]```", "[1]", ""},
		{"one-line fence null", "```null```", "null", ""},
		{"unclosed fence", "```json\n[1]\n", "\n[1]\n", ""},
		{"lone closing fence", "[1]\n```", "[1]\n", ""},
		{"backticks in a string are no fence", "```json\n{\"cmd\": \"run ```ls``` now\"}\n```", "\n{\"cmd\": \"run ```ls``` now\"}\n", ""},
		{"first of two fences", "```\n[1]\n```\n```\n[2]\n```", "\n[1]\n", ""},
		{"empty fence", "```json\n```", "", "no value"},

		// Comments.
		{"hash comment", "{\"a\": 1 # one\n}", "{\"a\": 1 \n}", ""},
		{"slash comment", "[1, // one\n2]", "[1, \n2]", ""},
		{"block comment", "[1, /* one,\n two */ 2]", "[1,   2]", ""},
		{"comment at end without newline", "[1] // done", "[1] ", ""},
		{"comment holding quotes", "[1 // \"x\n]", "[1 \n]", ""},
		{"crlf comment", "[1, # x\r\n2]", "[1, \n2]", ""},
		{"block comment separates tokens", "[1/**/2]", "", "invalid character '2' after array element"},
		{"unterminated block comment", "[1, /* x", "", "invalid JSON at line 1, column 5: unterminated /* comment"},
		{"only comments", "# nothing\n// here", "", "no value"},

		// Trailing commas.
		{"trailing comma array", "[1, 2,]", "[1, 2]", ""},
		{"trailing comma object", "{\"a\": 1,\n}", "{\"a\": 1\n}", ""},
		{"trailing commas nested", `{"a": [1,], "b": {"c": "x",},}`, `{"a": [1], "b": {"c": "x"}}`, ""},
		{"trailing comma then comment", "[1, # last\n]", "[1 \n]", ""},
		{"trailing comma after a string", `["a",]`, `["a"]`, ""},
		{"lone comma stays an error", "[,]", "", "invalid character ','"},
		{"double comma stays an error", "[1,,]", "", "invalid character ','"},
		{"comma after colon stays an error", `{"a":,}`, "", "invalid character ','"},
		{"comma in a string kept", `["a,]"]`, `["a,]"]`, ""},

		// Python literals.
		{"python literals", `{"a": True, "b": False, "c": None}`, `{"a": true, "b": false, "c": null}`, ""},
		{"python literals in a list", "[True,False,None]", "[true,false,null]", ""},
		{"python words in strings kept", `{"True": "None of False"}`, `{"True": "None of False"}`, ""},
		{"only whole words", `[TrueValue]`, "", "invalid character 'T'"},
		{"lower-case python-like words", `[none]`, "", "invalid character 'o' in literal null"},

		// Smart quotes.
		{"smart quotes around keys", `{“a”: 1, “b c”: "d"}`, `{"a": 1, "b c": "d"}`, ""},
		{"smart quotes around values", `{“a”: “b”}`, `{"a": "b"}`, ""},
		{"smart closing quote both sides", `{”a”: 1}`, `{"a": 1}`, ""},
		{"plain quote inside smart quotes escaped", `[“say "hi"”]`, `["say \"hi\""]`, ""},
		{"escapes inside smart quotes kept", `[“a\nb\\”]`, `["a\nb\\"]`, ""},
		{"other unicode inside smart quotes kept", `[“—…é”]`, `["—…é"]`, ""},
		{"smart quotes inside a string kept", `{"a": "he said “hi”"}`, `{"a": "he said “hi”"}`, ""},
		{"unterminated smart quote", `{“a: 1}`, "", "unexpected end of input"},

		// Strings are copied byte for byte.
		{"comment markers in strings", `{"url": "http://x/#frag", "c": "/* no */", "h": "# no"}`, `{"url": "http://x/#frag", "c": "/* no */", "h": "# no"}`, ""},
		{"escaped quotes in strings", `{"a": "x\" # y, ]", "b": "\\"}`, `{"a": "x\" # y, ]", "b": "\\"}`, ""},
		{"unicode in strings", `{"名": "日本語 😀 \u00e9"}`, `{"名": "日本語 😀 \u00e9"}`, ""},

		// Nothing else is guessed.
		{"single quotes", `{'a': 1}`, "", "invalid character '\\''"},
		{"unquoted keys", `{a: 1}`, "", "invalid character 'a'"},
		{"NaN", `[NaN]`, "", "invalid character 'N'"},
		{"prose around JSON", `Here: {"a": 1}`, "", "invalid character 'H'"},
		{"two values", `[1] [2]`, "", "after top-level value"},
		{"empty", "", "", "no value"},
		{"blank", " \n\t", "", "no value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NormalizeJSON(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("NormalizeJSON(%q) = %q, %v; want error containing %q", tt.in, got, err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "\n") {
					t.Errorf("error is not one line: %q", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("NormalizeJSON(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Errorf("NormalizeJSON(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if again, err := NormalizeJSON(got); again != got || err != nil {
				t.Errorf("not idempotent: %q then %q, %v", got, again, err)
			}
		})
	}
}

// testStep is the shape of a planned step (LLM_CONTRACT.md).
type testStep struct {
	StepIntention string `json:"step_intention"`
	Type          string `json:"type"`
	Executor      string `json:"executor"`
	TextContent   string `json:"text_content"`
}

type testMessage struct {
	Receiver  []string `json:"receiver"`
	Message   string   `json:"message"`
	NeedReply bool     `json:"need_reply"`
}

func TestDecodeJSON(t *testing.T) {
	src := "```json\n[\n  // first step\n  {\"step_intention\": \"look # up, True\", \"type\": “skill”, \"executor\": \"think\",\n   \"text_content\": \"a // b /* c */ None\",},\n]\n```"
	var got []testStep
	if err := DecodeJSON(src, &got); err != nil {
		t.Fatal(err)
	}
	want := []testStep{{StepIntention: "look # up, True", Type: "skill", Executor: "think", TextContent: "a // b /* c */ None"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mismatch (-want +got):\n%s", diff)
	}

	var m testMessage
	if err := DecodeJSON(`{"receiver": ["a1"], "message": "hi", "need_reply": True, "extra": None}`, &m); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(testMessage{Receiver: []string{"a1"}, Message: "hi", NeedReply: true}, m); diff != "" {
		t.Errorf("mismatch (-want +got):\n%s", diff)
	}

	var v any
	if err := DecodeJSON(`{"n": 1}`, &v); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]any{"n": 1.0}, v); diff != "" {
		t.Errorf("numbers are float64 (no UseNumber): mismatch (-want +got):\n%s", diff)
	}
}

// TestDecodeJSONErrors pins the exact wording the model sees in its repair
// round: the position is in the text it wrote, comments and fences included.
func TestDecodeJSONErrors(t *testing.T) {
	tests := []struct {
		name, in string
		into     any
		want     string
	}{
		{"syntax", `{"a": }`, new(any),
			`invalid JSON at line 1, column 7: invalid character '}' looking for beginning of value (near "{\"a\": }")`},
		{"position after fence, comments and smart quotes", "```json\n{\n  # note\n  “a”: 1, /* x */\n  \"b\": x\n}\n```", new(any),
			"invalid JSON at line 5, column 8: invalid character 'x' looking for beginning of value (near \"\\n  “a”: 1, /* x */\\n  \\\"b\\\": x\\n}\\n```\")"},
		{"position after a dropped trailing comma", "[[1,],\n  x]", new(any),
			`invalid JSON at line 2, column 3: invalid character 'x' looking for beginning of value (near "[[1,],\n  x]")`},
		{"unexpected end", "[{\"a\": \"b\"", new(any),
			`invalid JSON at line 1, column 11: unexpected end of input (an unclosed string, array or object?) (near "[{\"a\": \"b\"")`},
		{"unicode columns count characters", `{"é": "日本", x}`, new(any),
			`invalid JSON at line 1, column 13: invalid character 'x' looking for beginning of object key string (near "{\"é\": \"日本\", x}")`},
		{"wrong type", `{"receiver": ["a"], "need_reply": "yes"}`, new(testMessage),
			`wrong type at line 1, column 39: field "need_reply" must be a boolean, got string (near "er\": [\"a\"], \"need_reply\": \"yes\"}")`},
		{"wrong type nested", `[{"type": 1}]`, new([]testStep),
			`wrong type at line 1, column 11: field "type" must be a string, got number (near "[{\"type\": 1}]")`},
		{"wrong top-level type", `{"a": 1}`, new([]testStep),
			`wrong type at line 1, column 1: the value must be an array, got object (near "{\"a\": 1}")`},
		{"empty", "  ", new(any), `invalid JSON: no value (the text is empty or only comments)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := DecodeJSON(tt.in, tt.into)
			if err == nil {
				t.Fatalf("DecodeJSON(%q) succeeded", tt.in)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("DecodeJSON(%q) error\n got %s\nwant %s", tt.in, got, tt.want)
			}
		})
	}

	var syn *json.SyntaxError
	if err := DecodeJSON(`[`, new(any)); !errors.As(err, &syn) {
		t.Errorf("error %v does not wrap *json.SyntaxError", err)
	}
	var typ *json.UnmarshalTypeError
	if err := DecodeJSON(`1`, new(string)); !errors.As(err, &typ) {
		t.Errorf("error %v does not wrap *json.UnmarshalTypeError", err)
	}
	if err := DecodeJSON(`1`, nil); err == nil || !strings.HasPrefix(err.Error(), "decode JSON: ") {
		t.Errorf("nil target: got %v, want a decode JSON error", err)
	}
}

func TestExtractJSON(t *testing.T) {
	const good = `[{"step_intention": "s", "type": "skill", "executor": "think", "text_content": "t"}]`
	wantSteps := []testStep{{StepIntention: "s", Type: "skill", Executor: "think", TextContent: "t"}}
	tests := []struct {
		name, in string
		want     []testStep
		wantErr  string
		is       error
	}{
		{"plain", "<planned_step>" + good + "</planned_step>", wantSteps, "", nil},
		{"fake block inside reasoning ignored",
			"<think>draft: <planned_step>[]</planned_step></think>\nFinal:\n<planned_step>\n```json\n" + good + "\n```\n</planned_step>", wantSteps, "", nil},
		{"last block wins", "<planned_step>[]</planned_step> corrected: <planned_step>" + good + "</planned_step>", wantSteps, "", nil},
		{"crlf", "<think>\r\nhm\r\n</think>\r\n<planned_step>\r\n" + good + "\r\n</planned_step>\r\n", wantSteps, "", nil},
		{"leading close", "I should plan.</think><planned_step>" + good + "</planned_step>", wantSteps, "", nil},
		{"missing", "I have no plan.", nil, "missing <planned_step> block", ErrNoBlock},
		{"only inside reasoning", "<think><planned_step>" + good + "</planned_step></think> done", nil,
			"missing <planned_step> block: the only <planned_step> is inside <think>…</think> reasoning, which is ignored; write the block after the reasoning", ErrNoBlock},
		{"inside unclosed reasoning", "<think>ok <planned_step>" + good + "</planned_step>", nil,
			"missing <planned_step> block: the only <planned_step> is inside <think>…</think> reasoning, which is ignored; write the block after the reasoning", ErrNoBlock},
		{"never closed", "<planned_step>" + good, nil, "missing <planned_step> block: <planned_step> is never closed with </planned_step>", ErrNoBlock},
		{"never opened", good + "</planned_step>", nil, "missing <planned_step> block: found </planned_step> without an opening <planned_step>", ErrNoBlock},
		{"closed before opened", "</planned_step>" + good + "<planned_step>", nil,
			"missing <planned_step> block: </planned_step> comes before <planned_step>; write <planned_step>…</planned_step>", ErrNoBlock},
		{"empty", "<planned_step>\n</planned_step>", nil, "empty <planned_step> block", ErrEmptyBlock},
		{"empty fence", "<planned_step>```json\n```</planned_step>", nil, "empty <planned_step> block: it holds no JSON value", ErrEmptyBlock},
		{"invalid", "<planned_step>\n[{\"type\": skill}]\n</planned_step>", nil,
			`<planned_step> block: invalid JSON at line 1, column 11: invalid character 's' looking for beginning of value (near "[{\"type\": skill}]")`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []testStep
			err := ExtractJSON(tt.in, "planned_step", &got)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("mismatch (-want +got):\n%s", diff)
				}
				return
			}
			if err == nil || err.Error() != tt.wantErr {
				t.Fatalf("error\n got %v\nwant %s", err, tt.wantErr)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v is not %v", err, tt.is)
			}
			if errors.Is(err, ErrNoBlock) && errors.Is(err, ErrEmptyBlock) {
				t.Errorf("error %v is both missing and empty", err)
			}
		})
	}
}

func TestExtractText(t *testing.T) {
	tests := []struct {
		name, in, tag string
		want          string
		wantErr       string
	}{
		{"summary", "<summary>\nAll done.\n</summary>", "summary", "All done.", ""},
		{"think skill block after reasoning", "<think>r <_think>fake</_think></think><_think> mine </_think>", "_think", "mine", ""},
		{"quick_think", "<quick_think>q</quick_think>", "quick_think", "q", ""},
		{"text kept as is", "<process_message>a # b // c True, ```x```</process_message>", "process_message", "a # b // c True, ```x```", ""},
		{"empty", "<summary>  </summary>", "summary", "", "empty <summary> block"},
		{"missing", "All done.", "summary", "", "missing <summary> block"},
		{"empty tag", "<summary>x</summary>", "", "", "missing <> block: no tag name given"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ExtractText(tt.in, tt.tag)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if got != tt.want || gotErr != tt.wantErr {
				t.Errorf("ExtractText(%q, %q) = %q, %q; want %q, %q", tt.in, tt.tag, got, gotErr, tt.want, tt.wantErr)
			}
		})
	}
}

// TestHugeInputs checks that 1 MB answers, including adversarial ones, are
// handled in linear time: a quadratic scan would take minutes, not seconds.
func TestHugeInputs(t *testing.T) {
	const size = 1 << 20
	var plan strings.Builder
	plan.WriteString("<think>")
	for plan.Len() < size/2 {
		plan.WriteString("draft <planned_step>[] <Think> < </planned_step>\n")
	}
	plan.WriteString("</think>\n<planned_step>\n```json\n[\n")
	n := 0
	for plan.Len() < size {
		fmt.Fprintf(&plan, "  {\"step_intention\": \"s%d # not a comment\", \"type\": “skill”, \"executor\": \"think\", \"text_content\": \"x\",}, // c\n", n)
		n++
	}
	plan.WriteString("]\n```\n</planned_step>")

	inputs := map[string]string{
		"realistic":        plan.String(),
		"many openings":    strings.Repeat("<think>", size/7),
		"many closings":    strings.Repeat("</think>x", size/9),
		"many brackets":    strings.Repeat("<", size),
		"many block tags":  strings.Repeat("<planned_step>", size/14),
		"many fences":      strings.Repeat("``` ", size/4),
		"many fence lines": strings.Repeat("```\n", size/4),
		"deep arrays":      strings.Repeat("[", size),
		"many commas":      "[" + strings.Repeat("1,", size/2) + "]",
		"long string":      `"` + strings.Repeat(`a\"#//`, size/6) + `"`,
		"smart string":     "“" + strings.Repeat(`a"b`, size/3),
		"python words":     "[" + strings.Repeat("True,None,", size/10) + "]",
	}
	for name, in := range inputs {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			var steps []testStep
			err := ExtractJSON(in, "planned_step", &steps)
			_, _ = NormalizeJSON(in)
			_ = StripReasoning(in)
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("took %v", d)
			}
			if name == "realistic" {
				if err != nil {
					t.Fatal(err)
				}
				if len(steps) != n || steps[n-1].StepIntention != fmt.Sprintf("s%d # not a comment", n-1) {
					t.Errorf("got %d steps, want %d", len(steps), n)
				}
			}
		})
	}
}
