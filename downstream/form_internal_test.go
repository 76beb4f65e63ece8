package downstream

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mas-mcp/mas-mcp/engine"
)

// TestArgumentForm: the form asks for the required arguments that are
// missing and those given whose values fail their own schema, nothing else.
func TestArgumentForm(t *testing.T) {
	schema := map[string]any{"type": "object", "required": []any{"a", "b", "path"},
		"properties": map[string]any{
			"a":    map[string]any{"type": "number"},
			"b":    map[string]any{"type": "number", "description": "the second"},
			"path": map[string]any{"type": "string"},
			"tags": map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
			"mode": map[string]any{"type": "string", "enum": []any{"fast", "slow"}},
		}}
	for _, tc := range []struct {
		name string
		args map[string]any
		want []string
	}{
		{"missing", map[string]any{"a": 1}, []string{"b", "path"}},
		{"invalid", map[string]any{"a": "one", "b": 2, "path": "/x", "mode": "medium"}, []string{"a", "mode"}},
		{"non-primitive", map[string]any{"a": 1, "b": 2, "path": "/x", "tags": "x"}, []string{"tags"}},
		{"fine", map[string]any{"a": 1, "b": 2, "path": "/x"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, f := range argumentForm(schema, tc.args).fields {
				got = append(got, f.Name)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("fields mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFormParse: the operator's answers, as decisions and as text.
func TestFormParse(t *testing.T) {
	f := formFromSchema(map[string]any{"type": "object", "required": []any{"n"}, "properties": map[string]any{
		"n":    map[string]any{"type": "integer"},
		"ok":   map[string]any{"type": "boolean"},
		"x":    map[string]any{"type": "number"},
		"tags": map[string]any{"type": "array"},
		"name": map[string]any{"type": "string"},
	}}, nil)
	one := formFromSchema(map[string]any{"properties": map[string]any{"b": map[string]any{"type": "number"}}}, nil)
	for _, tc := range []struct {
		name    string
		f       form
		a       engine.Answer
		want    formAnswer
		wantErr bool
	}{
		{name: "json text", f: f, a: engine.Answer{Text: `{"n": "7", "ok": "yes", "x": 2.5, "tags": "[\"a\"]", "name": "Ada", "other": 1}`},
			want: formAnswer{Action: "accept", Content: map[string]any{"n": int64(7), "ok": true, "x": 2.5, "tags": []any{"a"}, "name": "Ada"}}},
		{name: "decision", f: f, a: engine.Answer{Decision: &engine.Decision{Approve: true, Arguments: map[string]any{"n": 3.0}}},
			want: formAnswer{Action: "accept", Content: map[string]any{"n": 3.0}}},
		{name: "denied", f: f, a: engine.Answer{Text: "no", Decision: &engine.Decision{}}, want: formAnswer{Action: "decline"}},
		{name: "decline word", f: f, a: engine.Answer{Text: " Decline. "}, want: formAnswer{Action: "decline"}},
		{name: "拒绝", f: one, a: engine.Answer{Text: "拒绝"}, want: formAnswer{Action: "decline"}},
		{name: "one field value", f: one, a: engine.Answer{Text: "40"}, want: formAnswer{Action: "accept", Content: map[string]any{"b": 40.0}}},
		{name: "one field not a number", f: one, a: engine.Answer{Text: "forty"}, wantErr: true},
		{name: "several fields, bare text", f: f, a: engine.Answer{Text: "Ada"}, wantErr: true},
		{name: "bad json", f: f, a: engine.Answer{Text: "{nope"}, wantErr: true},
		{name: "not a boolean", f: f, a: engine.Answer{Text: `{"ok": "maybe"}`}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.f.parse(tc.a)
			if (err != nil) != tc.wantErr {
				t.Fatalf("parse: %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); !tc.wantErr && diff != "" {
				t.Errorf("answer mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
