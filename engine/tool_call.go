package engine

// ToolCall is a tool step's instruction_content (spec §4.3), written by the
// instruction_generation step before it: get_description (InstructionType),
// or a call of one tool, resource or prompt of the step's MCP server with
// its arguments.
//
// Its fields are declared in the order of their JSON names, the order in
// which the JSON object it replaced was stored, so stored documents, the
// trail and prompts keep their bytes; the skill that writes it keeps only
// these keys.
type ToolCall struct {
	// Arguments are the call's arguments (a resource call's "uri"), the
	// one part whose shape is open: each tool's input schema says it.
	Arguments map[string]any `json:"arguments,omitzero"`
	// InstructionType is "get_description" to describe the server's
	// capabilities instead of calling (or "function_call", or empty).
	InstructionType string `json:"instruction_type,omitempty"`
	PromptName      string `json:"prompt_name,omitempty"`
	ResourceName    string `json:"resource_name,omitempty"`
	ToolName        string `json:"tool_name,omitempty"`
}

// Clone deep-copies the call: what an executor changes in its copy (the
// operator's completed or corrected arguments) never reaches the step.
func (c *ToolCall) Clone() *ToolCall {
	if c == nil {
		return nil
	}
	out := *c
	out.Arguments = cloneJSONMap(c.Arguments)
	return &out
}

// size estimates the call's JSON size in bytes, as sizeOf does a map's.
func (c *ToolCall) size() int {
	n := 2
	for _, f := range [...]struct{ key, v string }{
		{"instruction_type", c.InstructionType}, {"prompt_name", c.PromptName},
		{"resource_name", c.ResourceName}, {"tool_name", c.ToolName},
	} {
		if f.v != "" {
			n += len(f.key) + 4 + sizeOf(f.v)
		}
	}
	if c.Arguments != nil {
		n += len("arguments") + 4 + sizeOf(c.Arguments)
	}
	return n
}
