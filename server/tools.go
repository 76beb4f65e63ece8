package server

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/telemetry"
)

// Error contract (docs/errors.md): a failure the caller can act on (a bad
// ID, a missing field, a task that has ended) is a tool result with isError
// and a message naming the field and the problem; protocol errors are for
// protocol problems only.

// tool is one tool: its definition and the function that registers it with
// its typed handler.
type tool struct {
	def *mcp.Tool
	add func(*mcp.Server, *mcp.Tool, *Limits)
}

// tools lists every tool of the server (clients see them sorted by name).
func (s *Server) tools() []tool {
	return []tool{
		withApp(defTool("add_task", "Hand over a task",
			"Hand the multi-agent system a task. Its manager agent staffs it with agents and splits it into stages; this returns at once with the task's ID and resource URI (it never waits for the agents' work). Watch progress with wait_for_updates, read_resource or a subscription to the task's resource; agents' questions arrive in get_inbox.",
			writes(false), s.addTask)),
		withApp(defTool("show_task", "Show a task",
			"Show one task as it is now: its stages, each agent's part and newest steps, and the agents' questions awaiting your reply (task_id; default: your newest task). Hosts that render MCP Apps show it as a live view in which you can answer the agents; others get the same facts as text and structured data.",
			readOnly(), s.showTask)),
		defTool("send_message", "Message agents",
			"Send a message as the operator to agents of a task. To answer an agent's question, send to that agent: a pending question from it (see get_inbox) is answered automatically, and an agent blocked waiting for your reply resumes. need_reply asks the receivers to answer; waiting marks it urgent (they answer before anything else).",
			writes(false), s.sendMessage),
		defTool("ask_info", "Query the system",
			"Look up the team's current state (never waits for agents); returns markdown and the same facts as structured data. Pick type: tasks (every task: IDs, names, states), task_info (task_id), stage_info (task_id, stage_id), task_agents (task_id), stage_agents (task_id, stage_id), agent (agent_id: one ID or a list), all_agents, team_agents, available_agents_config (agent templates for manage_agent), skills_and_tools, managed_task_and_stage_info and assigned_task_and_stage_info (what you manage or are assigned).",
			readOnly(), s.askInfo),
		defTool("get_inbox", "Read the operator's inbox",
			"The messages agents sent to you (the operator), those awaiting your reply first (urgent ones first), then the newest. Answer one with send_message to its sender.",
			readOnly(), s.getInbox),
		defTool("answer_approval", "Approve or deny a tool call",
			"Answer an approval question in your inbox (an agent wants to call a tool that may change things outside the MAS): approve true lets the call run, false refuses it; note (optional) is shown to the agent; arguments (optional, approve only) replace the call's arguments. message_id is the question's, from get_inbox. A free-text reply with send_message still works.",
			writes(false), s.answerApproval),
		defTool("wait_for_updates", "Wait for changes",
			"Long-poll for changes of the MAS, for hosts that cannot subscribe to resources: returns the events after cursor (0 for the latest), waiting up to timeout_seconds for the first one. Pass the returned cursor to the next call. Sends progress notifications while it waits.",
			readOnly(), s.waitForUpdates),
		defTool("manage_task", "Manage a task",
			"Steer a task yourself instead of through its manager agent. Pick action: add_stage appends stages (stages: each a stage_intention and an agent_allocation {agent_id: goal}); finish_stage ends the running stage (stage_id); retry_stage replaces a stage that went wrong with a corrected one (old_stage_id, new_stage_intention, new_agent_allocation); finish_task ends the task with its result (summary, required); cancel_task stops it (summary optional); pause_task holds it (no new step starts, steps already running finish, its supervision and wait timeouts wait too, and it stays paused across restarts) until resume_task; set_budget sets its token and cost limits (budget: tokens, agent_tokens per agent, cost; 0: no limit) and resumes it when it was paused for its budget; share lets another operator (operator: that operator's agent_id) manage it, message inside it and see it — only a task's owner, operators it is shared with and admins may act on it. Every action needs task_id. Find IDs with ask_info (tasks, task_info) or the task's resource.",
			destructive(), s.manageTask),
		defTool("manage_agent", "Manage agents",
			"Create agents and add them to a task. Pick action: init_new_agent creates an agent (agent_config: either template, the name of a template from ask_info available_agents_config, or name, role, profile, skills and tools) and returns its agent_id; add_task_participant adds agents (agents: one agent_id or a list) to a task's group (task_id), so stages can allocate work to them; pause_agent holds agents (agents) — they start no new step — until resume_agent; interrupt stops the step an agent (agent_id) is running now (an LLM call or a tool call is cancelled) and makes your instruction (instruction, required; reason optional) its next step, so it re-plans; cancel_step cancels one running tool call (agent_id, step_id) and the agent carries on as after a failed step.",
			writes(false), s.manageAgent),
		defTool("read_resource", "Read a resource",
			"Read any of the server's resources by URI (for hosts that do not read resources themselves): mas://tasks, mas://tasks/{task_id}, mas://tasks/{task_id}/stages/{stage_id}, mas://tasks/{task_id}/conversation, mas://agents, mas://agents/{agent_id}, mas://agents/{agent_id}/steps, mas://operators/{agent_id}/inbox, mas://catalog, mas://tasks/{task_id}/trail (?cursor=…&agent=…&step=…&kind=…), mas://tasks/{task_id}/steps/{step_id}.",
			readOnly(), s.readResourceTool),
		s.getTrailTool(),
	}
}

