package skills

import "github.com/mas-mcp/mas-mcp/engine"

// summary ends the agent's part of a stage: its text becomes the stage's
// completion_summary for this agent, and only it marks the agent finished
// (spec §3.3). Prompt: system → role → (goal → rules) → history → memory.
func summary() skill {
	return skill{
		name:     engine.SkillSummary,
		sections: []section{secRole, secHistory, secStep, secMemory},
		parse: func(answer string, _ *engine.ExecInput) (*engine.Output, error) {
			text, err := ExtractText(answer, "summary")
			if err != nil {
				return nil, err
			}
			return &engine.Output{Completion: &text, Result: map[string]any{"summary": text}}, nil
		},
	}
}
