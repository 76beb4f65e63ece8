package scripted

import (
	"encoding/json"
	"strings"
	"sync"

	"github.com/mas-mcp/mas-mcp/internal/fakellm"
)

// Call is one downstream call a ToolUser makes: a tool, a resource or a
// prompt of an MCP server, or (Describe) its capability list.
type Call struct {
	Server   string         `json:"server"`
	Tool     string         `json:"tool_name,omitempty"`
	Resource string         `json:"resource_name,omitempty"`
	Prompt   string         `json:"prompt_name,omitempty"`
	Describe bool           `json:"describe,omitempty"`
	Args     map[string]any `json:"arguments,omitempty"`
}

const mkCall = "CALL "

// ToolUser scripts one worker (any agent but the manager) that, in its
// stage, makes the given calls in order, each as the spec's
// [instruction_generation, tool] pair, stops each long-tail chain at the
// tool_decision after it, then reflects and summarises. The manager only
// acknowledges (the test manages the task).
type ToolUser struct {
	Calls []Call

	mu        sync.Mutex
	decisions []string // the tool_decision prompts seen (their tool history)
}

// Decisions returns the prompts of the tool_decision steps, in order.
func (u *ToolUser) Decisions() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.decisions...)
}

// Handle answers one LLM request.
func (u *ToolUser) Handle(c *fakellm.Call) fakellm.Reply {
	if c.AgentName == "manager" {
		switch c.Skill {
		case "planning":
			return jsonReply("planned_step", []step{})
		case "reflection":
			return jsonReply("reflection_step", []step{})
		case "summary":
			return text1("summary", "nothing to do")
		case "process_message":
			return text1("process_message", "noted")
		}
		return fakellm.Reply{Status: 500}
	}
	switch c.Skill {
	case "planning":
		var plan []step
		for _, call := range u.Calls {
			b, _ := json.Marshal(call)
			plan = append(plan,
				skill("instruction_generation", "Prepare the call", "prepare the next call"),
				step{StepIntention: "Use " + call.Server, Type: "tool", Executor: call.Server, TextContent: mkCall + string(b)})
		}
		return jsonReply("planned_step", plan)
	case "instruction_generation":
		// The tool step's text (in the tool-step section) says what to call.
		_, after, ok := strings.Cut(c.Prompt, mkCall)
		if !ok {
			return fakellm.Reply{Status: 500}
		}
		line, _, _ := strings.Cut(after, "\n")
		var call Call
		if err := json.Unmarshal([]byte(line), &call); err != nil {
			return fakellm.Reply{Status: 500}
		}
		ins := map[string]any{}
		switch {
		case call.Describe:
			ins["instruction_type"] = "get_description"
		case call.Tool != "":
			ins["tool_name"], ins["arguments"] = call.Tool, call.Args
		case call.Resource != "":
			ins["resource_name"], ins["arguments"] = call.Resource, call.Args
		case call.Prompt != "":
			ins["prompt_name"], ins["arguments"] = call.Prompt, call.Args
		}
		return jsonReply("tool_instruction", ins)
	case "tool_decision":
		u.mu.Lock()
		u.decisions = append(u.decisions, c.Prompt)
		u.mu.Unlock()
		return fakellm.Reply{Content: "<tool_decision></tool_decision>"}
	case "reflection":
		return jsonReply("reflection_step", []step{skill("summary", "Summarise", "summarise")})
	case "summary":
		return text1("summary", c.AgentName+" made its calls")
	case "process_message":
		return text1("process_message", "noted")
	}
	return fakellm.Reply{Status: 500}
}