func (s *Server) addTools() {
	for _, t := range s.tools() {
		t.add(s.mcp, t.def, &s.cfg.Limits)
	}
}

// defTool builds a tool whose handler takes In and returns Out, once In is
// within the input limits (inputs.go); addTool (toolcall.go) registers it
// with its schemas marshalled and resolved once.
func defTool[In, Out any](name, title, desc string, ann *mcp.ToolAnnotations, h mcp.ToolHandlerFor[In, Out]) tool {
	ann.Title = title
	return tool{
		def: &mcp.Tool{Name: name, Title: title, Description: desc, Annotations: ann,
			InputSchema: schemaOf[In](), OutputSchema: schemaOf[Out]()},
		add: func(srv *mcp.Server, def *mcp.Tool, l *Limits) { addTool(srv, def, checked(l, h)) },
	}
}

func readOnly() *mcp.ToolAnnotations {
	return &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: new(false)}
}

func writes(idempotent bool) *mcp.ToolAnnotations {
	return &mcp.ToolAnnotations{DestructiveHint: new(false), IdempotentHint: idempotent, OpenWorldHint: new(false)}
}

func destructive() *mcp.ToolAnnotations {
	return &mcp.ToolAnnotations{DestructiveHint: new(true), OpenWorldHint: new(false)}
}

// textResult is a result whose text is the given summary (the structured
// output travels as structuredContent).
func textResult(format string, a ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, a...)}}}
}

