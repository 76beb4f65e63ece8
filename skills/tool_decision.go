package skills

import "github.com/mas-mcp/mas-mcp/engine"

// toolDecision reads a long-tail tool's results and either stops (an empty
// block) or continues with one [instruction_generation, tool] pair inserted
// next (spec §3.12). Prompt: system → role → (goal → rules) → MCP base
// prompt → this tool's history → memory.
func toolDecision() skill {
	return skill{
		name:     engine.SkillToolDecision,
		sections: []section{secRole, secStep, secMCP, secToolHistory, secMemory},
		parse: func(answer string, _ *engine.ExecInput) (*engine.Output, error) {
			steps, err := stepList(answer, "tool_decision", true)
			if err != nil {
				return nil, err
			}
			return &engine.Output{AddNextSteps: steps, Result: map[string]any{"tool_decision": steps}}, nil
		},
	}
}
