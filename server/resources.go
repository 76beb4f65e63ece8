package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
)

const (
	uriTasks   = "mas://tasks"
	uriAgents  = "mas://agents"
	uriCatalog = "mas://catalog"
	mimeJSON   = "application/json"
)

func taskURI(id string) string           { return "mas://tasks/" + id }
func stageURI(task, stage string) string { return "mas://tasks/" + task + "/stages/" + stage }
func conversationURI(id string) string   { return "mas://tasks/" + id + "/conversation" }
func agentURI(id string) string          { return "mas://agents/" + id }
func stepsURI(id string) string          { return "mas://agents/" + id + "/steps" }
func inboxURI(id string) string          { return "mas://operators/" + id + "/inbox" }

// addResources registers the fixed resources and the templates; concrete
// task and agent resources are added as they appear (updates.go), which
// notifies clients with resources/list_changed.
func (s *Server) addResources() {
	for _, r := range []*mcp.Resource{
		{URI: uriTasks, Name: "tasks", Title: "All tasks", Description: "Every task: ID, name, state, manager, stages.", MIMEType: mimeJSON},
		{URI: uriAgents, Name: "agents", Title: "All agents", Description: "Every agent's public profile and working state.", MIMEType: mimeJSON},
		{URI: uriCatalog, Name: "catalog", Title: "Skills, tools and agent templates", Description: "What agents can do and be made from.", MIMEType: mimeJSON},
	} {
		s.mcp.AddResource(r, s.readResource)
	}
	for _, t := range []*mcp.ResourceTemplate{
		{URITemplate: "mas://tasks/{task_id}", Name: "task", Title: "A task", Description: "A task's state: its stages, agents, state and summary (the conversation is its own resource).", MIMEType: mimeJSON},
		{URITemplate: "mas://tasks/{task_id}/stages/{stage_id}", Name: "stage", Title: "A stage", Description: "A stage's state: its intention, each agent's goal and summary, its state.", MIMEType: mimeJSON},
		{URITemplate: "mas://tasks/{task_id}/conversation", Name: "conversation", Title: "A task's conversation", Description: "Every message delivered in the task (the group chat).", MIMEType: mimeJSON},
		{URITemplate: "mas://agents/{agent_id}", Name: "agent", Title: "An agent", Description: "An agent's profile, working state and memory (its steps are their own resource).", MIMEType: mimeJSON},
		{URITemplate: "mas://agents/{agent_id}/steps", Name: "steps", Title: "An agent's steps", Description: "An agent's step list and todo order.", MIMEType: mimeJSON},
		{URITemplate: "mas://operators/{agent_id}/inbox", Name: "inbox", Title: "An operator's inbox", Description: "Messages to an operator; only that operator may read it.", MIMEType: mimeJSON},
	} {
		s.mcp.AddResourceTemplate(t, s.readResource)
	}
}

// readResource serves resources/read.
func (s *Server) readResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	doc, err := s.document(uri, s.operator(ctx, req.Extra))
	if err != nil {
		if isNotFound(err) {
			return nil, mcp.ResourceNotFoundError(uri)
		}
		return nil, err
	}
	text, err := indentedJSON(doc)
	if err != nil {
		return nil, fmt.Errorf("resource %s: %w", uri, err)
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: mimeJSON, Text: text}}}, nil
}

// indentedJSON renders v as json.MarshalIndent(v, "", "  ") does, through
// a pooled encoder and buffers: a document is rendered on every read, and
// the string returned is its only allocation the size of the document.
func indentedJSON(v any) (string, error) {
	e := jsonEncoders.Get().(*jsonEncoder)
	defer e.release()
	if err := e.enc.Encode(v); err != nil {
		return "", err
	}
	return string(bytes.TrimSuffix(e.buf.Bytes(), []byte("\n"))), nil
}

// jsonEncoder is an indenting encoder and the buffer it writes to (it
// keeps its own indentation buffer too).
type jsonEncoder struct {
	buf bytes.Buffer
	enc *json.Encoder
}

// maxPooledJSON bounds the buffers kept for reuse: rendering one huge
// document does not pin its buffers.
const maxPooledJSON = 1 << 20

