package skills

import "github.com/mas-mcp/mas-mcp/engine"

// think generates text that needs the stage's history (spec §3.5).
// Prompt: system → role → (goal → rules) → history → memory.
func think() skill {
	return skill{
		name:     engine.SkillThink,
		sections: []section{secRole, secHistory, secStep, secMemory},
		parse:    textOutput("_think", "think"),
	}
}
