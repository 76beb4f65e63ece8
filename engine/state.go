package engine

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"
)

// Execution states of tasks, stages and steps (spec §1.1, §2.1, §2.2, §2.4).
const (
	StateInit     = "init"
	StatePending  = "pending"
	StateRunning  = "running"
	StateFinished = "finished"
	StateFailed   = "failed"
)

// States of an agent inside one stage (StageState.EveryAgentState, spec §2.2).
const (
	AgentIdle     = "idle"
	AgentWorking  = "working"
	AgentFinished = "finished"
	AgentFailed   = "failed"
)

// Working states of an agent as a whole (AgentState.WorkingState, spec §2.3).
const (
	WorkingIdle    = "idle"
	WorkingWorking = "working"
	WorkingWaiting = "waiting"
	// WorkingPaused: the agent, or every task it has steps in, is paused.
	WorkingPaused = "paused"
)

// Step types (spec §2.4).
const (
	StepSkill = "skill"
	StepTool  = "tool"
)

// Agent kinds.
const (
	KindLLM   = "llm"
	KindHuman = "human"
)

// NoRelative is the stage_relative / stage_id of messages and steps that do
// not belong to a stage (spec §3.7, §6.2.1).
const NoRelative = "no_relative"

// SystemSender is the sender_id of the engine's own notices (stage
// completion, instructions, ask_info answers): spec §2.2.1's
// "[TaskState系统通知]".
const SystemSender = "mas.system"

// TaskState is one task (spec §1.1 "Task State", §2.1).
type TaskState struct {
	TaskID        string `json:"task_id"`
	TaskName      string `json:"task_name"`
	TaskIntention string `json:"task_intention"`
	TaskManager   string `json:"task_manager"`

	TaskGroup      []string     `json:"task_group"`
	SharedInfoPool []SharedInfo `json:"shared_info_pool"`
	// CommunicationQueue holds messages accepted for the task but not yet
	// delivered to every receiver (spec §1.2). Delivery is immediate, so it is
	// normally empty; the durable store restores it after a crash.
	CommunicationQueue []Message `json:"communication_queue"`
	// SharedConversationPool is every message delivered in the task, in order
	// (spec §10.5). The spec's [{timestamp: Message}] shape is flattened to a
	// list of messages that carry their own timestamp.
	SharedConversationPool []Message `json:"shared_conversation_pool"`

	StageList      []StageState `json:"stage_list"`
	ExecutionState string       `json:"execution_state"`
	TaskSummary    string       `json:"task_summary"`

	// Fields beyond the spec.

	// Base marks the MAS base task, which never finishes (spec §1.1, §9.2).
	Base bool `json:"base,omitempty"`
	// Operator is the HumanAgent the task reports to (the one who handed it
	// over, or the base task's operator).
	Operator string `json:"operator,omitempty"`
	// SharedWith lists the operators the owner shared the task with
	// (visibility.go).
	SharedWith []string `json:"shared_with,omitempty"`
	// HandedOver marks a task someone else handed to its manager (add_task
	// by an operator): the manager was sent a start_task instruction.
	HandedOver bool `json:"handed_over,omitempty"`
	// Paused is set while an operator holds the task (pause_task): no new
	// step of it starts, its supervision and wait timeouts are suspended.
	// It survives restarts until resume_task.
	Paused   bool      `json:"paused,omitempty"`
	PausedAt time.Time `json:"paused_at,omitzero"`
	// PausedFor says why the MAS itself paused the task: PausedOutage,
	// its steps gave up waiting for the LLM endpoint (endpoint.go), or
	// PausedBudget, a budget of it is reached (budget_tokens.go). Such a pause
	// ends by itself: once the endpoint answers again, once the budget is
	// raised. It is empty when an operator holds the task (pause_task
	// takes either over).
	PausedFor string `json:"paused_for,omitempty"`
	// Budget is the task's token and cost limits and what counts against
	// them (budget_tokens.go).
	Budget TaskBudget `json:"budget,omitzero"`
	// EndedBy is the step (or agent) that ended the task.
	EndedBy string `json:"ended_by,omitempty"`
	// TakenReports is, for each agent, the step whose report the task
	// took last (sync.go): a restart gives the task only the reports an
	// agent stored after it (replayReports).
	TakenReports map[string]string `json:"taken_reports,omitempty"`
	Usage        Usage             `json:"usage"`
	CreatedAt    time.Time         `json:"created_at"`
	UpdatedAt    time.Time         `json:"updated_at"`
	EndedAt      time.Time         `json:"ended_at,omitzero"`
	// TraceParent is the W3C traceparent of the task's span (telemetry.go):
	// its steps' spans are its children. Empty when tracing was off.
	TraceParent string `json:"trace_parent,omitempty"`
}

