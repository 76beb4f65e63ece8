package skills

import (
	"errors"
	"fmt"
	"strings"

	"github.com/mas-mcp/mas-mcp/engine"
)

// instructionGeneration writes the concrete MCP call onto the tool step it
// prepares (spec §3.4, §4.3). Prompt: system → role → (goal → rules) → tool
// step (with the tool's guide) → memory; the MCP base prompt (§5.4) is the
// MCP section, in the fixed part.
func instructionGeneration() skill {
	return skill{
		name:     engine.SkillInstructionGeneration,
		sections: []section{secRole, secStep, secMCP, secToolStep, secMemory},
		prepare: func(in *engine.ExecInput) error {
			t, ok := targetToolStep(in)
			switch {
			case !ok:
				return errors.New("no pending tool step follows this instruction_generation step in its stage")
			case t.Type != engine.StepTool:
				return fmt.Errorf("step %s is not a tool step", t.StepID)
			case t.ExecutionState != engine.StateInit && t.ExecutionState != engine.StatePending:
				return fmt.Errorf("tool step %s is already %s", t.StepID, t.ExecutionState)
			}
			return nil
		},
		parse: func(answer string, in *engine.ExecInput) (*engine.Output, error) {
			var ins map[string]any
			if err := ExtractJSON(answer, "tool_instruction", &ins); err != nil {
				return nil, err
			}
			call, err := parseToolCall(ins)
			if err != nil {
				return nil, err
			}
			t, _ := targetToolStep(in)
			return &engine.Output{
				ToolInstruction: &engine.ToolInstruction{StepID: t.StepID, Instruction: call},
				Result:          map[string]any{"instruction_generation": ins, "tool_step_id": t.StepID},
			}, nil
		},
	}
}

// parseToolCall checks a <tool_instruction>'s shape (spec §4.3) and returns the
// call it makes: get_description, or a tool, resource or prompt call.
// Missing arguments of a tool call become {} (in ins too, which the step's
// result shows); keys beyond the call's are left out of it.
func parseToolCall(ins map[string]any) (*engine.ToolCall, error) {
	if err := checkToolInstruction(ins); err != nil {
		return nil, err
	}
	call := &engine.ToolCall{}
	for _, f := range [...]struct {
		key string
		to  *string
	}{
		{"instruction_type", &call.InstructionType}, {"tool_name", &call.ToolName},
		{"resource_name", &call.ResourceName}, {"prompt_name", &call.PromptName},
	} {
		switch v := ins[f.key].(type) {
		case nil:
		case string:
			*f.to = v
		default:
			return nil, fmt.Errorf("<tool_instruction>: %q must be a string", f.key)
		}
	}
	call.Arguments, _ = ins["arguments"].(map[string]any) // an object or none: checked
	return call, nil
}

// checkToolInstruction checks a <tool_instruction>'s shape (spec §4.3):
// get_description, or a tool, resource or prompt call. Missing arguments of
// a tool call become {}.
func checkToolInstruction(ins map[string]any) error {
	str := func(k string) (string, bool) {
		v, ok := ins[k].(string)
		return strings.TrimSpace(v), ok && strings.TrimSpace(v) != ""
	}
	args, hasArgs := ins["arguments"]
	argsObj, argsIsObj := args.(map[string]any)
	if hasArgs && args != nil && !argsIsObj {
		return errors.New(`<tool_instruction>: "arguments" must be an object`)
	}
	if t, ok := str("instruction_type"); ok {
		if t == "get_description" {
			return nil
		}
		if t != "function_call" {
			return fmt.Errorf(`<tool_instruction>: instruction_type %q: must be "get_description" (or omitted for a call)`, quoted(t))
		}
	}
	switch {
	case has(str, "tool_name"):
		if !argsIsObj {
			ins["arguments"] = map[string]any{}
		}
	case has(str, "resource_name"):
		uri, _ := argsObj["uri"].(string)
		if strings.TrimSpace(uri) == "" {
			return errors.New(`<tool_instruction>: a resource call needs "arguments": {"uri": "<resource uri>"}`)
		}
	case has(str, "prompt_name"):
	default:
		return errors.New(`<tool_instruction>: needs "instruction_type": "get_description", or one of "tool_name", "resource_name", "prompt_name"`)
	}
	return nil
}

func has(str func(string) (string, bool), k string) bool {
	_, ok := str(k)
	return ok
}