var jsonEncoders = sync.Pool{New: func() any {
	e := &jsonEncoder{}
	e.enc = json.NewEncoder(&e.buf)
	e.enc.SetIndent("", "  ")
	return e
}}

func (e *jsonEncoder) release() {
	if e.buf.Cap() > maxPooledJSON {
		return
	}
	e.buf.Reset()
	jsonEncoders.Put(e)
}

// resourceError is a bad resource URI.
type resourceError struct {
	uri, problem string
	notFound     bool
}

func (e *resourceError) Error() string { return fmt.Sprintf("uri %q: %s", e.uri, e.problem) }

func isNotFound(err error) bool {
	re, ok := err.(*resourceError)
	return ok && re.notFound
}

// parseURI splits a mas:// URI into its path segments. Only canonical URIs
// are accepted: no user, port, query or fragment, no empty segment, no
// trailing slash — a resource has one URI.
func parseURI(uri string) ([]string, error) {
	bad := &resourceError{uri: uri, problem: "not a mas:// resource URI (see read_resource's description for the list)", notFound: true}
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "mas" || u.User != nil || u.Port() != "" || u.RawQuery != "" || u.Fragment != "" ||
		u.ForceQuery || strings.Contains(uri, "#") || u.Host == "" {
		return nil, bad
	}
	parts := []string{u.Host}
	if u.Path != "" {
		for _, p := range strings.Split(strings.TrimPrefix(u.Path, "/"), "/") {
			if p == "" {
				return nil, bad
			}
			parts = append(parts, p)
		}
	}
	if "mas://"+strings.Join(parts, "/") != uri {
		return nil, bad
	}
	return parts, nil
}

// document builds a resource's JSON document as the operator reader sees it.
func (s *Server) document(uri, reader string) (any, error) {
	parts, err := parseURI(uri)
	if err != nil {
		return nil, err
	}
	notFound := func(what string) error {
		return &resourceError{uri: uri, problem: what, notFound: true}
	}
	switch {
	case len(parts) == 1 && parts[0] == "tasks":
		return s.taskList(reader), nil
	case len(parts) == 1 && parts[0] == "agents":
		return s.sys.AgentBriefs(), nil
	case len(parts) == 1 && parts[0] == "catalog":
		return s.catalog(), nil
	case parts[0] == "tasks" && (len(parts) == 2 || len(parts) == 3 || len(parts) == 4):
		t, err := s.sys.TaskFor(reader, parts[1])
		if err != nil {
			return nil, notFound(err.Error())
		}
		switch {
		case len(parts) == 2:
			return taskDocument(t), nil
		case len(parts) == 3 && parts[2] == "conversation":
			return ConversationDocument{TaskID: t.TaskID, Messages: t.SharedConversationPool}, nil
		case len(parts) == 4 && parts[2] == "stages":
			for _, st := range t.StageList {
				if st.StageID == parts[3] {
					return st, nil
				}
			}
			return nil, notFound("no such stage in task " + t.TaskID)
		}
	case parts[0] == "agents" && (len(parts) == 2 || len(parts) == 3):
		a, ok := s.sys.AgentFor(reader, parts[1])
		if !ok {
			return nil, notFound("no such agent")
		}
		switch {
		case len(parts) == 2:
			return agentDocument(a, reader), nil
		case parts[2] == "steps":
			if a.Kind == engine.KindHuman && a.AgentID != reader {
				// An operator's steps are the messages it sent: its own,
				// like its conversations (spec §7.1).
				return nil, &resourceError{uri: uri, problem: "an operator's steps can be read only by that operator"}
			}
			return a.AgentStep, nil
		}
	case parts[0] == "operators" && len(parts) == 3 && parts[2] == "inbox":
		if b, ok := s.sys.AgentBrief(parts[1]); !ok || b.Kind != engine.KindHuman {
			return nil, notFound("no such operator")
		}
		if parts[1] != reader {
			return nil, &resourceError{uri: uri, problem: "an operator's inbox can be read only by that operator"}
		}
		entries, err := s.sys.Inbox(parts[1])
		if err != nil {
			return nil, notFound(err.Error())
		}
		return InboxDocument{OperatorID: parts[1], Messages: entries}, nil
	}
	return nil, notFound("no such resource (see read_resource's description for the list)")
}