// SharedInfo is one entry of a task's shared info pool (spec §2.1).
type SharedInfo struct {
	AgentID   string    `json:"agent_id"`
	Role      string    `json:"role"`
	StageID   string    `json:"stage_id"`
	StepID    string    `json:"step_id,omitempty"`
	Content   string    `json:"content"`
	Timestamp time.Time `json:"timestamp"`
}

// StageState is one stage of a task (spec §1.1 "Stage State", §2.2).
type StageState struct {
	TaskID          string            `json:"task_id"`
	StageID         string            `json:"stage_id"`
	StageIntention  string            `json:"stage_intention"`
	AgentAllocation map[string]string `json:"agent_allocation"`
	ExecutionState  string            `json:"execution_state"`
	// EveryAgentState is each allocated agent's state in this stage.
	EveryAgentState map[string]string `json:"every_agent_state"`
	// CompletionSummary is each agent's summary of its part (spec §2.2.1).
	CompletionSummary map[string]string `json:"completion_summary"`

	// Fields beyond the spec.

	// RetryOf is the stage this one retries (spec §2.2.2).
	RetryOf string `json:"retry_of,omitempty"`
	// EndedBy is the step (or agent) that ended the stage.
	EndedBy   string    `json:"ended_by,omitempty"`
	StartedAt time.Time `json:"started_at,omitzero"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
}

// StepState is one step of an agent (spec §1.1 "Step State", §2.4).
type StepState struct {
	TaskID        string `json:"task_id"`
	StageID       string `json:"stage_id"`
	AgentID       string `json:"agent_id"`
	StepID        string `json:"step_id"`
	StepIntention string `json:"step_intention"`
	// Type is StepSkill or StepTool.
	Type string `json:"type"`
	// Executor is a skill name, or a downstream MCP server name for tools.
	Executor       string `json:"executor"`
	ExecutionState string `json:"execution_state"`
	TextContent    string `json:"text_content"`
	// InstructionContent is a tool step's call, written by
	// instruction_generation (nil until then, and for skill steps).
	InstructionContent *ToolCall `json:"instruction_content"`
	// ExecuteResult records what the step produced or why it failed; the
	// agent's later reflections read it (spec §2.4).
	ExecuteResult map[string]any `json:"execute_result"`

	// Fields beyond the spec.

	// TargetStepID links an instruction_generation step to the tool step it
	// writes the call for, so insertions between them cannot misdirect it
	// (spec §3.4's race cannot happen).
	TargetStepID string `json:"target_step_id,omitempty"`
	// ReplyTo and ReturnWaitingID mark a send_message step that answers a
	// message: the reply always reaches ReplyTo and carries the waiting ID
	// the sender is blocked on (spec §6.2.1, §9.1.2).
	ReplyTo         string `json:"reply_to,omitempty"`
	ReturnWaitingID string `json:"return_waiting_id,omitempty"`
	// Usage is what the step's LLM calls cost.
	Usage      Usage     `json:"usage"`
	CreatedAt  time.Time `json:"created_at"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
}

// AgentStep is an agent's step list and the todo order of pending steps
// (spec §2.4 "AgentStep"). StepList is in execution order; TodoList holds
// the IDs of steps not yet run, next first.
type AgentStep struct {
	AgentID  string      `json:"agent_id"`
	TodoList []string    `json:"todo_list"`
	StepList []StepState `json:"step_list"`
}

