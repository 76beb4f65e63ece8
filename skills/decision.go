package skills

import "github.com/mas-mcp/mas-mcp/engine"

// decision plans steps inserted before the next pending step, free of the
// stage's goal: reactions to messages, gathering missing information (spec
// §3.13, §10.1). Prompt: system → role → (goal → rules) → history → memory.
func decision() skill {
	return skill{
		name:     engine.SkillDecision,
		sections: []section{secRole, secHistory, secStep, secMemory},
		parse: func(answer string, _ *engine.ExecInput) (*engine.Output, error) {
			steps, err := stepList(answer, "decision_step", true)
			if err != nil {
				return nil, err
			}
			return &engine.Output{AddNextSteps: steps, Result: map[string]any{"decision_step": steps}}, nil
		},
	}
}
