package server

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
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
		defTool("add_task", "Hand over a task",
			"Hand the multi-agent system a task. Its manager agent staffs it with agents and splits it into stages; this returns at once with the task's ID and resource URI (it never waits for the agents' work). Watch progress with wait_for_updates, read_resource or a subscription to the task's resource; agents' questions arrive in get_inbox.",
			writes(false), s.addTask),
		defTool("send_message", "Message agents",
			"Send a message as the operator to agents of a task (spec's HumanAgent send_message). To answer an agent's question, send to that agent: a pending question from it (see get_inbox) is answered automatically, and an agent blocked waiting for your reply resumes. need_reply asks the receivers to answer; waiting marks it urgent (they answer before anything else).",
			writes(false), s.sendMessage),
		defTool("ask_info", "Query the system",
			"Query the MAS from its current state (never waits for agents). Types: "+strings.Join(queryTypes(), ", ")+". Returns markdown and the same facts as structured data.",
			readOnly(), s.askInfo),
		defTool("get_inbox", "Read the operator's inbox",
			"The messages agents sent to you (the operator), those awaiting your reply first (urgent ones first), then the newest. Answer one with send_message to its sender.",
			readOnly(), s.getInbox),
		defTool("wait_for_updates", "Wait for changes",
			"Long-poll for changes of the MAS, for hosts that cannot subscribe to resources: returns the events after cursor (0 for the latest), waiting up to timeout_seconds for the first one. Pass the returned cursor to the next call. Sends progress notifications while it waits.",
			readOnly(), s.waitForUpdates),
		defTool("manage_task", "Manage a task",
			"The operator's task management (spec task_manager): add_stage (stages, each with stage_intention and agent_allocation {agent_id: goal}), finish_stage (stage_id), retry_stage (old_stage_id, new_stage_intention, new_agent_allocation), finish_task (summary), cancel_task, share (operator: let another operator manage, message inside and see the task; only its owner, operators it is shared with and admins may act on a task). IDs come from ask_info or the task's resource.",
			destructive(), s.manageTask),
		defTool("manage_agent", "Manage agents",
			"The operator's agent management (spec agent_manager): init_new_agent (agent_config: a template name from ask_info available_agents_config, or name, role, profile, skills, tools), add_task_participant (task_id, agents).",
			writes(false), s.manageAgent),
		defTool("read_resource", "Read a resource",
			"Read any of the server's resources by URI (for hosts that do not read resources themselves): mas://tasks, mas://tasks/{task_id}, mas://tasks/{task_id}/stages/{stage_id}, mas://tasks/{task_id}/conversation, mas://agents, mas://agents/{agent_id}, mas://agents/{agent_id}/steps, mas://operators/{agent_id}/inbox, mas://catalog.",
			readOnly(), s.readResourceTool),
	}
}

func (s *Server) addTools() {
	for _, t := range s.tools() {
		t.add(s.mcp, t.def, &s.cfg.Limits)
	}
}

