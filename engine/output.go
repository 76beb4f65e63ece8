package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
)

// StepSpec is a step as skills plan it (spec §5.7; LLM_CONTRACT.md).
type StepSpec struct {
	StepIntention string `json:"step_intention"`
	Type          string `json:"type"`
	Executor      string `json:"executor"`
	TextContent   string `json:"text_content"`
}

// MemoryOp is one persistent-memory instruction (spec §5.10, §9.3.2):
// exactly one of Add (new text) or Delete (a timestamp key) is set.
type MemoryOp struct {
	Add    string `json:"add,omitempty"`
	Delete string `json:"delete,omitempty"`
}

// Output is what an executor returns: the step's result plus every change it
// asks for. The executing agent applies it (spec §2.5's table); executors
// never mutate state themselves.
//
// Every step's update_stage_agent_state ("working" on success, "failed" on
// failure, "finished" with a completion) and send_shared_info entries are
// derived by the engine from the step's outcome, so executors do not repeat
// them.
type Output struct {
	// Result becomes the step's execute_result (e.g. {"planned_step": …}).
	// Values stored here are never mutated afterwards.
	Result map[string]any
	// Err fails the step with this reason (kept in execute_result.error);
	// the other fields are still applied where they make sense (usage).
	Err error
	// Usage is what the step's LLM calls cost.
	Usage Usage

	// Memory ops apply to the agent's persistent memory.
	Memory []MemoryOp
	// AddSteps are appended to the agent's steps (add_step, spec §5.7).
	AddSteps []StepSpec
	// AddNextSteps are inserted before the next pending step
	// (add_next_step, spec §5.8), in the given order.
	AddNextSteps []StepSpec
	// GetMoreInfo is send_message's get_more_info branch (spec §3.7): a
	// decision step is inserted, then the same send_message step again.
	GetMoreInfo *StepSpec
	// ReactAction is process_message's react_action (spec §3.8): a decision
	// step is inserted.
	ReactAction *StepSpec
	// ToolInstruction is instruction_generation's call, written onto the
	// tool step it targets (spec §3.4).
	ToolInstruction *ToolInstruction

	// Completion is summary's text: the stage's completion_summary for this
	// agent (update_stage_agent_completion). Only it marks an agent
	// "finished" in a stage.
	Completion *string
	// SendMessage is send_message's message (spec §3.7). The engine fills
	// sender, task, waiting IDs and return_waiting_id.
	SendMessage *OutgoingMessage
	// TaskInstruction is task_manager's instruction (spec §3.9).
	TaskInstruction *TaskInstruction
	// AgentInstruction is agent_manager's instruction (spec §3.10).
	AgentInstruction *AgentInstruction
	// AskInfo is ask_info's query (spec §3.11); the answer comes back as a
	// message and the agent waits for it.
	AskInfo *AskInfoQuery
	// NeedToolDecision asks for a tool_decision step (spec §3.12).
	NeedToolDecision *ToolDecisionRequest
}

// ToolInstruction is a tool call for the tool step StepID (spec §3.4).
type ToolInstruction struct {
	StepID      string
	Instruction *ToolCall
}

// OutgoingMessage is the message as send_message's model wrote it (spec §3.7).
type OutgoingMessage struct {
	Receiver      StringList `json:"receiver"`
	Message       string     `json:"message"`
	StageRelative string     `json:"stage_relative"`
	NeedReply     bool       `json:"need_reply"`
	Waiting       bool       `json:"waiting"`
}

// Task instruction actions (spec §3.9, LLM_CONTRACT.md).
const (
	ActionAddTask     = "add_task"
	ActionAddStage    = "add_stage"
	ActionFinishStage = "finish_stage"
	ActionRetryStage  = "retry_stage"
	ActionFinishTask  = "finish_task"
	// ActionCancelTask ends a task as failed (an operator action beyond the spec).
	ActionCancelTask = "cancel_task"
	// ActionPauseTask and ActionResumeTask hold a task and let it go on
	// (operator actions beyond the spec).
	ActionPauseTask  = "pause_task"
	ActionResumeTask = "resume_task"
)

// Agent instruction actions (spec §3.10).
const (
	ActionInitNewAgent       = "init_new_agent"
	ActionAddTaskParticipant = "add_task_participant"
	// ActionPauseAgent and ActionResumeAgent hold the agents named in
	// Agents and let them go on (operator actions beyond the spec).
	ActionPauseAgent  = "pause_agent"
	ActionResumeAgent = "resume_agent"
)

