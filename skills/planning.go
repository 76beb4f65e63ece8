package skills

import "github.com/mas-mcp/mas-mcp/engine"

// planning decomposes a goal into steps appended to the agent's list (spec
// §3.1). Prompt: system → role → (goal → rules) → memory.
func planning() skill {
	return skill{
		name:     engine.SkillPlanning,
		sections: []section{secRole, secStep, secMemory},
		parse: func(answer string, _ *engine.ExecInput) (*engine.Output, error) {
			steps, err := stepList(answer, "planned_step", false)
			if err != nil {
				return nil, err
			}
			return &engine.Output{AddSteps: steps, Result: map[string]any{"planned_step": steps}}, nil
		},
	}
}
