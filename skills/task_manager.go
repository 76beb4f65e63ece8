package skills

import (
	"slices"
	"strings"

	"github.com/mas-mcp/mas-mcp/engine"
)

var taskActions = []string{
	engine.ActionAddTask, engine.ActionAddStage, engine.ActionFinishStage,
	engine.ActionRetryStage, engine.ActionFinishTask,
}

// taskManager issues one task-management instruction (spec §3.9); the engine
// checks it against the state and carries it out. Prompt: system → role →
// (goal → rules) → history → memory.
func taskManager() skill {
	return skill{
		name:     engine.SkillTaskManager,
		sections: []section{secRole, secHistory, secStep, secMemory},
		parse: func(answer string, _ *engine.ExecInput) (*engine.Output, error) {
			var ti engine.TaskInstruction
			if err := ExtractJSON(answer, "task_instruction", &ti); err != nil {
				return nil, err
			}
			ti.Action = strings.TrimSpace(ti.Action)
			if !slices.Contains(taskActions, ti.Action) {
				return nil, errorf("<task_instruction>: action %q: must be one of %s", quoted(ti.Action), strings.Join(taskActions, ", "))
			}
			return &engine.Output{TaskInstruction: &ti, Result: map[string]any{"task_instruction": ti}}, nil
		},
	}
}