// AgentState is everything that makes an agent (spec §1.1 "Agent State",
// §2.3): an agent can be rebuilt from it.
type AgentState struct {
	AgentID      string `json:"agent_id"`
	Name         string `json:"name"`
	Role         string `json:"role"`
	Profile      string `json:"profile"`
	WorkingState string `json:"working_state"`
	// LLMConfig exists only on LLM agents; it never holds a secret.
	LLMConfig *LLMConfig `json:"llm_config,omitempty"`
	// HumanConfig exists only on HumanAgents; it never holds a password.
	HumanConfig *HumanConfig `json:"human_config,omitempty"`
	// WorkingMemory is {task_id: {stage_id: [step_id…]}}: the agent's
	// unfinished tasks, stages and steps (spec §2.4.1). A task's map of
	// stages is replaced, never changed in place, and a stage's list only
	// grows at its end or is replaced (commitCopy shares them).
	WorkingMemory map[string]map[string][]string `json:"working_memory"`
	// PersistentMemory is {"%Y%m%dT%H%M%S" timestamp: markdown} (spec §9.3).
	PersistentMemory map[string]string `json:"persistent_memory"`
	// MemoryFull reports that a view of the agent's memory is full
	// (MemoryFullIn): stored, that some is; in a step's copy (stepMemory),
	// that the step's view is, which its prompt then says; read by an
	// operator, that its own or the base task's is (filterAgent).
	MemoryFull bool      `json:"memory_full,omitempty"`
	AgentStep  AgentStep `json:"agent_step"`
	// StepLock holds the waiting IDs the agent is blocked on (spec §9.1).
	StepLock []string `json:"step_lock"`
	Tools    []string `json:"tools"`
	Skills   []string `json:"skills"`
	// ConversationPool exists only on HumanAgents (spec §7.1).
	ConversationPool *ConversationPool `json:"conversation_pool,omitempty"`

	// Fields beyond the spec.

	Kind string `json:"kind"`
	// Template is the agent template it was made from, if any.
	Template string `json:"template,omitempty"`
	// MemoryTasks is {timestamp: task_id}: the task each PersistentMemory
	// entry was written in, kept in step with it (applyMemoryLocked), so
	// that an operator is shown only the entries of the tasks it sees
	// (filterAgent), and a step only those its task's operator sees
	// (stepMemory). An entry it lacks (written before entries recorded
	// their task, in a MAS of one operator) is shown to the default
	// operator, admins and unrestricted viewers only.
	MemoryTasks map[string]string `json:"persistent_memory_tasks,omitempty"`
	// MemoryFullIn names the views of the memory (System.memoryView: an
	// operator's ID, the base task's ID) whose last memory ops had an add
	// refused at the caps (Config.MemoryMaxEntries, MemoryMaxChars): the
	// steps there are told their memory is full until they consolidate.
	MemoryFullIn []string `json:"memory_full_in,omitempty"`
	// Waits details each StepLock entry: whom it waits for and until when.
	Waits []Wait `json:"step_lock_waits,omitempty"`
	// WaitingFor says what the agent waits for when its working_state is
	// "waiting" for another reason than its step lock: its running step's
	// LLM call is waiting out an outage of the endpoint or its task's
	// budget, its tool call an outage of its MCP server, or the step waits
	// for the operator's answer to its question (Ask).
	WaitingFor string `json:"waiting_for,omitempty"`
	// WaitingOn is what WaitingFor waits on, "llm_outage", "budget",
	// "tool_outage" (ToolOutage) or "operator", and WaitingIn the task of
	// the step whose call waits: who may read WaitingFor (filterAgent), and
	// what a restart, which ends the call, owes its operator
	// (recoverStepsLocked).
	WaitingOn string `json:"waiting_on,omitempty"`
	WaitingIn string `json:"waiting_in,omitempty"`
	// CallWaitsOn is, while the running tool step's call waits for the
	// operator's answer to a question (OperatorQuestion.BeforeCall: the
	// risk gate's approval, missing arguments), that question's message ID.
	// Stored before the question is asked and dropped, stored, before its
	// answer is used: a restart that finds it set knows the running step
	// made no call. On the agent, not the step (one step runs at a time):
	// every copy of a step is made of StepState, which one more string
	// took past a size class of Go's allocator (352 bytes), and the
	// planned steps' tail with it.
	CallWaitsOn string `json:"call_waits_on,omitempty"`
	// OwedOutageNotice is, on an operator's document, the message ID of
	// the notice it is owed that the LLM endpoint answers again: it was
	// told of an outage a call of its tasks waited out when the process
	// ended, and a restart ends such calls (keepOutagePromises). It is
	// stored until the operator takes that notice, in the same write, so
	// the promise outlives any number of crashes before the endpoint
	// answers, and a notice stored before a crash is not sent again.
	OwedOutageNotice string `json:"owed_outage_notice,omitempty"`
	// Paused is set while an operator holds the agent (pause_agent): it
	// starts no new step until resume_agent.
	Paused bool `json:"paused,omitempty"`
	// Received lists the IDs of the newest messages delivered to the agent,
	// so a message delivered again (after a restart) is taken once.
	Received []string `json:"received_messages,omitempty"`
	// Reports are the outcomes of the agent's last steps, stored with the
	// step's end until the step's task has stored them too: a restart
	// gives the task those it lacks (docs/engine.md "A step's end").
	Reports []StepReport `json:"step_reports,omitempty"`
	// StageCounts is what the agent ran in each stage it works in (and in
	// each task's steps outside any stage), for the stage budgets and the
	// message-chain limit, sorted by task and stage (CompareStageCounts).
	// It is stored so that a restart gives neither a stage its step
	// budget nor a conversation between agents its chain again. An entry
	// goes when its stage or task ends for the agent (finish_stage,
	// finish_task); a message taken in a stage that has ended makes it
	// again (the limits hold there too), so the list holds at most
	// Config.MaxStageCounts entries, those of ended stages and tasks
	// shed first (stage_counts.go).
	StageCounts []StageCount `json:"stage_counts,omitempty"`
	Usage       Usage        `json:"usage"`
	CreatedAt   time.Time    `json:"created_at"`
	UpdatedAt   time.Time    `json:"updated_at"`

	// BudgetDay is a HumanAgent's raise of its daily token budget
	// (budget_tokens.go).
	BudgetDay *BudgetDay `json:"budget_day,omitempty"`
}