// TaskBrief is one entry of mas://tasks.
type TaskBrief struct {
	TaskID         string `json:"task_id"`
	TaskName       string `json:"task_name"`
	TaskManager    string `json:"task_manager"`
	ExecutionState string `json:"execution_state"`
	Stages         int    `json:"stages"`
	RunningStage   string `json:"running_stage,omitempty"`
	Base           bool   `json:"base,omitempty"`
	URI            string `json:"uri"`
}

// taskList is mas://tasks as the operator viewer sees it.
func (s *Server) taskList(viewer string) []TaskBrief {
	out := []TaskBrief{}
	for _, t := range s.sys.TasksFor(viewer) {
		b := TaskBrief{TaskID: t.TaskID, TaskName: t.TaskName, TaskManager: t.TaskManager,
			ExecutionState: t.ExecutionState, Stages: len(t.StageList), Base: t.Base, URI: taskURI(t.TaskID)}
		for _, st := range t.StageList {
			if st.ExecutionState == engine.StateRunning {
				b.RunningStage = st.StageID
			}
		}
		out = append(out, b)
	}
	return out
}

// TaskDocument is mas://tasks/{id}: the spec's task_state, with the
// conversation in its own resource.
type TaskDocument struct {
	engine.TaskState
	// SharedConversationPool is omitted here: see ConversationURI.
	SharedConversationPool []engine.Message `json:"shared_conversation_pool,omitempty"`
	ConversationLength     int              `json:"conversation_length"`
	ConversationURI        string           `json:"conversation_uri"`
	// BudgetLeft is what remains of the task's token and cost limits.
	BudgetLeft *engine.BudgetLeft `json:"budget_left,omitempty"`
}

func taskDocument(t engine.TaskState) TaskDocument {
	n := len(t.SharedConversationPool)
	t.SharedConversationPool = nil
	return TaskDocument{TaskState: t, ConversationLength: n, ConversationURI: conversationURI(t.TaskID), BudgetLeft: t.BudgetLeft()}
}

// ConversationDocument is mas://tasks/{id}/conversation.
type ConversationDocument struct {
	TaskID   string           `json:"task_id"`
	Messages []engine.Message `json:"messages"`
}

// AgentDocument is mas://agents/{id}: the spec's agent_state, with the step
// list in its own resource.
type AgentDocument struct {
	engine.AgentState
	// AgentStep is replaced by a count and the steps resource.
	AgentStep    *engine.AgentStep `json:"agent_step,omitempty"`
	PendingSteps int               `json:"pending_steps"`
	StepsURI     string            `json:"steps_uri"`
}

func agentDocument(a engine.AgentState, reader string) AgentDocument {
	if a.AgentID != reader {
		// An operator's conversations are its own (spec §7.1).
		a.ConversationPool = nil
	}
	return AgentDocument{AgentState: a, PendingSteps: len(a.AgentStep.TodoList), StepsURI: stepsURI(a.AgentID)}
}

// InboxDocument is mas://operators/{id}/inbox.
type InboxDocument struct {
	OperatorID string              `json:"operator_id"`
	Messages   []engine.InboxEntry `json:"messages"`
}

// Catalog is mas://catalog.
type Catalog struct {
	Skills    map[string]string    `json:"skills"`
	Tools     map[string]string    `json:"tools"`
	Templates []engine.AgentConfig `json:"agent_templates"`
}

func (s *Server) catalog() Catalog {
	res, err := s.sys.Query(s.sys.OperatorID(), engine.AskInfoQuery{Type: engine.QuerySkillsAndTools})
	c := Catalog{Skills: map[string]string{}, Tools: map[string]string{}, Templates: s.sys.Templates()}
	if err == nil {
		if m, ok := res.Data.(map[string]any); ok {
			if sk, ok := m["skills"].(map[string]string); ok {
				c.Skills = sk
			}
			if tl, ok := m["tools"].(map[string]string); ok {
				c.Tools = tl
			}
		}
	}
	return c
}
