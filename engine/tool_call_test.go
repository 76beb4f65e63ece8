package engine

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestToolCallJSON checks that a tool call encodes as the JSON object it
// replaced did (keys sorted, as encoding/json sorts a map's), that it
// decodes back, and that its size estimate is that object's.
func TestToolCallJSON(t *testing.T) {
	tests := []struct {
		name string
		call *ToolCall
		m    map[string]any
	}{
		{"get_description", &ToolCall{InstructionType: "get_description"}, map[string]any{"instruction_type": "get_description"}},
		{"tool call", &ToolCall{InstructionType: "function_call", ToolName: "read_file", Arguments: map[string]any{"path": "/a", "n": 2.0}},
			map[string]any{"instruction_type": "function_call", "tool_name": "read_file", "arguments": map[string]any{"path": "/a", "n": 2.0}}},
		{"no arguments", &ToolCall{ToolName: "list", Arguments: map[string]any{}}, map[string]any{"tool_name": "list", "arguments": map[string]any{}}},
		{"resource", &ToolCall{ResourceName: "readme", Arguments: map[string]any{"uri": "file:///r"}}, map[string]any{"resource_name": "readme", "arguments": map[string]any{"uri": "file:///r"}}},
		{"prompt", &ToolCall{PromptName: "review"}, map[string]any{"prompt_name": "review"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(tt.call)
			if err != nil {
				t.Fatal(err)
			}
			want, err := json.Marshal(tt.m)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Errorf("JSON %s, want %s", got, want)
			}
			var back *ToolCall
			if err := json.Unmarshal(got, &back); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.call, back); diff != "" {
				t.Errorf("decoded mismatch (-want +got):\n%s", diff)
			}
			if got, want := tt.call.size(), sizeOf(tt.m); got != want {
				t.Errorf("size %d, want %d", got, want)
			}
			c := tt.call.Clone()
			if c.Arguments != nil {
				c.Arguments["added"] = true
				if _, ok := tt.call.Arguments["added"]; ok {
					t.Error("Clone shares its arguments")
				}
			}
		})
	}
}
