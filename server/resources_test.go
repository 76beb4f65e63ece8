package server_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/server"
)

// Field names of the spec's states (snake_case, as in spec §1.1 and §2), by
// document kind.
var (
	taskBriefFields = []string{"task_id", "task_name", "task_manager", "execution_state", "stages", "uri"}
	taskFields      = []string{"task_id", "task_name", "task_intention", "task_manager", "task_group", "shared_info_pool",
		"communication_queue", "stage_list", "execution_state", "task_summary", "conversation_length", "conversation_uri"}
	stageFields = []string{"task_id", "stage_id", "stage_intention", "agent_allocation", "execution_state",
		"every_agent_state", "completion_summary"}
	messageFields = []string{"task_id", "sender_id", "receiver", "message", "stage_relative", "need_reply", "waiting",
		"message_id", "timestamp"}
	agentBriefFields = []string{"agent_id", "name", "role", "profile", "kind", "working_state", "skills", "tools"}
	agentFields      = []string{"agent_id", "name", "role", "profile", "working_state", "working_memory", "persistent_memory",
		"step_lock", "tools", "skills", "kind", "pending_steps", "steps_uri"}
	stepFields = []string{"task_id", "stage_id", "agent_id", "step_id", "step_intention", "type", "executor",
		"execution_state", "text_content", "instruction_content", "execute_result"}
	inboxFields = []string{"sender_id", "content", "stage_relative", "timestamp", "need_reply", "waiting",
		"task_id", "message_id", "awaiting_reply"}
)

// missingFields reports the keys of want missing from the JSON object v.
func missingFields(v any, want []string) []string {
	m, ok := v.(map[string]any)
	if !ok {
		return []string{"(not an object)"}
	}
	var out []string
	for _, k := range want {
		if _, ok := m[k]; !ok {
			out = append(out, k)
		}
	}
	return out
}

// checkFields fails for every missing field of the object, and of each
// element when v is a list.
func checkFields(t *testing.T, what string, v any, want []string) {
	t.Helper()
	if l, ok := v.([]any); ok {
		if len(l) == 0 {
			t.Errorf("%s: empty list", what)
		}
		for i, x := range l {
			if miss := missingFields(x, want); len(miss) > 0 {
				t.Errorf("%s[%d]: missing %v", what, i, miss)
			}
		}
		return
	}
	if miss := missingFields(v, want); len(miss) > 0 {
		t.Errorf("%s: missing %v", what, miss)
	}
}

// readDocument reads a resource with resources/read and decodes its JSON.
func (p *peer) readDocument(uri string) any {
	p.t.Helper()
	res, err := p.client.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: uri})
	if err != nil {
		p.t.Fatalf("read %s: %v", uri, err)
	}
	if len(res.Contents) != 1 {
		p.t.Fatalf("read %s: %d contents, want 1", uri, len(res.Contents))
	}
	c := res.Contents[0]
	if c.URI != uri || c.MIMEType != "application/json" {
		p.t.Errorf("read %s: contents uri %q, mimeType %q; want the URI and application/json", uri, c.URI, c.MIMEType)
	}
	var v any
	if err := json.Unmarshal([]byte(c.Text), &v); err != nil {
		p.t.Fatalf("read %s: not JSON: %v\n%s", uri, err, c.Text)
	}
	return v
}

// readTool reads a resource with the read_resource tool and returns its
// structured document.
func (p *peer) readTool(uri string) any {
	p.t.Helper()
	var out struct {
		URI      string `json:"uri"`
		Document any    `json:"document"`
	}
	res := p.call("read_resource", map[string]any{"uri": uri}, &out)
	if out.URI != uri {
		p.t.Errorf("read_resource %s: uri %q", uri, out.URI)
	}
	var text any
	if err := json.Unmarshal([]byte(resultText(res)), &text); err != nil {
		p.t.Errorf("read_resource %s: text is not the JSON document: %v", uri, err)
	} else if diff := cmp.Diff(out.Document, text); diff != "" {
		p.t.Errorf("read_resource %s: text and structured document differ:\n%s", uri, diff)
	}
	return out.Document
}

