package engine

import (
	"context"

	"github.com/mas-mcp/mas-mcp/llm"
)

// Executor runs one kind of step: a skill (registered under the skill's
// name) or the tool executor (every step of type "tool", spec §4.2, §8.2).
// Skills and the downstream tool executor implement it outside this package.
//
// Execute must not mutate the engine's state: it returns an Output that the
// agent applies. A nil Output fails the step. Execute must return promptly
// once ctx is done (the step's stage or task ended, or the MAS shuts down).
type Executor interface {
	Execute(ctx context.Context, in *ExecInput) *Output
}

// ExecutorFunc adapts a function to Executor.
type ExecutorFunc func(ctx context.Context, in *ExecInput) *Output

// Execute calls f.
func (f ExecutorFunc) Execute(ctx context.Context, in *ExecInput) *Output { return f(ctx, in) }

// ExecInput is an executor's view of the step to run.
type ExecInput struct {
	// Agent is a copy of the agent's state when the step started, to read
	// only. Its step list holds only the steps of Step's task and stage,
	// in order, its working memory only Step's task, and its persistent
	// memory only the entries the operator who owns Step's task may see
	// (stepMemory); it lists no received message IDs (the engine's
	// bookkeeping). The ended steps share their result and tool call maps
	// with the agent (the engine replaces those maps, never changes them
	// in place); the rest is copied deeply. The step list is valid until
	// Execute returns: the next step's view reuses its array, so an
	// executor that keeps steps for later copies them.
	Agent AgentState
	// Step is a copy of the step, already marked running.
	Step StepState
	// View reads the rest of the MAS (snapshots).
	View View
	// Operator asks the step's task operator a question and waits for the
	// answer (the downstream risk gate's approvals). Never nil for a step
	// the engine runs.
	Operator Operator
	// ServerOutage is told when a tool step's call waits out an outage of
	// its MCP server (Step.Executor): the tool executor could not reach
	// it and keeps trying, within the server's outage window. Began is
	// told once, when the call starts waiting; Ended once after that, how
	// the wait ended (recovered: the server was reached; gave up: the
	// window passed; left: the step's context ended). The engine shows
	// the agent waiting meanwhile and tells the task's operator which
	// server is down (tool_outage.go). Both are called on the step's
	// goroutine and return promptly. Set for every tool step the engine
	// runs; nil for skill steps.
	ServerOutage llm.OutageObserver
}

// Operator lets an executor ask the operator of a task a question that
// blocks its running step until answered; *System implements it. Ask
// returns ErrNoAnswer when q.Timeout (default: the MAS's WaitTimeout;
// NoQuestionTimeout: none) passes unanswered, and ctx's error when ctx
// ends first.
type Operator interface {
	Ask(ctx context.Context, q OperatorQuestion) (Answer, error)
}

// View gives executors read-only snapshots of tasks and agents.
type View interface {
	// Task returns a snapshot of a task (its whole logs included: prefer
	// Stage where a stage is enough).
	Task(taskID string) (TaskState, bool)
	// Stage returns a snapshot of one stage of a task.
	Stage(taskID, stageID string) (StageState, bool)
	// AgentBrief returns an agent's public profile.
	AgentBrief(agentID string) (AgentBrief, bool)
}

// AgentBrief is an agent's public profile (what ask_info shows of others).
type AgentBrief struct {
	AgentID      string   `json:"agent_id"`
	Name         string   `json:"name"`
	Role         string   `json:"role"`
	Profile      string   `json:"profile"`
	Kind         string   `json:"kind"`
	WorkingState string   `json:"working_state"`
	Skills       []string `json:"skills"`
	Tools        []string `json:"tools"`
}

// ToolCatalog describes the downstream MCP servers agents may use.
type ToolCatalog interface {
	// ToolGuides maps each configured server name to its use guide (the
	// description agents see, spec §4.2 level 1).
	ToolGuides() map[string]string
}

// Texts renders the engine's own texts (notices, engine-added steps) in the
// configured language; *prompts.Set implements it.
type Texts interface {
	Text(key string, data any) string
}
