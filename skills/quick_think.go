package skills

import "github.com/mas-mcp/mas-mcp/engine"

// quickThink generates text without the history (spec §3.6).
// Prompt: system → role → (goal → rules) → memory.
func quickThink() skill {
	return skill{
		name:     engine.SkillQuickThink,
		sections: []section{secRole, secStep, secMemory},
		parse:    textOutput("quick_think", "quick_think"),
	}
}