// StageCount is what an agent ran in one stage of a task (StageID
// NoRelative: the task's steps outside any stage).
type StageCount struct {
	TaskID          string `json:"task_id"`
	StageID         string `json:"stage_id"`
	Steps           int    `json:"steps,omitempty"`
	Reflections     int    `json:"reflections,omitempty"`
	SummaryFailures int    `json:"summary_failures,omitempty"`
	// Chain is the Chain of the last message the agent took there: how
	// many agents' messages in a row led to it (0 after an operator's or
	// the engine's).
	Chain int `json:"chain,omitempty"`
}

// CompareStageCounts orders stage counts by task, then stage: the order of
// AgentState.StageCounts.
func CompareStageCounts(a, b StageCount) int {
	return cmp.Or(strings.Compare(a.TaskID, b.TaskID), strings.Compare(a.StageID, b.StageID))
}

// LLMConfig is an agent's model settings (spec §2.3 llm_config). API keys are
// never stored here: APIKeyEnv names an environment variable instead.
type LLMConfig struct {
	Model       string   `json:"model,omitempty"`
	Temperature *float32 `json:"temperature,omitempty"`
	MaxTokens   int      `json:"max_tokens,omitempty"`
}

// HumanConfig describes the operator behind a HumanAgent (spec §2.3).
type HumanConfig struct {
	Name string `json:"name,omitempty"`
}

