package server

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
)

// The MCP App (extension io.modelcontextprotocol/ui): a live view of one
// task that hosts supporting MCP Apps render inside the chat when add_task
// or show_task is called. The page (mcpapp/src, built on ext-apps' App
// class) is bundled by mcpapp/build.mjs into one HTML file, committed and
// embedded here: nothing is built at run time. It keeps itself up to date
// through tool calls the host relays to this server: show_task for the
// snapshot, wait_for_updates (long poll) to learn when to read it again,
// send_message and answer_approval for the operator's answers. Hosts
// without MCP Apps ignore the _meta and see the tools as before.

const (
	// appURI is the task view's resource.
	appURI = "ui://mas-mcp/task-view.html"
	// appMIME is the MCP Apps HTML profile.
	appMIME = "text/html;profile=mcp-app"
	// appViewSteps is how many of each agent's newest steps show_task shows.
	appViewSteps = 8
	// appViewText bounds each step's and question's text in show_task.
	appViewText = 600
)

//go:embed mcpapp/dist/task-view.html
var appHTML string

// appMeta links a tool to the task view: the ext-apps key (ui.resourceUri)
// and the flat key older hosts read (ui/resourceUri).
func appMeta() mcp.Meta {
	return mcp.Meta{"ui": map[string]any{"resourceUri": appURI}, "ui/resourceUri": appURI}
}

// withApp links a tool's definition to the task view.
func withApp(t tool) tool {
	t.def.Meta = appMeta()
	return t
}

// appResourceMeta is the view's rendering preferences: a border, and no
// network access beyond the host (its CSP allows no outside origin).
func appResourceMeta() mcp.Meta {
	return mcp.Meta{"ui": map[string]any{"prefersBorder": true, "csp": map[string]any{}}}
}

// addApp registers the task view's resource.
func (s *Server) addApp() {
	s.mcp.AddResource(&mcp.Resource{
		URI: appURI, Name: "task-view", Title: "Task view (MCP App)", MIMEType: appMIME,
		Description: "A live view of a task (stages, agents, steps, questions to the operator) for hosts that render MCP Apps; shown by add_task and show_task.",
		Meta:        appResourceMeta(),
	}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{
			URI: appURI, MIMEType: appMIME, Text: appHTML, Meta: appResourceMeta(),
		}}}, nil
	})
}

// --- show_task

// ShowTaskIn is show_task's input.
type ShowTaskIn struct {
	TaskID string `json:"task_id,omitempty" jsonschema:"the task to show; default: your newest task"`
}

// TaskView is one task as the task view shows it.
type TaskView struct {
	// Cursor is the operator's event number the view was read at (its
	// own numbering, eventlog.go): pass it to wait_for_updates to learn of
	// the changes after it.
	Cursor        uint64         `json:"cursor"`
	TaskID        string         `json:"task_id"`
	TaskName      string         `json:"task_name"`
	TaskIntention string         `json:"task_intention"`
	State         string         `json:"execution_state"`
	Summary       string         `json:"task_summary"`
	Stages        []StageView    `json:"stages"`
	Agents        []AgentView    `json:"agents"`
	Questions     []QuestionView `json:"questions" jsonschema:"the agents' messages in this task awaiting your reply"`
}

// StageView is a stage and each agent's part in it.
type StageView struct {
	StageID   string           `json:"stage_id"`
	Intention string           `json:"stage_intention"`
	State     string           `json:"execution_state"`
	Agents    []StageAgentView `json:"agents"`
}

// StageAgentView is one agent's goal and state in a stage.
type StageAgentView struct {
	AgentID string `json:"agent_id"`
	Name    string `json:"name"`
	Goal    string `json:"goal"`
	State   string `json:"state"`
	Summary string `json:"summary"`
}

// AgentView is an agent of the task and its newest steps in it.
type AgentView struct {
	AgentID string     `json:"agent_id"`
	Name    string     `json:"name"`
	Role    string     `json:"role"`
	State   string     `json:"working_state"`
	Steps   []StepView `json:"steps"`
}

// StepView is one step, its text shortened.
type StepView struct {
	StepID    string `json:"step_id"`
	StageID   string `json:"stage_id"`
	Intention string `json:"step_intention"`
	Type      string `json:"type"`
	Executor  string `json:"executor"`
	State     string `json:"execution_state"`
	Text      string `json:"text"`
}

// QuestionView is a message from an agent awaiting the operator's reply.
type QuestionView struct {
	MessageID  string `json:"message_id"`
	SenderID   string `json:"sender_id"`
	SenderName string `json:"sender_name"`
	Content    string `json:"content"`
	Urgent     bool   `json:"urgent"`
	// Approval marks a question a tool call waits on: answer it with
	// answer_approval (approve or deny); others with send_message.
	Approval  bool      `json:"approval,omitempty"`
	Timestamp time.Time `json:"timestamp"`
}