// defTool builds a tool whose handler takes In and returns Out, once In is
// within the input limits (inputs.go).
func defTool[In, Out any](name, title, desc string, ann *mcp.ToolAnnotations, h mcp.ToolHandlerFor[In, Out]) tool {
	ann.Title = title
	return tool{
		def: &mcp.Tool{Name: name, Title: title, Description: desc, Annotations: ann},
		add: func(srv *mcp.Server, def *mcp.Tool, l *Limits) { mcp.AddTool(srv, def, checked(l, h)) },
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
	TaskName      string `json:"task_name" jsonschema:"a short name for the task"`
	TaskIntention string `json:"task_intention" jsonschema:"what the task must achieve, in detail; the manager plans the stages from it"`
	TaskManager   string `json:"task_manager,omitempty" jsonschema:"agent_id of the manager agent to give it to; default: the MAS's manager"`
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
	id, err := s.sys.AddTask(op, engine.AddTaskRequest{TaskName: in.TaskName, TaskIntention: in.TaskIntention, Manager: in.TaskManager})
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
	TaskID        string   `json:"task_id" jsonschema:"the task the conversation belongs to (the base task for general requests to the manager)"`
	Receiver      []string `json:"receiver" jsonschema:"agent_ids of the receivers, members of the task's group"`
	Content       string   `json:"content" jsonschema:"the message text"`
	StageRelative string   `json:"stage_relative,omitempty" jsonschema:"a stage_id of the task if the message concerns that stage; default no_relative"`
	NeedReply     *bool    `json:"need_reply,omitempty" jsonschema:"whether the receivers must answer (default: false when this answers their pending question, else true)"`
	Waiting       bool     `json:"waiting,omitempty" jsonschema:"urgent: the receivers answer before any other step (default false)"`
	ReplyTo       string   `json:"reply_to,omitempty" jsonschema:"message_id of the inbox message this answers; default: the oldest unanswered one from each receiver"`
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
		TaskID: in.TaskID, Receiver: in.Receiver, Content: in.Content, StageRelative: in.StageRelative,
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
	Type    string   `json:"type" jsonschema:"the query type"`
	TaskID  string   `json:"task_id,omitempty" jsonschema:"for task_info, stage_info, task_agents, stage_agents"`
	StageID string   `json:"stage_id,omitempty" jsonschema:"for stage_info, stage_agents"`
	TeamID  string   `json:"team_id,omitempty" jsonschema:"for team_agents (the MAS has one team, default)"`
	AgentID []string `json:"agent_id,omitempty" jsonschema:"for agent: one or more agent_ids"`
}

// AskInfoOut is ask_info's output.
type AskInfoOut struct {
	Type     string `json:"type"`
	Markdown string `json:"markdown"`
	Data     any    `json:"data" jsonschema:"the facts of the answer as JSON; their shape depends on the query type"`
}

// Query types beyond the spec's, for the operator to find IDs.
const (
	queryTasks = "tasks"
)

func queryTypes() []string { return append(slices.Clone(engine.QueryTypes), queryTasks) }

func (s *Server) askInfo(ctx context.Context, req *mcp.CallToolRequest, in AskInfoIn) (*mcp.CallToolResult, AskInfoOut, error) {
	in.Type = strings.TrimSpace(in.Type)
	if !slices.Contains(queryTypes(), in.Type) {
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
		Type: in.Type, TaskID: in.TaskID, StageID: in.StageID, TeamID: in.TeamID, AgentID: in.AgentID,
	})
	if err != nil {
		return nil, AskInfoOut{}, err
	}
	out := AskInfoOut{Type: res.Type, Markdown: res.Markdown, Data: res.Data}
	return textResult("%s", res.Markdown), out, nil
}

// --- get_inbox

// GetInboxIn is get_inbox's input.
type GetInboxIn struct {
	OnlyAwaitingReply bool `json:"only_awaiting_reply,omitempty" jsonschema:"only messages still awaiting your reply"`
	Limit             int  `json:"limit,omitempty" jsonschema:"at most this many messages (default 50)"`
}