// Wait is one engaged step-lock entry.
type Wait struct {
	WaitingID string `json:"waiting_id"`
	// For is the agent whose reply releases it; SystemSender for ask_info.
	For       string    `json:"for"`
	TaskID    string    `json:"task_id"`
	StageID   string    `json:"stage_id"`
	MessageID string    `json:"message_id,omitempty"`
	Since     time.Time `json:"since"`
	Deadline  time.Time `json:"deadline"`
}

// ConversationPool is a HumanAgent's view of its conversations (spec §7.1).
type ConversationPool struct {
	// ConversationPrivates maps the other agent's ID to the messages
	// exchanged with it, oldest first.
	ConversationPrivates map[string][]PrivateMessage `json:"conversation_privates"`
	// GlobalMessages are notices to the operator (spec §7.3).
	GlobalMessages []string `json:"global_messages"`
}

// PrivateMessage is one entry of a HumanAgent's private conversation (spec §7.1).
type PrivateMessage struct {
	SenderID        string    `json:"sender_id"`
	Content         string    `json:"content"`
	StageRelative   string    `json:"stage_relative"`
	Timestamp       time.Time `json:"timestamp"`
	NeedReply       bool      `json:"need_reply"`
	Waiting         bool      `json:"waiting"`
	ReturnWaitingID string    `json:"return_waiting_id,omitempty"`

	// Fields beyond the spec.

	TaskID    string `json:"task_id"`
	MessageID string `json:"message_id"`
	// Replied is set once the operator answered a message that needed a reply.
	Replied bool `json:"replied,omitempty"`
	// Expired is set when the sender stopped waiting for the reply (an
	// approval question whose time ran out): it no longer awaits one.
	Expired bool `json:"expired,omitempty"`
	// Shortened is set when the operator's document, past its bound, keeps
	// only the head of Content, with a note saying where the whole message
	// is (the task's conversation, bounds.go).
	Shortened bool `json:"shortened,omitempty"`
}

// clone returns a deep copy of the task.
func (t *TaskState) clone() TaskState {
	c := *t
	c.TaskGroup = slices.Clone(t.TaskGroup)
	c.SharedWith = slices.Clone(t.SharedWith)
	c.TakenReports = maps.Clone(t.TakenReports)
	c.Budget = t.Budget.clone()
	c.SharedInfoPool = slices.Clone(t.SharedInfoPool)
	c.CommunicationQueue = cloneMessages(t.CommunicationQueue)
	c.SharedConversationPool = cloneMessages(t.SharedConversationPool)
	c.StageList = make([]StageState, len(t.StageList))
	for i := range t.StageList {
		c.StageList[i] = t.StageList[i].clone()
	}
	return c
}

// clone returns a deep copy of the agent, its steps included.
func (a *AgentState) clone() AgentState { return a.copyState(false, nil) }

// commitCopy is the copy an agent's commit writes and publishes as the
// readers' snapshot: deep but for its ended steps' result and instruction
// maps, its working memory's tasks and the IDs it received, which it shares
// with the live state. They are never changed in place (bounds.go replaces
// an ended step's maps, rememberLocked a task's stages; received IDs are
// only appended or replaced), and readers get deep copies of the snapshot
// (clone), so sharing them is safe; it makes a commit of an agent with
// hundreds of ended steps and tasks (a manager of many tasks) cost in
// proportion to the rest. The copy's step list goes into the array of
// reuse, a retired snapshot's (ownerMu.reusable), when it has room.
func (a *AgentState) commitCopy(reuse *AgentState) AgentState {
	var into []StepState
	if reuse != nil {
		into = reuse.AgentStep.StepList
	}
	return a.copyState(true, into)
}