func TestResourceDocuments(t *testing.T) {
	e := newEnv(t)
	f := e.startTask()
	sys := e.stack.Sys
	for _, tc := range []struct {
		uri   string
		check func(t *testing.T, doc any)
	}{
		{"mas://tasks", func(t *testing.T, d any) {
			checkFields(t, "tasks", d, taskBriefFields)
			if ids := fieldOfAll(d, "task_id"); !slices.Equal(ids, []string{sys.BaseTaskID(), f.TaskID}) {
				t.Errorf("task_ids %v, want the base task and the task, in creation order", ids)
			}
		}},
		{"mas://tasks/" + f.TaskID, func(t *testing.T, d any) {
			checkFields(t, "task", d, taskFields)
			m := d.(map[string]any)
			checkFields(t, "stage_list", m["stage_list"], stageFields)
			if _, ok := m["shared_conversation_pool"]; ok {
				t.Errorf("the task document holds the conversation; it has its own resource")
			}
			if m["conversation_uri"] != "mas://tasks/"+f.TaskID+"/conversation" || m["conversation_length"].(float64) == 0 {
				t.Errorf("conversation_uri %v, length %v", m["conversation_uri"], m["conversation_length"])
			}
		}},
		{"mas://tasks/" + f.TaskID + "/stages/" + f.Stages[0], func(t *testing.T, d any) {
			checkFields(t, "stage", d, stageFields)
			m := d.(map[string]any)
			eas, _ := m["every_agent_state"].(map[string]any)
			if m["stage_id"] != f.Stages[0] || m["execution_state"] != engine.StateRunning || eas[f.Alice] == nil {
				t.Errorf("stage %v", m)
			}
		}},
		{"mas://tasks/" + f.TaskID + "/conversation", func(t *testing.T, d any) {
			m := d.(map[string]any)
			if m["task_id"] != f.TaskID {
				t.Errorf("task_id %v", m["task_id"])
			}
			checkFields(t, "messages", m["messages"], messageFields)
			if !slices.Contains(fieldOfAll(m["messages"], "message_id"), f.Question.MessageID) {
				t.Errorf("the conversation lacks alice's question")
			}
		}},
		{"mas://agents", func(t *testing.T, d any) {
			checkFields(t, "agents", d, agentBriefFields)
			if ids := fieldOfAll(d, "agent_id"); len(ids) != 4 {
				t.Errorf("agents %v, want 4", ids)
			}
		}},
		{"mas://agents/" + f.Alice, func(t *testing.T, d any) {
			checkFields(t, "agent", d, agentFields)
			m := d.(map[string]any)
			if _, ok := m["agent_step"]; ok {
				t.Errorf("the agent document holds the steps; they have their own resource")
			}
			if lock, _ := m["step_lock"].([]any); len(lock) == 0 {
				t.Errorf("step_lock %v: alice waits on the operator", m["step_lock"])
			}
			if wm, _ := m["working_memory"].(map[string]any); wm[f.TaskID] == nil {
				t.Errorf("working_memory %v lacks the task", m["working_memory"])
			}
		}},
		{"mas://agents/" + f.Alice + "/steps", func(t *testing.T, d any) {
			m := d.(map[string]any)
			if m["agent_id"] != f.Alice {
				t.Errorf("agent_id %v", m["agent_id"])
			}
			checkFields(t, "steps", d, []string{"agent_id", "todo_list", "step_list"})
			checkFields(t, "step_list", m["step_list"], stepFields)
		}},
		{"mas://operators/" + f.Operator + "/inbox", func(t *testing.T, d any) {
			m := d.(map[string]any)
			if m["operator_id"] != f.Operator {
				t.Errorf("operator_id %v", m["operator_id"])
			}
			checkFields(t, "messages", m["messages"], inboxFields)
		}},
		{"mas://catalog", func(t *testing.T, d any) {
			checkFields(t, "catalog", d, []string{"skills", "tools", "agent_templates"})
			m := d.(map[string]any)
			if names := fieldOfAll(m["agent_templates"], "template"); !slices.Contains(names, "researcher") {
				t.Errorf("templates %v", names)
			}
			if sk, _ := m["skills"].(map[string]any); sk["planning"] == nil {
				t.Errorf("skills %v", m["skills"])
			}
		}},
	} {
		t.Run(tc.uri, func(t *testing.T) {
			doc := e.readDocument(tc.uri)
			tc.check(t, doc)
			if diff := cmp.Diff(doc, e.readTool(tc.uri)); diff != "" {
				t.Errorf("read_resource and resources/read differ (-resources/read +read_resource):\n%s", diff)
			}
		})
	}
}

