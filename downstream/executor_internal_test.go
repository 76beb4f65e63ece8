package downstream

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestApproves(t *testing.T) {
	yes := []string{"yes", "Yes", "  YES  ", "y", "Y", "ok", "OK", "ok.", "okay", "Okay, go on", "approve", "approved",
		"allow", "go ahead", "sure", "confirm", "yes, go ahead", "Yes!", "yes please",
		"是", "是的", "好", "好的", "同意", "可以", "可以，写吧", "批准", "确认", "允许"}
	no := []string{"", "  ", "no", "No.", "no, not now", "nope", "not ok", "don't", "never", "maybe", "later",
		"yesterday", "okapi", "yellow", "y'know, no", "approval denied",
		"不", "不行", "不同意", "不可以", "否", "拒绝", "等一下", "别"}
	for _, r := range yes {
		if !approves(r) {
			t.Errorf("approves(%q) = false, want true", r)
		}
	}
	for _, r := range no {
		if approves(r) {
			t.Errorf("approves(%q) = true, want false", r)
		}
	}
}

// TestApprovesChineseNotYes: replies that start with a yes-character but
// do not say yes.
func TestApprovesChineseNotYes(t *testing.T) {
	for _, r := range []string{"好像不行", "是不是有风险？", "是否安全？", "可以吗？", "确认一下参数再说"} {
		if approves(r) {
			t.Errorf("approves(%q) = true, want false", r)
		}
	}
}

func TestRisky(t *testing.T) {
	yes, no := true, false
	pool := NewPool(&Config{Servers: map[string]ServerConfig{
		"low":  {Command: "x"},
		"high": {Command: "x", Risk: RiskHigh, AutoApprove: []string{"trusted"}},
		"auto": {Command: "x", AutoApprove: []string{"write"}},
	}}, nil)
	e := &Executor{cfg: ExecutorConfig{Pool: pool}}
	for _, tc := range []struct {
		server, tool string
		ann          *mcp.ToolAnnotations
		want         bool
	}{
		{"low", "read", &mcp.ToolAnnotations{ReadOnlyHint: true}, false},
		{"low", "write", &mcp.ToolAnnotations{DestructiveHint: &yes}, true},
		{"low", "append", &mcp.ToolAnnotations{DestructiveHint: &no}, false},
		{"low", "odd", &mcp.ToolAnnotations{ReadOnlyHint: true, DestructiveHint: &yes}, false},
		{"high", "read", &mcp.ToolAnnotations{ReadOnlyHint: true}, true},
		{"high", "plain", nil, true},
		{"high", "trusted", &mcp.ToolAnnotations{DestructiveHint: &yes}, false},
		{"auto", "write", &mcp.ToolAnnotations{DestructiveHint: &yes}, false},
		{"auto", "delete", &mcp.ToolAnnotations{DestructiveHint: &yes}, true},
		{"unknown", "write", &mcp.ToolAnnotations{DestructiveHint: &yes}, true},
	} {
		if got := e.risky(tc.server, tc.tool, ToolDesc{Annotations: tc.ann}); got != tc.want {
			t.Errorf("risky(%s, %s, %+v) = %v, want %v", tc.server, tc.tool, tc.ann, got, tc.want)
		}
	}
}

// TestRiskyUnannotated: MCP's defaults (readOnlyHint false, destructiveHint
// true) make a tool that says nothing a possibly destructive one.
func TestRiskyUnannotated(t *testing.T) {
	pool := NewPool(&Config{Servers: map[string]ServerConfig{"low": {Command: "x"}}}, nil)
	e := &Executor{cfg: ExecutorConfig{Pool: pool}}
	for _, ann := range []*mcp.ToolAnnotations{nil, {}, {Title: "Delete everything", OpenWorldHint: new(true)}} {
		if !e.risky("low", "rm", ToolDesc{Annotations: ann}) {
			t.Errorf("risky(unannotated %+v) = false, want true", ann)
		}
	}
}

func TestBoundedKeepsSmallResults(t *testing.T) {
	e := &Executor{cfg: ExecutorConfig{MaxResultBytes: 1000}}
	res := &mcp.CallToolResult{Content: []mcp.Content{
		&mcp.TextContent{Text: "héllo ✓"},
		&mcp.ImageContent{MIMEType: "image/png", Data: []byte{0x89, 'P', 'N', 'G'}},
	}, StructuredContent: map[string]any{"n": 1}}
	want := map[string]any{
		"content": []any{
			map[string]any{"type": "text", "text": "héllo ✓"},
			map[string]any{"type": "image", "mimeType": "image/png", "data": "iVBORw=="},
		},
		"structuredContent": map[string]any{"n": float64(1)},
	}
	if diff := cmp.Diff(want, e.bounded(res)); diff != "" {
		t.Errorf("bounded mismatch (-want +got):\n%s", diff)
	}
}