// copyState copies the agent (see clone and commitCopy), its steps into
// the array of into when it has room.
func (a *AgentState) copyState(shareEnded bool, into []StepState) AgentState {
	c := *a
	if a.LLMConfig != nil {
		l := *a.LLMConfig
		l.Temperature = clonePtr(l.Temperature)
		c.LLMConfig = &l
	}
	if a.HumanConfig != nil {
		h := *a.HumanConfig
		c.HumanConfig = &h
	}
	if shareEnded {
		// A task's stages are replaced, never changed in place
		// (rememberLocked): the commit copy shares them, as it does
		// ended steps, and the IDs received, which only grow at the end
		// or are replaced when trimmed (seenLocked).
		c.WorkingMemory = maps.Clone(a.WorkingMemory)
		c.Received = slices.Clip(a.Received)
	} else {
		c.WorkingMemory = make(map[string]map[string][]string, len(a.WorkingMemory))
		for t, stages := range a.WorkingMemory {
			m := make(map[string][]string, len(stages))
			for st, ids := range stages {
				m[st] = slices.Clone(ids)
			}
			c.WorkingMemory[t] = m
		}
		c.Received = slices.Clone(a.Received)
	}
	c.PersistentMemory = maps.Clone(a.PersistentMemory)
	c.MemoryTasks = maps.Clone(a.MemoryTasks)
	c.MemoryFullIn = slices.Clone(a.MemoryFullIn)
	c.AgentStep.TodoList = slices.Clone(a.AgentStep.TodoList)
	n := len(a.AgentStep.StepList)
	if cap(into) >= n {
		if len(into) > n {
			clear(into[n:]) // what it held past the list is kept alive no more
		}
		c.AgentStep.StepList = into[:n]
	} else {
		c.AgentStep.StepList = make([]StepState, n, n+n/8)
	}
	for i := range a.AgentStep.StepList {
		st := &a.AgentStep.StepList[i]
		if shareEnded && st.ended() {
			c.AgentStep.StepList[i] = *st
			continue
		}
		c.AgentStep.StepList[i] = st.clone()
	}
	c.StepLock = slices.Clone(a.StepLock)
	c.Reports = slices.Clone(a.Reports) // a report's Completion is never changed in place
	c.StageCounts = slices.Clone(a.StageCounts)
	c.Tools = slices.Clone(a.Tools)
	c.Skills = slices.Clone(a.Skills)
	c.Waits = slices.Clone(a.Waits)
	c.BudgetDay = clonePtr(a.BudgetDay)
	if a.ConversationPool != nil {
		p := ConversationPool{
			ConversationPrivates: make(map[string][]PrivateMessage, len(a.ConversationPool.ConversationPrivates)),
			GlobalMessages:       slices.Clone(a.ConversationPool.GlobalMessages),
		}
		for k, v := range a.ConversationPool.ConversationPrivates {
			p.ConversationPrivates[k] = slices.Clone(v)
		}
		c.ConversationPool = &p
	}
	return c
}

func (s *StageState) clone() StageState {
	c := *s
	c.AgentAllocation = maps.Clone(s.AgentAllocation)
	c.EveryAgentState = maps.Clone(s.EveryAgentState)
	c.CompletionSummary = maps.Clone(s.CompletionSummary)
	return c
}

// ended reports whether the step finished or failed: its maps are then
// never changed in place, only replaced (bounds.go).
func (s *StepState) ended() bool { return stateEnded(s.ExecutionState) }

// stateEnded reports whether an execution state (of a task, a stage or a
// step) is an end: finished or failed.
func stateEnded(state string) bool { return state == StateFinished || state == StateFailed }

func (s *StepState) clone() StepState {
	c := *s
	c.InstructionContent = s.InstructionContent.Clone()
	c.ExecuteResult = cloneJSONMap(s.ExecuteResult)
	return c
}

func cloneMessages(ms []Message) []Message {
	if ms == nil {
		return nil
	}
	out := make([]Message, len(ms))
	for i := range ms {
		out[i] = ms[i].clone()
	}
	return out
}

// cloneJSONMap deep-copies a JSON-shaped map (maps, slices and scalars, as
// execute_result and a tool call's arguments always are).
func cloneJSONMap(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = cloneJSONValue(v)
	}
	return out
}

func cloneJSONValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		return cloneJSONMap(x)
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = cloneJSONValue(x[i])
		}
		return out
	default:
		return v
	}
}