// TestResourceList: resources/list has the fixed resources and a task and a
// conversation resource per task, an agent and a steps resource per agent;
// resources/templates/list has every template. read_resource returns the
// same document as resources/read for each of them.
func TestResourceList(t *testing.T) {
	e := newEnv(t)
	f := e.startTask()
	ctx := context.Background()
	got := map[string]*mcp.Resource{}
	for r, err := range e.client.Resources(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if got[r.URI] != nil {
			t.Errorf("%s listed twice", r.URI)
		}
		got[r.URI] = r
	}
	want := []string{"mas://tasks", "mas://agents", "mas://catalog", appURI}
	for _, id := range []string{e.stack.Sys.BaseTaskID(), f.TaskID} {
		want = append(want, "mas://tasks/"+id, "mas://tasks/"+id+"/conversation")
	}
	for _, id := range []string{f.Operator, f.Manager, f.Alice, f.Bob} {
		want = append(want, "mas://agents/"+id, "mas://agents/"+id+"/steps")
	}
	if diff := cmp.Diff(sorted(want...), sorted(keys(got)...)); diff != "" {
		t.Errorf("resources/list (-want +got):\n%s", diff)
	}
	// The MCP App's page is HTML, not a document (TestAppResource).
	delete(got, appURI)
	for uri, r := range got {
		if r.MIMEType != "application/json" || r.Name == "" || r.Title == "" || r.Description == "" {
			t.Errorf("%s: mimeType %q, name %q, title %q, description %q", uri, r.MIMEType, r.Name, r.Title, r.Description)
		}
	}

	var templates []string
	for rt, err := range e.client.ResourceTemplates(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		templates = append(templates, rt.URITemplate)
		if rt.MIMEType != "application/json" || rt.Name == "" || rt.Description == "" {
			t.Errorf("%s: mimeType %q, name %q, description %q", rt.URITemplate, rt.MIMEType, rt.Name, rt.Description)
		}
	}
	wantTemplates := []string{"mas://tasks/{task_id}", "mas://tasks/{task_id}/stages/{stage_id}", "mas://tasks/{task_id}/conversation",
		"mas://agents/{agent_id}", "mas://agents/{agent_id}/steps", "mas://operators/{agent_id}/inbox"}
	if diff := cmp.Diff(sorted(wantTemplates...), sorted(templates...)); diff != "" {
		t.Errorf("resources/templates/list (-want +got):\n%s", diff)
	}

	// Every listed URI, and the templated ones that are not listed, read
	// the same through the tool.
	uris := append(keys(got), "mas://operators/"+f.Operator+"/inbox")
	for _, st := range f.Stages {
		uris = append(uris, "mas://tasks/"+f.TaskID+"/stages/"+st)
	}
	for _, uri := range sorted(uris...) {
		if diff := cmp.Diff(e.readDocument(uri), e.readTool(uri)); diff != "" {
			t.Errorf("%s: read_resource and resources/read differ (-resources/read +read_resource):\n%s", uri, diff)
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestResourceNotFound: unknown IDs and malformed URIs give resources/read's
// resource-not-found error (a JSON-RPC error naming the URI), and a tool
// error from read_resource.
func TestResourceNotFound(t *testing.T) {
	e := newEnv(t)
	f := e.startTask()
	for _, uri := range []string{
		"mas://tasks/" + noSuchID,
		"mas://tasks/" + noSuchID + "/conversation",
		"mas://tasks/" + noSuchID + "/stages/" + f.Stages[0],
		"mas://tasks/" + f.TaskID + "/stages/" + noSuchID,
		"mas://tasks/" + f.TaskID + "/stages/",
		"mas://tasks/" + f.TaskID + "/bogus",
		"mas://tasks/" + f.TaskID + "/stages/" + f.Stages[0] + "/more",
		"mas://agents/" + noSuchID,
		"mas://agents/" + noSuchID + "/steps",
		"mas://agents/" + f.Alice + "/bogus",
		"mas://operators/" + noSuchID + "/inbox",
		"mas://operators/" + f.Operator,
		"mas://weather",
		"mas://",
		"mas:tasks",
		"https://example.com/tasks",
		"file:///etc/passwd",
		"",
	} {
		t.Run(uri, func(t *testing.T) {
			werr := e.readErr(uri)
			if werr.Code != mcp.CodeResourceNotFound || werr.Message != "Resource not found" {
				t.Errorf("resources/read: code %d %q, want %d Resource not found", werr.Code, werr.Message, mcp.CodeResourceNotFound)
			}
			var data struct{ URI string }
			if err := json.Unmarshal(werr.Data, &data); err != nil || data.URI != uri {
				t.Errorf("resources/read: error data %s, want the URI", werr.Data)
			}
			if txt := e.callErr("read_resource", map[string]any{"uri": uri}); !strings.Contains(txt, "uri ") {
				t.Errorf("read_resource: error %q does not name the uri", txt)
			}
		})
	}
}

// TestResourceNonCanonicalURIs: a URI is one resource only in its canonical
// form. Both reads must refuse the others.
func TestResourceNonCanonicalURIs(t *testing.T) {
	e := newEnv(t)
	op := e.stack.Sys.OperatorID()
	for _, uri := range []string{
		"mas://tasks?x=1",
		"mas://tasks#top",
		"mas://tasks/",
		"mas://agents/",
		"mas://agents/" + op + "/",
		"mas://agents//" + op,
		"mas://user@agents/" + op,
		"mas://agents:80/" + op,
	} {
		t.Run(uri, func(t *testing.T) {
			if res, err := e.client.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: uri}); err == nil {
				t.Errorf("resources/read served %s:\n%.200s", uri, res.Contents[0].Text)
			}
			res, err := e.client.CallTool(context.Background(), mcpCall("read_resource", map[string]any{"uri": uri}))
			if err != nil || !res.IsError {
				t.Errorf("read_resource served %s (err %v)", uri, err)
			}
		})
	}
}

// TestInboxOfAnLLMAgent: mas://operators/{id}/inbox of an agent that is not
// an operator does not exist.
func TestInboxOfAnLLMAgent(t *testing.T) {
	e := newEnv(t)
	uri := "mas://operators/" + e.stack.Sys.ManagerID() + "/inbox"
	if werr := e.readErr(uri); werr.Code != mcp.CodeResourceNotFound {
		t.Errorf("code %d %q, want resource not found", werr.Code, werr.Message)
	}
}

// TestSubscribe: subscriptions are accepted for our URIs only. (On
// 2026-07-28 the SDK opens a subscriptions/listen stream and does not call
// the server's subscribe handler before answering, so only older protocol
// versions see the refusal.)
func TestSubscribe(t *testing.T) {
	e := newEnvWith(t, envOptions{ProtocolVersion: "2025-11-25"})
	ctx := context.Background()
	if err := e.client.Subscribe(ctx, &mcp.SubscribeParams{URI: "mas://tasks"}); err != nil {
		t.Errorf("subscribe mas://tasks: %v", err)
	}
	if err := e.client.Subscribe(ctx, &mcp.SubscribeParams{URI: "https://example.com/"}); err == nil {
		t.Errorf("subscribe to a URI that is not ours succeeded")
	}
	if err := e.client.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: "mas://tasks"}); err != nil {
		t.Errorf("unsubscribe: %v", err)
	}
}

