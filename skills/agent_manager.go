package skills

import (
	"strings"

	"github.com/mas-mcp/mas-mcp/engine"
)

// agentManager issues one agent-management instruction: create an agent
// from a template or a configuration, or add agents to a task (spec §3.10).
// Prompt: system → role → (goal → rules) → history → memory.
func agentManager() skill {
	return skill{
		name:     engine.SkillAgentManager,
		sections: []section{secRole, secHistory, secStep, secMemory},
		parse: func(answer string, _ *engine.ExecInput) (*engine.Output, error) {
			var ai engine.AgentInstruction
			if err := ExtractJSON(answer, "agent_instruction", &ai); err != nil {
				return nil, err
			}
			ai.Action = strings.TrimSpace(ai.Action)
			switch ai.Action {
			case engine.ActionInitNewAgent:
				if ai.AgentConfig == nil {
					return nil, errorf("<agent_instruction>: init_new_agent needs agent_config")
				}
			case engine.ActionAddTaskParticipant:
				if i := blankEntry(ai.Agents); i >= 0 {
					return nil, errorf("<agent_instruction>: agents[%d] is null or blank: each entry must be an agent_id", i)
				}
			default:
				return nil, errorf("<agent_instruction>: action %q: must be init_new_agent or add_task_participant", quoted(ai.Action))
			}
			return &engine.Output{AgentInstruction: &ai, Result: map[string]any{"agent_instruction": ai}}, nil
		},
	}
}