// GetInboxOut is get_inbox's output.
type GetInboxOut struct {
	OperatorID    string              `json:"operator_id"`
	AwaitingReply int                 `json:"awaiting_reply"`
	Messages      []engine.InboxEntry `json:"messages"`
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
	out := GetInboxOut{OperatorID: op, Messages: []engine.InboxEntry{}}
	for _, e := range entries {
		if e.AwaitingReply {
			out.AwaitingReply++
		}
		if (!in.OnlyAwaitingReply || e.AwaitingReply) && len(out.Messages) < in.Limit {
			out.Messages = append(out.Messages, e)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d message(s), %d awaiting your reply.\n", len(entries), out.AwaitingReply)
	for _, e := range out.Messages {
		kind := "FYI"
		switch {
		case e.AwaitingReply && e.Waiting:
			kind = "URGENT: the agent is blocked until you reply"
		case e.AwaitingReply:
			kind = "reply needed"
		}
		fmt.Fprintf(&b, "\n- [%s] from %s in task %s (message_id %s, %s):\n  %s\n",
			kind, e.SenderID, e.TaskID, e.MessageID, e.Timestamp.Format("2006-01-02 15:04:05"), strings.ReplaceAll(e.Content, "\n", "\n  "))
	}
	return textResult("%s", b.String()), out, nil
}

// --- manage_task

// ManageTaskIn is manage_task's input.
type ManageTaskIn struct {
	Action             string             `json:"action" jsonschema:"add_stage, finish_stage, retry_stage, finish_task, cancel_task or share"`
	TaskID             string             `json:"task_id" jsonschema:"the task"`
	Stages             []engine.StageSpec `json:"stages,omitempty" jsonschema:"add_stage: the stages to append, in order"`
	StageID            string             `json:"stage_id,omitempty" jsonschema:"finish_stage: the running stage"`
	OldStageID         string             `json:"old_stage_id,omitempty" jsonschema:"retry_stage: the stage to retry"`
	NewStageIntention  string             `json:"new_stage_intention,omitempty" jsonschema:"retry_stage: the corrected stage intention"`
	NewAgentAllocation map[string]string  `json:"new_agent_allocation,omitempty" jsonschema:"retry_stage: {agent_id: goal} of the new stage"`
	Summary            string             `json:"summary,omitempty" jsonschema:"finish_task (required) and cancel_task: the task's summary"`
	Operator           string             `json:"operator,omitempty" jsonschema:"share: the agent_id of the operator to share the task with"`
}

// InstructionOut is what a management action did.
type InstructionOut struct {
	Action string         `json:"action"`
	Result map[string]any `json:"result"`
}

// actionShare is manage_task's action beyond the spec: the task's owner lets
// another operator manage, message inside and see it (engine/visibility.go).
const actionShare = "share"

var manageTaskActions = []string{engine.ActionAddStage, engine.ActionFinishStage, engine.ActionRetryStage, engine.ActionFinishTask, engine.ActionCancelTask, actionShare}

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
		Summary: in.Summary,
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
	Action      string              `json:"action" jsonschema:"init_new_agent or add_task_participant"`
	AgentConfig *engine.AgentConfig `json:"agent_config,omitempty" jsonschema:"init_new_agent: a template name (template), or name, role, profile, skills, tools"`
	TaskID      string              `json:"task_id,omitempty" jsonschema:"add_task_participant: the task"`
	Agents      []string            `json:"agents,omitempty" jsonschema:"add_task_participant: agent_ids to add to the task's group"`
}

var manageAgentActions = []string{engine.ActionInitNewAgent, engine.ActionAddTaskParticipant}

func (s *Server) manageAgent(ctx context.Context, req *mcp.CallToolRequest, in ManageAgentIn) (*mcp.CallToolResult, InstructionOut, error) {
	if !slices.Contains(manageAgentActions, in.Action) {
		return nil, InstructionOut{}, fmt.Errorf("action %q: must be one of %s", in.Action, strings.Join(manageAgentActions, ", "))
	}
	res, err := s.sys.AgentInstruction(s.operator(ctx, req.Extra), engine.AgentInstruction{
		Action: in.Action, AgentConfig: in.AgentConfig, TaskID: in.TaskID, Agents: in.Agents,
	})
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
	Document any    `json:"document" jsonschema:"the resource's JSON document"`
}

func (s *Server) readResourceTool(ctx context.Context, req *mcp.CallToolRequest, in ReadResourceIn) (*mcp.CallToolResult, ReadResourceOut, error) {
	doc, err := s.document(in.URI, s.operator(ctx, req.Extra))
	if err != nil {
		return nil, ReadResourceOut{}, err
	}
	return textResult("%s", jsonText(doc)), ReadResourceOut{URI: in.URI, Document: doc}, nil
}
