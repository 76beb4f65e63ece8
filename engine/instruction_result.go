package engine

import "encoding/json"

// What task and agent instructions report (spec §3.9, §3.10): the IDs they
// created or ended. A result is shown to the operator (manage_task,
// manage_agent, the monitor), kept in the issuing step's execute_result
// ("instruction_result") and in the trail, all as JSON.
//
// Each action has its own result type. Its fields are declared in the
// order of their JSON names, and none is omitted when empty: the JSON is
// byte for byte the map these types replaced (encoding/json sorts a map's
// keys), nulls included.

// TaskInstructionResult is what a task instruction did: the field of its
// action is set and the others are nil. Its JSON is that field's.
type TaskInstructionResult struct {
	AddTask     *AddTaskResult     // add_task
	AddStage    *AddStageResult    // add_stage
	FinishStage *FinishStageResult // finish_stage
	RetryStage  *RetryStageResult  // retry_stage
	EndTask     *EndTaskResult     // finish_task, cancel_task
	PauseTask   *PauseTaskResult   // pause_task, resume_task
	SetBudget   *SetBudgetResult   // set_budget
}

// MarshalJSON encodes the result of the action (null for none).
func (r TaskInstructionResult) MarshalJSON() ([]byte, error) {
	switch {
	case r.AddTask != nil:
		return json.Marshal(r.AddTask)
	case r.AddStage != nil:
		return json.Marshal(r.AddStage)
	case r.FinishStage != nil:
		return json.Marshal(r.FinishStage)
	case r.RetryStage != nil:
		return json.Marshal(r.RetryStage)
	case r.EndTask != nil:
		return json.Marshal(r.EndTask)
	case r.PauseTask != nil:
		return json.Marshal(r.PauseTask)
	case r.SetBudget != nil:
		return json.Marshal(r.SetBudget)
	}
	return []byte("null"), nil
}

// AddTaskResult is add_task's result: the new task and its manager.
type AddTaskResult struct {
	TaskID      string `json:"task_id"`
	TaskManager string `json:"task_manager"`
}

// AddStageResult is add_stage's result: the new stages, in order.
type AddStageResult struct {
	StageIDs []string `json:"stage_ids"`
	TaskID   string   `json:"task_id"`
}

// FinishStageResult is finish_stage's result.
type FinishStageResult struct {
	FinishedStage string `json:"finished_stage"`
	// NextStage is the stage that runs now; nil (null) when none is left
	// and the manager judges the whole task (spec §2.1.1).
	NextStage *string `json:"next_stage"`
	TaskID    string  `json:"task_id"`
}

// RetryStageResult is retry_stage's result: the failed stage and the
// corrected one that runs instead (spec §2.2.2).
type RetryStageResult struct {
	FailedStage string `json:"failed_stage"`
	NewStage    string `json:"new_stage"`
	TaskID      string `json:"task_id"`
}

// EndTaskResult is finish_task's and cancel_task's result: how the task
// ended.
type EndTaskResult struct {
	ExecutionState string `json:"execution_state"`
	TaskID         string `json:"task_id"`
}

// PauseTaskResult is pause_task's and resume_task's result; Changed is
// false when the task already was as asked.
type PauseTaskResult struct {
	Changed bool   `json:"changed"`
	Paused  bool   `json:"paused"`
	TaskID  string `json:"task_id"`
}

// SetBudgetResult is set_budget's result: the task's limits now, whether
// it is paused, and why it is held ("" when it is not).
type SetBudgetResult struct {
	Budget TaskBudget `json:"budget"`
	Held   string     `json:"held"`
	Paused bool       `json:"paused"`
	TaskID string     `json:"task_id"`
}

// AgentInstructionResult is what an agent instruction did: the field of
// its action is set and the others are nil. Its JSON is that field's.
type AgentInstructionResult struct {
	InitNewAgent       *NewAgentResult        // init_new_agent
	AddTaskParticipant *AddParticipantsResult // add_task_participant
	PauseAgent         *PauseAgentsResult     // pause_agent, resume_agent
}

// MarshalJSON encodes the result of the action (null for none).
func (r AgentInstructionResult) MarshalJSON() ([]byte, error) {
	switch {
	case r.InitNewAgent != nil:
		return json.Marshal(r.InitNewAgent)
	case r.AddTaskParticipant != nil:
		return json.Marshal(r.AddTaskParticipant)
	case r.PauseAgent != nil:
		return json.Marshal(r.PauseAgent)
	}
	return []byte("null"), nil
}

// NewAgentResult is init_new_agent's result: the agent created.
type NewAgentResult struct {
	AgentID string `json:"agent_id"`
	Name    string `json:"name"`
	Role    string `json:"role"`
}

// AddParticipantsResult is add_task_participant's result: the agents new
// to the task group (nil when all were in it) and the group now.
type AddParticipantsResult struct {
	Added     []string `json:"added"`
	TaskGroup []string `json:"task_group"`
	TaskID    string   `json:"task_id"`
}

// PauseAgentsResult is pause_agent's and resume_agent's result: the agents
// named, and those that changed (nil when none did).
type PauseAgentsResult struct {
	Agents  []string `json:"agents"`
	Changed []string `json:"changed"`
	Paused  bool     `json:"paused"`
}