func TestBoundedCutsLongStrings(t *testing.T) {
	const max = 4000
	e := &Executor{cfg: ExecutorConfig{MaxResultBytes: max}}
	long := strings.Repeat("é✓x", 3000) // 2+3+1 bytes: cuts land inside runes
	res := &mcp.CallToolResult{Content: []mcp.Content{
		&mcp.TextContent{Text: "short stays"},
		&mcp.TextContent{Text: long},
		&mcp.ImageContent{MIMEType: "image/png", Data: make([]byte, 6000)},
	}}
	got, ok := e.bounded(res).(map[string]any)
	if !ok {
		t.Fatalf("bounded = %T, want a JSON object", e.bounded(res))
	}
	content := got["content"].([]any)
	if text := content[0].(map[string]any)["text"]; text != "short stays" {
		t.Errorf("short text = %q", text)
	}
	text := content[1].(map[string]any)["text"].(string)
	if !utf8.ValidString(text) {
		t.Errorf("cut text is not valid UTF-8: …%q", text[len(text)-40:])
	}
	if !strings.HasPrefix(long, strings.SplitN(text, "…[truncated", 2)[0]) || !strings.Contains(text, "…[truncated ") {
		t.Errorf("cut text is not a prefix with a note: …%q", text[len(text)-60:])
	}
	img := content[2].(map[string]any)
	if img["mimeType"] != "image/png" || !strings.Contains(img["data"].(string), "…[truncated ") {
		t.Errorf("cut image: mimeType %v, data …%v", img["mimeType"], img["data"])
	}
	note, _ := got["_truncated"].(string)
	if !strings.Contains(note, "bytes of long strings were cut") {
		t.Errorf("_truncated = %q", note)
	}
	if b, _ := json.Marshal(got); len(b) > 2*max {
		t.Errorf("bounded result is %d bytes, want near %d", len(b), max)
	}
}

// TestBoundedManyStrings: a result made of many strings (a directory
// listing, a search) must stay near MaxResultBytes too.
func TestBoundedManyStrings(t *testing.T) {
	const max = 4000
	e := &Executor{cfg: ExecutorConfig{MaxResultBytes: max}}
	for _, size := range []int{2000, 100} {
		res := &mcp.CallToolResult{}
		for range 200 {
			res.Content = append(res.Content, &mcp.TextContent{Text: strings.Repeat("x", size)})
		}
		if b, _ := json.Marshal(e.bounded(res)); len(b) > 2*max {
			t.Errorf("200 blocks of %d bytes: bounded result is %d bytes, want near %d", size, len(b), max)
		}
	}
}

func TestCheckArguments(t *testing.T) {
	// As a server sends it (zod's draft-07 output, like server-everything).
	var schema any
	if err := json.Unmarshal([]byte(`{
		"$schema": "http://json-schema.org/draft-07/schema#",
		"type": "object",
		"properties": {
			"a": {"type": "number", "description": "First number"},
			"b": {"type": "number"},
			"mode": {"type": "string", "enum": ["fast", "slow"]}
		},
		"required": ["a", "b"],
		"additionalProperties": false
	}`), &schema); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		schema  any
		args    map[string]any
		wantErr []string // substrings; nil: valid
	}{
		{"valid", schema, map[string]any{"a": 1, "b": 2.5}, nil},
		{"valid with enum", schema, map[string]any{"a": 1, "b": 2, "mode": "fast"}, nil},
		{"string for number", schema, map[string]any{"a": "one", "b": 2}, []string{"/a", "number"}},
		{"missing required", schema, map[string]any{"a": 1}, []string{"b"}},
		{"unknown property", schema, map[string]any{"a": 1, "b": 2, "c": 3}, []string{"c"}},
		{"not in enum", schema, map[string]any{"a": 1, "b": 2, "mode": "medium"}, []string{"mode"}},
		{"no schema", nil, map[string]any{"anything": true}, nil},
		// A schema we cannot read is the server's business: the call goes on.
		{"unreadable schema", map[string]any{"type": 5}, map[string]any{"a": 1}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkArguments(resolveSchema(tc.schema), tc.args)
			if tc.wantErr == nil {
				if err != nil {
					t.Errorf("checkArguments: %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("checkArguments(%v) = nil, want an error", tc.args)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("checkArguments error %q lacks %q", err, w)
				}
			}
		})
	}
}

// BenchmarkCheckArguments measures the validation each tool call pays
// (server-everything's get-sum schema, as the SDK hands it over).
func BenchmarkCheckArguments(b *testing.B) {
	var schema any
	if err := json.Unmarshal([]byte(`{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
		"properties": {"a": {"type": "number", "description": "First number"}, "b": {"type": "number", "description": "Second number"}},
		"required": ["a", "b"], "additionalProperties": false}`), &schema); err != nil {
		b.Fatal(err)
	}
	args := map[string]any{"a": 1, "b": 2}
	const n = 1000
	b.ResetTimer()
	for range b.N {
		for range n {
			if err := checkArguments(resolveSchema(schema), args); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/validation")
}

// FuzzCutStrings: the byte-bounded cut of a downstream result's strings
// never splits a character and keeps each string within its limit plus
// the note.
func FuzzCutStrings(f *testing.F) {
	f.Add("hello world", 5)
	f.Add("任务阶段步骤", 4)
	f.Fuzz(func(t *testing.T, text string, limit int) {
		if limit < 0 || limit > 1<<16 {
			return
		}
		cut := 0
		got, _ := cutStrings(map[string]any{"a": []any{text}}, limit, &cut).(map[string]any)
		s := got["a"].([]any)[0].(string)
		if utf8.ValidString(text) && !utf8.ValidString(s) {
			t.Fatalf("cutStrings(%q, %d) = %q: not valid UTF-8", text, limit, s)
		}
		if len(text) <= limit && s != text {
			t.Fatalf("cutStrings changed a string within the limit")
		}
		if len(text) > limit && !strings.HasPrefix(text, s[:len(text)-cut]) {
			t.Fatalf("cutStrings(%q, %d) = %q: not a prefix of the text", text, limit, s)
		}
	})
}