// TaskInstruction is a task-management instruction (spec §3.9).
type TaskInstruction struct {
	Action string `json:"action"`
	// AgentID is who issues it; the engine fills it.
	AgentID string `json:"agent_id,omitempty"`

	TaskID        string `json:"task_id,omitempty"`
	TaskName      string `json:"task_name,omitempty"`
	TaskIntention string `json:"task_intention,omitempty"`
	// Manager optionally names the new task's manager (add_task); default:
	// the issuing agent when it can manage tasks, else the MAS manager.
	Manager string `json:"task_manager,omitempty"`
	// Budget sets the task's limits (add_task, set_budget; beyond the spec).
	Budget *BudgetLimits `json:"budget,omitempty"`

	Stages []StageSpec `json:"stages,omitempty"`

	StageID            string            `json:"stage_id,omitempty"`
	OldStageID         string            `json:"old_stage_id,omitempty"`
	NewStageIntention  string            `json:"new_stage_intention,omitempty"`
	NewAgentAllocation map[string]string `json:"new_agent_allocation,omitempty"`

	Summary string `json:"summary,omitempty"`
	// ExecutionState is how finish_task ends the task: "finished" (the
	// default) or "failed" when it cannot be completed (spec §3.9).
	ExecutionState string `json:"execution_state,omitempty"`
	// TraceParent is the W3C trace context add_task came with (never
	// stored or shown: the task keeps its own span's, TaskState.TraceParent).
	TraceParent string `json:"-"`
}

// StageSpec is a stage to add (spec §3.9 add_stage).
type StageSpec struct {
	StageIntention  string            `json:"stage_intention"`
	AgentAllocation map[string]string `json:"agent_allocation"`
}

// AgentInstruction is an agent-management instruction (spec §3.10).
type AgentInstruction struct {
	Action  string `json:"action"`
	AgentID string `json:"agent_id,omitempty"`

	AgentConfig *AgentConfig `json:"agent_config,omitempty"`

	TaskID string     `json:"task_id,omitempty"`
	Agents StringList `json:"agents,omitempty"`
}

// AgentConfig describes an agent to create: from a template (Template set,
// other fields override it) or entirely from the fields.
type AgentConfig struct {
	Template  string     `json:"template,omitempty"`
	Name      string     `json:"name,omitempty"`
	Role      string     `json:"role,omitempty"`
	Profile   string     `json:"profile,omitempty"`
	Skills    []string   `json:"skills,omitempty"`
	Tools     []string   `json:"tools,omitempty"`
	LLMConfig *LLMConfig `json:"llm_config,omitempty"`
}

// clone deep-copies the configuration.
func (c AgentConfig) clone() AgentConfig {
	c.Skills = slices.Clone(c.Skills)
	c.Tools = slices.Clone(c.Tools)
	if c.LLMConfig != nil {
		l := *c.LLMConfig
		if l.Temperature != nil {
			t := *l.Temperature
			l.Temperature = &t
		}
		c.LLMConfig = &l
	}
	return c
}

// Ask-info query types (spec §2.5, §3.11).
const (
	QueryManagedTaskAndStageInfo  = "managed_task_and_stage_info"
	QueryAssignedTaskAndStageInfo = "assigned_task_and_stage_info"
	QueryTaskInfo                 = "task_info"
	QueryStageInfo                = "stage_info"
	QueryAvailableAgentsConfig    = "available_agents_config"
	QueryAllAgents                = "all_agents"
	QueryTeamAgents               = "team_agents"
	QueryTaskAgents               = "task_agents"
	QueryStageAgents              = "stage_agents"
	QueryAgent                    = "agent"
	QuerySkillsAndTools           = "skills_and_tools"
)

// QueryTypes lists every ask_info query type in spec order.
var QueryTypes = []string{
	QueryManagedTaskAndStageInfo, QueryAssignedTaskAndStageInfo, QueryTaskInfo,
	QueryStageInfo, QueryAvailableAgentsConfig, QueryAllAgents, QueryTeamAgents,
	QueryTaskAgents, QueryStageAgents, QueryAgent, QuerySkillsAndTools,
}

// AskInfoQuery is an ask_info query (spec §3.11).
type AskInfoQuery struct {
	Type    string     `json:"type"`
	TaskID  string     `json:"task_id,omitempty"`
	StageID string     `json:"stage_id,omitempty"`
	TeamID  string     `json:"team_id,omitempty"`
	AgentID StringList `json:"agent_id,omitempty"`
	// StepID, with type agent, asks for one step of the agent with its
	// full result (a step the prompt budget folded, say).
	StepID string `json:"step_id,omitempty"`
}

// StringList is a list of strings that also accepts a lone string in JSON,
// as models often write one ID where a list is asked for.
type StringList []string

// UnmarshalJSON accepts ["a", "b"], "a" and null.
func (l *StringList) UnmarshalJSON(b []byte) error {
	if string(bytes.TrimSpace(b)) == "null" {
		*l = nil
		return nil
	}
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*l = StringList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("want a string or a list of strings")
	}
	*l = many
	return nil
}