// jsonText renders v as indented JSON for a result's text.
func jsonText(v any) string {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// --- add_task

// AddTaskIn is add_task's input.
type AddTaskIn struct {
	TaskName      string               `json:"task_name" jsonschema:"a short name for the task"`
	TaskIntention string               `json:"task_intention" jsonschema:"what the task must achieve, in detail; the manager plans the stages from it"`
	TaskManager   string               `json:"task_manager,omitempty" jsonschema:"agent_id of the manager agent to give it to; default: the MAS's manager"`
	Budget        *engine.BudgetLimits `json:"budget,omitempty" jsonschema:"the task's limits, overriding the server's defaults; the task pauses when one is reached and you are asked to raise it or end the task"`
}

// AddTaskOut is add_task's output.
type AddTaskOut struct {
	TaskID      string `json:"task_id"`
	TaskManager string `json:"task_manager"`
	ResourceURI string `json:"resource_uri"`
}

func (s *Server) addTask(ctx context.Context, req *mcp.CallToolRequest, in AddTaskIn) (*mcp.CallToolResult, AddTaskOut, error) {
	op := s.operator(ctx, req.Extra)
	done, err := s.quota.admit(op)
	if err != nil {
		return nil, AddTaskOut{}, err
	}
	id, err := s.sys.AddTask(op, engine.AddTaskRequest{TaskName: in.TaskName, TaskIntention: in.TaskIntention, Manager: in.TaskManager, Budget: in.Budget, TraceParent: telemetry.TraceParent(ctx)})
	done(err == nil)
	if err != nil {
		return nil, AddTaskOut{}, err
	}
	t, _ := s.sys.Task(id)
	out := AddTaskOut{TaskID: id, TaskManager: t.TaskManager, ResourceURI: taskURI(id)}
	return textResult("Task %q handed over: task_id %s, manager %s. Follow it at %s (or with wait_for_updates).",
		t.TaskName, id, t.TaskManager, out.ResourceURI), out, nil
}

// --- send_message

// SendMessageIn is send_message's input.
type SendMessageIn struct {
	TaskID        string            `json:"task_id" jsonschema:"the task the conversation belongs to (the base task for general requests to the manager)"`
	Receiver      engine.StringList `json:"receiver" jsonschema:"agent_id of the receiver, or a list of them; members of the task's group (ask_info task_agents)"`
	Content       string            `json:"content" jsonschema:"the message text"`
	StageRelative string            `json:"stage_relative,omitempty" jsonschema:"a stage_id of the task if the message concerns that stage; default no_relative"`
	NeedReply     *bool             `json:"need_reply,omitempty" jsonschema:"whether the receivers must answer (default: false when this answers their pending question, else true)"`
	Waiting       bool              `json:"waiting,omitempty" jsonschema:"urgent: the receivers answer before any other step (default false)"`
	ReplyTo       string            `json:"reply_to,omitempty" jsonschema:"message_id of the inbox message this answers; default: the oldest unanswered one from each receiver"`
}

// SentMessage is one message sent (one per receiver).
type SentMessage struct {
	MessageID string `json:"message_id"`
	Receiver  string `json:"receiver"`
	// Answers is set when the message answered one that was waiting for
	// the operator's reply.
	Answers bool `json:"answers_waiting_message,omitempty"`
}

// SendMessageOut is send_message's output.
type SendMessageOut struct {
	Messages []SentMessage `json:"messages"`
}

func (s *Server) sendMessage(ctx context.Context, req *mcp.CallToolRequest, in SendMessageIn) (*mcp.CallToolResult, SendMessageOut, error) {
	op := s.operator(ctx, req.Extra)
	needReply := s.defaultNeedReply(op, in)
	msgs, err := s.sys.HumanSend(op, engine.HumanMessage{
		TaskID: in.TaskID, Receiver: []string(in.Receiver), Content: in.Content, StageRelative: in.StageRelative,
		NeedReply: needReply, Waiting: in.Waiting, ReplyTo: in.ReplyTo,
	})
	if err != nil {
		return nil, SendMessageOut{}, err
	}
	out := SendMessageOut{Messages: []SentMessage{}}
	var lines []string
	for _, m := range msgs {
		sm := SentMessage{MessageID: m.MessageID, Receiver: m.Receiver[0], Answers: m.ReturnWaitingID != ""}
		out.Messages = append(out.Messages, sm)
		line := fmt.Sprintf("- to %s: message_id %s", sm.Receiver, sm.MessageID)
		if sm.Answers {
			line += " (answers the message it was waiting on: it resumes)"
		}
		lines = append(lines, line)
	}
	return textResult("Sent:\n%s", strings.Join(lines, "\n")), out, nil
}

// defaultNeedReply is need_reply when the caller left it out: an answer to
// an agent's pending question needs no reply back (the agent digests it);
// any other message asks for one (spec §7.4.1's default).
func (s *Server) defaultNeedReply(op string, in SendMessageIn) bool {
	if in.NeedReply != nil {
		return *in.NeedReply
	}
	entries, err := s.sys.Inbox(op)
	if err != nil {
		return true
	}
	for _, e := range entries {
		if e.AwaitingReply && e.TaskID == in.TaskID && slices.Contains(in.Receiver, e.SenderID) {
			return false
		}
	}
	return true
}

// --- ask_info

// AskInfoIn is ask_info's input.
type AskInfoIn struct {
	Type    string            `json:"type" jsonschema:"what to look up (see the tool's description for the IDs each type needs)"`
	TaskID  string            `json:"task_id,omitempty" jsonschema:"the task, for task_info, stage_info, task_agents and stage_agents"`
	StageID string            `json:"stage_id,omitempty" jsonschema:"the stage, for stage_info and stage_agents"`
	TeamID  string            `json:"team_id,omitempty" jsonschema:"the team, for team_agents (default: the only team)"`
	AgentID engine.StringList `json:"agent_id,omitempty" jsonschema:"for agent: one agent_id or a list of them"`
	StepID  string            `json:"step_id,omitempty" jsonschema:"for agent (optional): one step of that agent, shown with its full result"`
}

// AskInfoOut is ask_info's output.
type AskInfoOut struct {
	Type     string `json:"type"`
	Markdown string `json:"markdown"`
	Data     any    `json:"data" jsonschema:"the facts of the answer as JSON (an object or a list, depending on the type)"`
}

// Query types beyond the spec's, for the operator to find IDs.
const (
	queryTasks = "tasks"
)

func queryTypes() []string { return append(slices.Clone(engine.QueryTypes), queryTasks) }

func (s *Server) askInfo(ctx context.Context, req *mcp.CallToolRequest, in AskInfoIn) (*mcp.CallToolResult, AskInfoOut, error) {
	in.Type = strings.TrimSpace(in.Type)
	if in.Type != queryTasks && !slices.Contains(engine.QueryTypes, in.Type) {
		if in.Type == "" {
			return nil, AskInfoOut{}, fmt.Errorf("type: is empty; one of %s", strings.Join(queryTypes(), ", "))
		}
		return nil, AskInfoOut{}, fmt.Errorf("type %q: must be one of %s", in.Type, strings.Join(queryTypes(), ", "))
	}
	if in.Type == queryTasks {
		list := s.taskList(s.operator(ctx, req.Extra))
		var b strings.Builder
		b.WriteString("### Tasks\n\n")
		for _, t := range list {
			fmt.Fprintf(&b, "- %s — %s [%s] manager %s, stages %d\n", t.TaskID, t.TaskName, t.ExecutionState, t.TaskManager, t.Stages)
		}
		out := AskInfoOut{Type: queryTasks, Markdown: b.String(), Data: list}
		return textResult("%s", out.Markdown), out, nil
	}
	res, err := s.sys.Query(s.operator(ctx, req.Extra), engine.AskInfoQuery{
		Type: in.Type, TaskID: in.TaskID, StageID: in.StageID, TeamID: in.TeamID, AgentID: in.AgentID, StepID: in.StepID,
	})
	if err != nil {
		return nil, AskInfoOut{}, err
	}
	out := AskInfoOut{Type: res.Type, Markdown: res.Markdown, Data: res.Data}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: res.Markdown}}}, out, nil
}

