package engine

import (
	"encoding/json"
	"testing"
)

// TestInstructionResultJSON checks that every instruction result encodes
// as the map it replaced did: keys in sorted order (encoding/json sorts a
// map's), every key present, nulls kept.
func TestInstructionResultJSON(t *testing.T) {
	next := "s-2"
	tests := []struct {
		name string
		res  any
		want string
	}{
		{"add_task", TaskInstructionResult{AddTask: &AddTaskResult{TaskID: "t", TaskManager: "m"}},
			`{"task_id":"t","task_manager":"m"}`},
		{"add_stage", TaskInstructionResult{AddStage: &AddStageResult{StageIDs: []string{"s-1", "s-2"}, TaskID: "t"}},
			`{"stage_ids":["s-1","s-2"],"task_id":"t"}`},
		{"finish_stage", TaskInstructionResult{FinishStage: &FinishStageResult{FinishedStage: "s-1", NextStage: &next, TaskID: "t"}},
			`{"finished_stage":"s-1","next_stage":"s-2","task_id":"t"}`},
		{"finish_stage, the last", TaskInstructionResult{FinishStage: &FinishStageResult{FinishedStage: "s-2", TaskID: "t"}},
			`{"finished_stage":"s-2","next_stage":null,"task_id":"t"}`},
		{"retry_stage", TaskInstructionResult{RetryStage: &RetryStageResult{FailedStage: "s-1", NewStage: "s-3", TaskID: "t"}},
			`{"failed_stage":"s-1","new_stage":"s-3","task_id":"t"}`},
		{"finish_task", TaskInstructionResult{EndTask: &EndTaskResult{ExecutionState: StateFinished, TaskID: "t"}},
			`{"execution_state":"finished","task_id":"t"}`},
		{"resume_task, unchanged", TaskInstructionResult{PauseTask: &PauseTaskResult{TaskID: "t"}},
			`{"changed":false,"paused":false,"task_id":"t"}`},
		{"set_budget", TaskInstructionResult{SetBudget: &SetBudgetResult{Budget: TaskBudget{Tokens: 100}, TaskID: "t"}},
			`{"budget":{"tokens":100},"held":"","paused":false,"task_id":"t"}`},
		{"refused", TaskInstructionResult{}, `null`},
		{"init_new_agent", AgentInstructionResult{InitNewAgent: &NewAgentResult{AgentID: "a", Name: "n", Role: "r"}},
			`{"agent_id":"a","name":"n","role":"r"}`},
		{"add_task_participant, none new", AgentInstructionResult{AddTaskParticipant: &AddParticipantsResult{TaskGroup: []string{"m"}, TaskID: "t"}},
			`{"added":null,"task_group":["m"],"task_id":"t"}`},
		{"pause_agent", AgentInstructionResult{PauseAgent: &PauseAgentsResult{Agents: []string{"a"}, Changed: []string{"a"}, Paused: true}},
			`{"agents":["a"],"changed":["a"],"paused":true}`},
		{"refused agent instruction", AgentInstructionResult{}, `null`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.res)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Errorf("JSON %s, want %s", b, tt.want)
			}
			// Encoded as a map, as these results were: the same bytes.
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			mb, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			if string(mb) != string(b) {
				t.Errorf("JSON %s, as a map %s", b, mb)
			}
		})
	}
}
