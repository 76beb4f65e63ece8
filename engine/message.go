package engine

import (
	"maps"
	"slices"
	"time"
)

// Message is the MAS's one message shape (spec §8.3, §9.1.1).
type Message struct {
	TaskID   string   `json:"task_id"`
	SenderID string   `json:"sender_id"`
	Receiver []string `json:"receiver"`
	Message  string   `json:"message"`
	// StageRelative is a stage ID or NoRelative.
	StageRelative string `json:"stage_relative"`
	NeedReply     bool   `json:"need_reply"`
	// Waiting holds one waiting ID per receiver (same order) when the sender
	// blocks until each replies; nil when it does not wait.
	Waiting []string `json:"waiting"`
	// ReturnWaitingID is set on a reply to a message that waits: the waiting
	// ID this receiver was given.
	ReturnWaitingID string `json:"return_waiting_id,omitempty"`

	// Fields beyond the spec.

	MessageID string    `json:"message_id"`
	Timestamp time.Time `json:"timestamp"`
	// Instruction carries the engine's instructions to an agent (spec
	// §6.2.2). The spec wraps them in <instruction> tags inside the text;
	// a typed field means no agent-written text can ever be taken for an
	// instruction.
	Instruction *Instruction `json:"instruction,omitempty"`
	// Chain counts the agents' messages in a row that led to this one,
	// itself included, since an operator or the engine last spoke there
	// (their messages have none): a message an LLM agent sends carries one
	// more than the last message it took in that task and stage. It bounds
	// conversations between agents that would feed each other for ever
	// (Config.MessageChainLimit).
	Chain int `json:"chain,omitempty"`
	// NotNewInput marks an engine message that is no new input for its
	// receiver: the answer to a step of its own (ask_info's answer, its
	// tool decision) and supervision's notices (which come because a
	// budget stopped it). It neither starts a new chain nor gives the
	// steps outside any stage their budget again: an agent asking in a
	// loop, or stopped by that budget, would get both for ever.
	NotNewInput bool `json:"not_new_input,omitempty"`
	// Decision is the operator's structured answer to an approval question
	// (the risk gate's AskOperator): approve or deny, a note, and
	// optionally edited arguments. The text says the same for people.
	Decision *Decision `json:"decision,omitempty"`
	// ReplyTo is, on an operator's message that answers a question in its
	// inbox, that question's message ID: the restore marks the question
	// replied from it when a crash came between the answer's write and the
	// operator's document's (a question that did not wait has no waiting ID
	// for the answer to name).
	ReplyTo string `json:"reply_to,omitempty"`
}

// Decision is an operator's approve/deny of a risky tool call.
type Decision struct {
	Approve bool   `json:"approve"`
	Note    string `json:"note,omitempty"`
	// Arguments, when set, replace the call's arguments.
	Arguments map[string]any `json:"arguments,omitempty"`
}

func (m *Message) clone() Message {
	c := *m
	c.Receiver = slices.Clone(m.Receiver)
	c.Waiting = slices.Clone(m.Waiting)
	c.Instruction = m.Instruction.clone()
	if m.Decision != nil {
		d := *m.Decision
		d.Arguments = maps.Clone(d.Arguments)
		c.Decision = &d
	}
	return c
}

// clone deep-copies an instruction (nil stays nil).
func (in *Instruction) clone() *Instruction {
	if in == nil {
		return nil
	}
	return &Instruction{
		StartTask:           clonePtr(in.StartTask),
		StartStage:          clonePtr(in.StartStage),
		FinishStage:         clonePtr(in.FinishStage),
		FinishTask:          clonePtr(in.FinishTask),
		UpdateWorkingMemory: clonePtr(in.UpdateWorkingMemory),
		AddToolDecision:     clonePtr(in.AddToolDecision),
	}
}

// clonePtr copies the value behind a pointer to a flat struct.
func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}

// waitingIDFor returns the waiting ID the message holds for receiver, if any.
func (m *Message) waitingIDFor(receiver string) string {
	if m.Waiting == nil {
		return ""
	}
	i := slices.Index(m.Receiver, receiver)
	if i < 0 || i >= len(m.Waiting) {
		return ""
	}
	return m.Waiting[i]
}

// Instruction is one engine instruction carried by a message (spec §6.2.2).
// Exactly one field is set.
type Instruction struct {
	// StartTask hands a new task to its manager: it gets a planning step to
	// staff and stage the task (beyond the spec: the spec's manager only ever
	// creates tasks itself).
	StartTask *TaskRef `json:"start_task,omitempty"`
	// StartStage makes an allocated agent plan its part of a stage.
	StartStage *StartStage `json:"start_stage,omitempty"`
	// FinishStage clears the stage's steps and working memory (§2.4.1).
	FinishStage *StageRef `json:"finish_stage,omitempty"`
	// FinishTask clears the task's steps and working memory.
	FinishTask *TaskRef `json:"finish_task,omitempty"`
	// UpdateWorkingMemory records a task (and stage) in working memory.
	UpdateWorkingMemory *StageRef `json:"update_working_memory,omitempty"`
	// AddToolDecision inserts a tool_decision step (spec §3.12).
	AddToolDecision *ToolDecisionRequest `json:"add_tool_decision,omitempty"`
}

// TaskRef names a task.
type TaskRef struct {
	TaskID string `json:"task_id"`
}

// StageRef names a stage of a task; StageID may be empty where "the whole
// task" is meant (update_working_memory).
type StageRef struct {
	TaskID  string `json:"task_id"`
	StageID string `json:"stage_id"`
	// EndedBy is, on finish_stage, the step that ended the stage: when it
	// is the receiver's running step (the manager's task_manager step), it
	// and the steps it planned are kept — they carry on the manager's work.
	EndedBy string `json:"ended_by,omitempty"`
}

// StartStage is the start_stage instruction: the stage and this agent's goal.
type StartStage struct {
	TaskID         string `json:"task_id"`
	StageID        string `json:"stage_id"`
	StageIntention string `json:"stage_intention"`
	Goal           string `json:"goal"`
}

// ToolDecisionRequest asks an agent to decide on a long-tail tool's next call
// (spec §3.12 need_tool_decision / add_tool_decision).
type ToolDecisionRequest struct {
	TaskID        string `json:"task_id"`
	StageID       string `json:"stage_id"`
	AgentID       string `json:"agent_id"`
	ToolName      string `json:"tool_name"`
	StepIntention string `json:"step_intention"`
	TextContent   string `json:"text_content"`
}