// --- get_inbox

// GetInboxIn is get_inbox's input.
type GetInboxIn struct {
	OnlyAwaitingReply bool `json:"only_awaiting_reply,omitempty" jsonschema:"only messages still awaiting your reply"`
	Limit             int  `json:"limit,omitempty" jsonschema:"at most this many messages, 1 or more (default 50)"`
}

// GetInboxOut is get_inbox's output.
type GetInboxOut struct {
	OperatorID    string         `json:"operator_id"`
	AwaitingReply int            `json:"awaiting_reply"`
	Messages      []InboxMessage `json:"messages"`
}

// InboxMessage is a message in the operator's inbox, with its sender's name.
type InboxMessage struct {
	engine.InboxEntry
	SenderName string `json:"sender_name"`
}

func (s *Server) getInbox(ctx context.Context, req *mcp.CallToolRequest, in GetInboxIn) (*mcp.CallToolResult, GetInboxOut, error) {
	if in.Limit < 0 {
		return nil, GetInboxOut{}, fmt.Errorf("limit %d: must not be negative", in.Limit)
	}
	if in.Limit == 0 {
		in.Limit = 50
	}
	op := s.operator(ctx, req.Extra)
	entries, err := s.sys.Inbox(op)
	if err != nil {
		return nil, GetInboxOut{}, err
	}
	out := GetInboxOut{OperatorID: op, Messages: []InboxMessage{}}
	for _, e := range entries {
		if e.AwaitingReply {
			out.AwaitingReply++
		}
		if (!in.OnlyAwaitingReply || e.AwaitingReply) && len(out.Messages) < in.Limit {
			m := InboxMessage{InboxEntry: e, SenderName: e.SenderID}
			if b, ok := s.sys.AgentBrief(e.SenderID); ok {
				m.SenderName = b.Name
			}
			out.Messages = append(out.Messages, m)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d message(s), %d awaiting your reply.\n", len(entries), out.AwaitingReply)
	for _, e := range out.Messages {
		fmt.Fprintf(&b, "\n- [%s] from %s (%s) in task %s (message_id %s, %s):\n  %s\n",
			inboxLabel(e.InboxEntry), e.SenderName, e.SenderID, e.TaskID, e.MessageID, e.Timestamp.Format("2006-01-02 15:04:05"), strings.ReplaceAll(e.Content, "\n", "\n  "))
	}
	return textResult("%s", b.String()), out, nil
}

// inboxLabel says what a message asks of the operator.
func inboxLabel(e engine.InboxEntry) string {
	switch {
	case e.AwaitingReply && e.Waiting:
		return "URGENT: the agent is blocked until you reply"
	case e.AwaitingReply:
		return "reply needed"
	case e.NeedReply && e.Replied:
		return "answered"
	case e.NeedReply && e.Expired:
		return "expired: the agent stopped waiting for your reply"
	}
	return "FYI"
}

// --- answer_approval

// AnswerApprovalIn is answer_approval's input.
type AnswerApprovalIn struct {
	MessageID string         `json:"message_id" jsonschema:"the approval question's message_id (get_inbox)"`
	Approve   bool           `json:"approve" jsonschema:"true to let the call run, false to refuse it"`
	Note      string         `json:"note,omitempty" jsonschema:"why, shown to the agent"`
	Arguments map[string]any `json:"arguments,omitempty" jsonschema:"when approving: arguments that replace the call's"`
}

// AnswerApprovalOut is what answer_approval did.
type AnswerApprovalOut struct {
	MessageID string `json:"message_id"`
	Approved  bool   `json:"approved"`
}

func (s *Server) answerApproval(ctx context.Context, req *mcp.CallToolRequest, in AnswerApprovalIn) (*mcp.CallToolResult, AnswerApprovalOut, error) {
	if !in.Approve && in.Arguments != nil {
		return nil, AnswerApprovalOut{}, fmt.Errorf("arguments: only with approve true (a refused call runs with no arguments)")
	}
	err := s.sys.AnswerApproval(s.operator(ctx, req.Extra), in.MessageID, engine.Decision{Approve: in.Approve, Note: in.Note, Arguments: in.Arguments})
	if err != nil {
		return nil, AnswerApprovalOut{}, err
	}
	verb := "refused"
	if in.Approve {
		verb = "approved"
	}
	return textResult("The call is %s.", verb), AnswerApprovalOut{MessageID: in.MessageID, Approved: in.Approve}, nil
}

// --- manage_task

// ManageTaskIn is manage_task's input.
type ManageTaskIn struct {
	Action             string               `json:"action" jsonschema:"what to do (see the tool's description)"`
	TaskID             string               `json:"task_id" jsonschema:"the task to act on"`
	Stages             []engine.StageSpec   `json:"stages,omitempty" jsonschema:"for add_stage: the stages to append, in the order they run"`
	StageID            string               `json:"stage_id,omitempty" jsonschema:"for finish_stage: the running stage"`
	OldStageID         string               `json:"old_stage_id,omitempty" jsonschema:"for retry_stage: the stage to replace"`
	NewStageIntention  string               `json:"new_stage_intention,omitempty" jsonschema:"for retry_stage: what the new stage must achieve"`
	NewAgentAllocation map[string]string    `json:"new_agent_allocation,omitempty" jsonschema:"for retry_stage: the new stage's goal of each agent, {agent_id: goal}"`
	Summary            string               `json:"summary,omitempty" jsonschema:"for finish_task (required) and cancel_task (optional: without it the summary says who cancelled the task): the task's result or why it stops"`
	Operator           string               `json:"operator,omitempty" jsonschema:"for share: the agent_id of the operator to share the task with"`
	Budget             *engine.BudgetLimits `json:"budget,omitempty" jsonschema:"for set_budget: the limits to set (a field left out keeps its value; 0: no limit)"`
}

// InstructionOut is what a management action did.
type InstructionOut struct {
	Action string `json:"action"`
	// Result is the action's result: an engine.TaskInstructionResult or
	// engine.AgentInstructionResult, or what share, interrupt and
	// cancel_step report; a JSON object either way (its schema says so).
	Result any `json:"result"`
}

// actionShare is manage_task's action beyond the spec: the task's owner lets
// another operator manage, message inside and see it (engine/visibility.go).
const actionShare = "share"

var manageTaskActions = []string{engine.ActionAddStage, engine.ActionFinishStage, engine.ActionRetryStage, engine.ActionFinishTask, engine.ActionCancelTask,
	engine.ActionPauseTask, engine.ActionResumeTask, engine.ActionSetBudget, actionShare}

func (s *Server) manageTask(ctx context.Context, req *mcp.CallToolRequest, in ManageTaskIn) (*mcp.CallToolResult, InstructionOut, error) {
	if !slices.Contains(manageTaskActions, in.Action) {
		return nil, InstructionOut{}, fmt.Errorf("action %q: must be one of %s", in.Action, strings.Join(manageTaskActions, ", "))
	}
	if in.Action == actionShare {
		res, err := s.sys.ShareTask(s.operator(ctx, req.Extra), in.TaskID, in.Operator)
		if err != nil {
			return nil, InstructionOut{}, err
		}
		return textResult("share done:\n%s", jsonText(res)), InstructionOut{Action: in.Action, Result: res}, nil
	}
	res, err := s.sys.TaskInstruction(s.operator(ctx, req.Extra), engine.TaskInstruction{
		Action: in.Action, TaskID: in.TaskID, Stages: in.Stages, StageID: in.StageID,
		OldStageID: in.OldStageID, NewStageIntention: in.NewStageIntention, NewAgentAllocation: in.NewAgentAllocation,
		Summary: in.Summary, Budget: in.Budget,
	})
	if err != nil {
		return nil, InstructionOut{}, err
	}
	out := InstructionOut{Action: in.Action, Result: res}
	return textResult("%s done:\n%s", in.Action, jsonText(res)), out, nil
}

// --- manage_agent

// ManageAgentIn is manage_agent's input.
type ManageAgentIn struct {
	Action      string              `json:"action" jsonschema:"what to do (see the tool's description)"`
	AgentConfig *engine.AgentConfig `json:"agent_config,omitempty" jsonschema:"for init_new_agent: the new agent, from a template or described field by field"`
	TaskID      string              `json:"task_id,omitempty" jsonschema:"for add_task_participant: the task"`
	Agents      engine.StringList   `json:"agents,omitempty" jsonschema:"for add_task_participant, pause_agent and resume_agent: one agent_id or a list of them"`
	AgentID     string              `json:"agent_id,omitempty" jsonschema:"for interrupt and cancel_step: the agent"`
	StepID      string              `json:"step_id,omitempty" jsonschema:"for cancel_step: the running tool step to cancel"`
	Instruction string              `json:"instruction,omitempty" jsonschema:"for interrupt: what the agent should do instead (required)"`
	Reason      string              `json:"reason,omitempty" jsonschema:"for interrupt and cancel_step: why, recorded on the stopped step"`
}

// Operator controls of running agents, beyond the agent_manager skill's
// actions.
const (
	actionInterrupt  = "interrupt"
	actionCancelStep = "cancel_step"
)

var manageAgentActions = []string{engine.ActionInitNewAgent, engine.ActionAddTaskParticipant,
	engine.ActionPauseAgent, engine.ActionResumeAgent, actionInterrupt, actionCancelStep}

func (s *Server) manageAgent(ctx context.Context, req *mcp.CallToolRequest, in ManageAgentIn) (*mcp.CallToolResult, InstructionOut, error) {
	if !slices.Contains(manageAgentActions, in.Action) {
		return nil, InstructionOut{}, fmt.Errorf("action %q: must be one of %s", in.Action, strings.Join(manageAgentActions, ", "))
	}
	op := s.operator(ctx, req.Extra)
	var res any
	var err error
	switch in.Action {
	case actionInterrupt:
		var stepID string
		if stepID, err = s.sys.Interrupt(op, in.AgentID, in.Reason, in.Instruction); err == nil {
			res = map[string]any{"agent_id": in.AgentID, "interrupted_step": stepID}
		}
	case actionCancelStep:
		if err = s.sys.CancelStep(op, in.AgentID, in.StepID, in.Reason); err == nil {
			res = map[string]any{"agent_id": in.AgentID, "cancelled_step": in.StepID}
		}
	default:
		res, err = s.sys.AgentInstruction(op, engine.AgentInstruction{
			Action: in.Action, AgentConfig: in.AgentConfig, TaskID: in.TaskID, Agents: in.Agents,
		})
	}
	if err != nil {
		return nil, InstructionOut{}, err
	}
	out := InstructionOut{Action: in.Action, Result: res}
	return textResult("%s done:\n%s", in.Action, jsonText(res)), out, nil
}

// --- read_resource

// ReadResourceIn is read_resource's input.
type ReadResourceIn struct {
	URI string `json:"uri" jsonschema:"a resource URI, e.g. mas://tasks or mas://tasks/{task_id}"`
}

// ReadResourceOut is read_resource's output: the resource's JSON document.
type ReadResourceOut struct {
	URI      string `json:"uri"`
	Document any    `json:"document" jsonschema:"the resource's JSON document (an object, or a list for mas://tasks and mas://agents)"`
}

func (s *Server) readResourceTool(ctx context.Context, req *mcp.CallToolRequest, in ReadResourceIn) (*mcp.CallToolResult, ReadResourceOut, error) {
	doc, err := s.document(in.URI, s.operator(ctx, req.Extra))
	if err != nil {
		return nil, ReadResourceOut{}, err
	}
	text, err := indentedJSON(doc)
	if err != nil {
		return nil, ReadResourceOut{}, fmt.Errorf("resource %s: %w", in.URI, err)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, ReadResourceOut{URI: in.URI, Document: doc}, nil
}