// check bounds the input (inputs.go).
func (in ShowTaskIn) check(l *Limits) error {
	c := inputCheck{l: l}
	c.name("task_id", in.TaskID)
	return c.err
}

func (s *Server) showTask(ctx context.Context, req *mcp.CallToolRequest, in ShowTaskIn) (*mcp.CallToolResult, TaskView, error) {
	op := s.operator(ctx, req.Extra)
	id := strings.TrimSpace(in.TaskID)
	if id == "" {
		id = s.newestTask(op)
		if id == "" {
			return nil, TaskView{}, fmt.Errorf("task_id: you have no task yet; hand one over with add_task")
		}
	}
	v, err := s.taskView(op, id)
	if err != nil {
		return nil, TaskView{}, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Task %q (%s): %s, %d stage(s), %d agent(s), %d question(s) awaiting your reply.",
		v.TaskName, v.TaskID, v.State, len(v.Stages), len(v.Agents), len(v.Questions))
	for _, st := range v.Stages {
		fmt.Fprintf(&b, "\n- stage %s [%s]: %s", st.StageID, st.State, engine.Truncate(st.Intention, 200))
	}
	for _, q := range v.Questions {
		fmt.Fprintf(&b, "\n- question from %s (message_id %s): %s", q.SenderName, q.MessageID, engine.Truncate(q.Content, 200))
	}
	if v.Summary != "" {
		fmt.Fprintf(&b, "\nSummary: %s", v.Summary)
	}
	return textResult("%s", b.String()), v, nil
}

// newestTask is the newest task the operator may see, other than the MAS's
// base task (show that one by its ID); "" if there is none.
func (s *Server) newestTask(op string) string {
	var best engine.TaskState
	for _, t := range s.sys.TasksFor(op) {
		if !t.Base && (best.TaskID == "" || t.CreatedAt.After(best.CreatedAt)) {
			best = t
		}
	}
	return best.TaskID
}

// taskView reads a task, its agents' steps in it and the operator's
// questions from it. The cursor is read first: a change made while the
// view is assembled is after it, so the next wait_for_updates reports it.
func (s *Server) taskView(op, id string) (TaskView, error) {
	cursor := s.updates.logs.now(op)
	t, err := s.sys.TaskFor(op, id)
	if err != nil {
		return TaskView{}, err
	}
	v := TaskView{Cursor: cursor, TaskID: t.TaskID, TaskName: t.TaskName, TaskIntention: t.TaskIntention,
		State: t.ExecutionState, Summary: t.TaskSummary, Stages: []StageView{}, Agents: []AgentView{}, Questions: []QuestionView{}}
	name := func(id string) string {
		if b, ok := s.sys.AgentBrief(id); ok {
			return b.Name
		}
		return id
	}
	for _, st := range t.StageList {
		sv := StageView{StageID: st.StageID, Intention: st.StageIntention, State: st.ExecutionState, Agents: []StageAgentView{}}
		ids := make([]string, 0, len(st.AgentAllocation))
		for a := range st.AgentAllocation {
			ids = append(ids, a)
		}
		slices.Sort(ids)
		for _, a := range ids {
			sv.Agents = append(sv.Agents, StageAgentView{AgentID: a, Name: name(a), Goal: st.AgentAllocation[a],
				State: st.EveryAgentState[a], Summary: st.CompletionSummary[a]})
		}
		v.Stages = append(v.Stages, sv)
	}
	for _, a := range t.TaskGroup {
		ag, ok := s.sys.AgentFor(op, a)
		if !ok || ag.Kind == engine.KindHuman {
			continue
		}
		av := AgentView{AgentID: ag.AgentID, Name: ag.Name, Role: ag.Role, State: ag.WorkingState, Steps: []StepView{}}
		for _, st := range ag.AgentStep.StepList {
			if st.TaskID != t.TaskID {
				continue
			}
			av.Steps = append(av.Steps, StepView{StepID: st.StepID, StageID: st.StageID, Intention: engine.Truncate(st.StepIntention, appViewText),
				Type: st.Type, Executor: st.Executor, State: st.ExecutionState, Text: engine.Truncate(st.TextContent, appViewText)})
		}
		if n := len(av.Steps); n > appViewSteps {
			av.Steps = av.Steps[n-appViewSteps:]
		}
		v.Agents = append(v.Agents, av)
	}
	if entries, err := s.sys.Inbox(op); err == nil {
		for _, e := range entries {
			if e.AwaitingReply && e.TaskID == t.TaskID {
				v.Questions = append(v.Questions, QuestionView{MessageID: e.MessageID, SenderID: e.SenderID, SenderName: name(e.SenderID),
					Content: engine.Truncate(e.Content, 4*appViewText), Urgent: e.Waiting, Approval: e.Approval, Timestamp: e.Timestamp})
			}
		}
	}
	return v, nil
}
