package skills

import "github.com/mas-mcp/mas-mcp/engine"

// reflection judges the stage's steps against its goal and appends what is
// missing, or ends with summary (spec §3.2). Prompt: system → role → (goal →
// rules) → history → memory.
func reflection() skill {
	return skill{
		name:     engine.SkillReflection,
		sections: []section{secRole, secHistory, secStep, secMemory},
		parse: func(answer string, _ *engine.ExecInput) (*engine.Output, error) {
			steps, err := stepList(answer, "reflection_step", true)
			if err != nil {
				return nil, err
			}
			return &engine.Output{AddSteps: steps, Result: map[string]any{"reflection_step": steps}}, nil
		},
	}
}
