package skills

import (
	"slices"
	"strings"

	"github.com/mas-mcp/mas-mcp/engine"
)

// askInfo queries the MAS; the answer comes back as a message the agent
// waits for and digests next (spec §3.11). Prompt: system → role → (goal →
// rules) → memory.
func askInfo() skill {
	return skill{
		name:     engine.SkillAskInfo,
		sections: []section{secRole, secStep, secMemory},
		parse: func(answer string, _ *engine.ExecInput) (*engine.Output, error) {
			var q engine.AskInfoQuery
			if err := ExtractJSON(answer, "ask_info", &q); err != nil {
				return nil, err
			}
			q.Type = strings.TrimSpace(q.Type)
			if !slices.Contains(engine.QueryTypes, q.Type) {
				return nil, errorf("<ask_info>: type %q: must be one of %s", quoted(q.Type), strings.Join(engine.QueryTypes, ", "))
			}
			if i := blankEntry(q.AgentID); i >= 0 {
				return nil, errorf("<ask_info>: agent_id[%d] is null or blank: each entry must be an agent_id", i)
			}
			return &engine.Output{AskInfo: &q, Result: map[string]any{"ask_instruction": q}}, nil
		},
	}
}