// TestCatalogMatchesAskInfo: mas://catalog's templates are ask_info
// available_agents_config's.
func TestCatalogMatchesAskInfo(t *testing.T) {
	e := newEnv(t)
	var cat server.Catalog
	e.read("mas://catalog", &cat)
	var out server.AskInfoOut
	e.call("ask_info", map[string]any{"type": "available_agents_config"}, &out)
	var fromQuery []engine.AgentConfig
	if err := json.Unmarshal([]byte(jsonString(out.Data)), &fromQuery); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(fromQuery, cat.Templates); diff != "" {
		t.Errorf("catalog templates (-ask_info +catalog):\n%s", diff)
	}
	if len(cat.Skills) == 0 {
		t.Errorf("catalog has no skills")
	}
}

// TestPrompts: prompts/list has operator_guide with its optional task
// argument; prompts/get renders the guide, with the task appended when one
// is given.
func TestPrompts(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	list, err := e.client.ListPrompts(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Prompts) != 1 || list.Prompts[0].Name != "operator_guide" {
		t.Fatalf("prompts/list = %v, want operator_guide", list.Prompts)
	}
	p := list.Prompts[0]
	if p.Title == "" || p.Description == "" || len(p.Arguments) != 1 || p.Arguments[0].Name != "task" || p.Arguments[0].Required {
		t.Errorf("operator_guide = %+v, want a title, a description and one optional argument task", p)
	}
	const task = "Compare three note-taking apps and recommend one."
	for _, tc := range []struct {
		name     string
		args     map[string]string
		wantTask bool
	}{
		{"no argument", nil, false},
		{"blank task", map[string]string{"task": "  "}, false},
		{"task", map[string]string{"task": task}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := e.client.GetPrompt(ctx, &mcp.GetPromptParams{Name: "operator_guide", Arguments: tc.args})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Messages) != 1 || res.Messages[0].Role != "user" {
				t.Fatalf("messages %+v, want one user message", res.Messages)
			}
			text := res.Messages[0].Content.(*mcp.TextContent).Text
			for _, tool := range []string{"add_task", "get_inbox", "send_message", "wait_for_updates", "manage_task", "read_resource"} {
				if !strings.Contains(text, tool) {
					t.Errorf("the guide does not mention %s", tool)
				}
			}
			if got := strings.Contains(text, "## Your task now"); got != tc.wantTask || (tc.wantTask && !strings.HasSuffix(text, task)) {
				t.Errorf("task section present %v, want %v:\n%s", got, tc.wantTask, text)
			}
		})
	}
	if _, err := e.client.GetPrompt(ctx, &mcp.GetPromptParams{Name: "no_such_prompt"}); err == nil {
		t.Errorf("prompts/get of an unknown prompt succeeded")
	}
}
