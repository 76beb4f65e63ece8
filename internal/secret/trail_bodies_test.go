package secret_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/secret"
)

// TestTrailScrubsSecretsInsideJSONBodies: the trails scrub an entry's JSON
// encoding with a secret.List. A tool call's result (and its arguments) is
// itself JSON kept as a body's text (engine.JSONBody), so in the entry's
// encoding a secret with a character JSON escapes (", \, & < >) is
// escaped twice: it must be scrubbed all the same.
func TestTrailScrubsSecretsInsideJSONBodies(t *testing.T) {
	for _, pw := range []string{`plain-secret-99`, `hunter2&hunter2`, `pa"ss-word-99`, `back\slash-pw`} {
		tr := engine.NewMemoryTrail()
		tr.Scrub(pw)
		result := map[string]any{"content": []any{map[string]any{"type": "text", "text": "the password is " + pw}}}
		tr.Append(context.Background(), engine.TrailEntry{
			Kind: engine.TrailKindToolCall, TaskID: "t1", AgentID: "a1", StepID: "s1",
			Tool: &engine.TrailTool{Server: "fs", Op: "call_tool", Name: "read", Arguments: engine.JSONBody(map[string]any{"q": pw}), Result: engine.JSONBody(result)},
		})
		page, err := tr.ReadTrail(context.Background(), engine.TrailQuery{TaskID: "t1"})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Entries) != 1 || page.Entries[0].Tool == nil {
			t.Fatalf("%q: read %d entries, want the tool call", pw, len(page.Entries))
		}
		tool := page.Entries[0].Tool
		for name, body := range map[string]string{"result": tool.Result.Text, "arguments": tool.Arguments.Text} {
			var decoded any
			if err := json.Unmarshal([]byte(body), &decoded); err != nil {
				t.Fatalf("%q: the tool's %s is no longer JSON: %v: %s", pw, name, err, body)
			}
			if strings.Contains(stringsIn(decoded), pw) {
				t.Errorf("secret %q: the trail's tool-call %s still holds it (JSON-escaped): %s", pw, name, body)
			}
		}
	}
}

// stringsIn joins the strings a decoded JSON value holds.
func stringsIn(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []any:
		var b strings.Builder
		for _, e := range x {
			b.WriteString(stringsIn(e) + "\n")
		}
		return b.String()
	case map[string]any:
		var b strings.Builder
		for _, e := range x {
			b.WriteString(stringsIn(e) + "\n")
		}
		return b.String()
	}
	return ""
}

// TestClippedSecretIsScrubbed: a secret cut short by a clip ("…" right
// after its first MinLen bytes or more) is scrubbed; the same bytes
// elsewhere, or fewer than MinLen of them, are text.
func TestClippedSecretIsScrubbed(t *testing.T) {
	l := secret.New("[redacted]", "sk-abcdefghijklmnop")
	for in, want := range map[string]string{
		`id "xxsk-abcdefghij…": no such task`: `id "xx[redacted]…": no such task`,
		`id "sk-abcdefghijklmnop"`:            `id "[redacted]"`,
		`id "sk-abcdefghij" and more`:         `id "sk-abcdefghij" and more`,
		`id "sk-abcd…"`:                       `id "sk-abcd…"`,
	} {
		if got := l.Text(in); got != want {
			t.Errorf("Text(%q) = %q, want %q", in, got, want)
		}
	}
}
