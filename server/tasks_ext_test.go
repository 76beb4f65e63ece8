package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/downstream"
	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
	"github.com/mas-mcp/mas-mcp/prompts"
	"github.com/mas-mcp/mas-mcp/server"
)

// The 2026-07-28 tasks extension (io.modelcontextprotocol/tasks) and
// multi round-trip requests, over the stateless streamable HTTP path.

const tasksExt = "io.modelcontextprotocol/tasks"

// extTaskParams and extTask are the extension's wire shapes, as a client
// sees them.
type extTaskParams struct {
	mcp.ParamsBase
	TaskID         string         `json:"taskId"`
	InputResponses map[string]any `json:"inputResponses,omitempty"`
}

type extTask struct {
	mcp.ResultBase
	ResultType     string                     `json:"resultType"`
	TaskID         string                     `json:"taskId"`
	Status         string                     `json:"status"`
	StatusMessage  string                     `json:"statusMessage"`
	CreatedAt      string                     `json:"createdAt"`
	TTLMs          *int64                     `json:"ttlMs"`
	PollIntervalMs int64                      `json:"pollIntervalMs"`
	InputRequests  map[string]json.RawMessage `json:"inputRequests"`
	Result         *struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	} `json:"result"`
}

// inputRequest is one entry of inputRequests.
type inputRequest struct {
	Method string `json:"method"`
	Params struct {
		Mode            string         `json:"mode"`
		Message         string         `json:"message"`
		RequestedSchema map[string]any `json:"requestedSchema"`
	} `json:"params"`
}

// extRig is a MAS (the scripted team, whose alice asks the operator a
// question) served over HTTP with two operators, ann and bea.
type extRig struct {
	*env
	url      string
	ann, bea string
}

func newExtRig(t *testing.T) *extRig {
	r := &extRig{}
	var url string
	r.env, r.ann, r.bea, url = newTwoOperatorEnv(t)
	r.url = url + "/mcp"
	return r
}

// client connects a 2026-07-28 client with token; ext declares the tasks
// extension; elicit, if set, answers input requests.
func (r *extRig) client(token string, ext bool, elicit func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error)) *mcp.ClientSession {
	r.t.Helper()
	opts := &mcp.ClientOptions{ElicitationHandler: elicit, Capabilities: &mcp.ClientCapabilities{}}
	if ext {
		opts.Capabilities.AddExtension(tasksExt, nil)
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "ext-client", Version: "1"}, opts)
	for _, m := range []string{"tasks/get", "tasks/update", "tasks/cancel"} {
		if err := mcp.AddSendingCustomMethod[*extTaskParams, *extTask](c, m); err != nil {
			r.t.Fatal(err)
		}
	}
	return r.connect(c, token)
}

// connect connects c to the server as a 2026-07-28 client with token's
// operator, without transport retries.
func (r *extRig) connect(c *mcp.Client, token string) *mcp.ClientSession {
	r.t.Helper()
	tr := &http.Transport{}
	r.t.Cleanup(tr.CloseIdleConnections)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: r.url,
		HTTPClient: &http.Client{Transport: teststack.Bearer{Token: token, Base: tr}}, MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// addTask calls add_task over the wire as a 2026-07-28 client declaring
// the extension (go-sdk's client reads every tools/call answer as a
// CallToolResult, which has no room for the task).
func (r *extRig) addTask(token, name string) extTask {
	r.t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": map[string]any{
		"name": "add_task", "arguments": map[string]any{"task_name": name, "task_intention": "write the report"},
		"_meta": map[string]any{
			"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
			"io.modelcontextprotocol/clientCapabilities": map[string]any{"extensions": map[string]any{tasksExt: map[string]any{}}},
		},
	}})
	req, _ := http.NewRequest(http.MethodPost, r.url, bytes.NewReader(body))
	for k, v := range map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
		"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "add_task", "Authorization": "Bearer " + token} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out struct {
		Result extTask        `json:"result"`
		Error  *jsonrpc.Error `json:"error"`
	}
	if err := json.Unmarshal(b, &out); err != nil || out.Error != nil {
		r.t.Fatalf("add_task: %v: %s", err, b)
	}
	return out.Result
}

func call(t *testing.T, cs *mcp.ClientSession, method string, p *extTaskParams) (*extTask, error) {
	t.Helper()
	return mcp.CallCustomMethod[*extTaskParams, *extTask](context.Background(), cs, method, p)
}

// openQuestion waits for the operator's first open question of the task.
func (r *extRig) openQuestion(op, taskID string) engine.InboxEntry {
	r.t.Helper()
	var q engine.InboxEntry
	r.stack.WaitFor("a question for the operator", func() bool {
		in, _ := r.stack.Sys.Inbox(op)
		i := slices.IndexFunc(in, func(e engine.InboxEntry) bool { return e.AwaitingReply && e.TaskID == taskID })
		if i >= 0 {
			q = in[i]
		}
		return i >= 0
	})
	return q
}

func rpcCode(err error) int64 {
	var we *jsonrpc.Error
	if errors.As(err, &we) {
		return we.Code
	}
	return 0
}

// TestTasksExtension: a 2026-07-28 client declaring the extension gets
// add_task's task at once; tasks/get reports it working, then
// input_required with alice's question as an elicitation form keyed by
// its message_id; tasks/update answers it (alice reads the answer; a
// second answer is refused) and the task completes with add_task's
// result. Another operator, and a client that does not declare the
// extension, are refused.
func TestTasksExtension(t *testing.T) {
	r := newExtRig(t)
	ann := r.client(tokenAnn, true, nil)
	bea := r.client(tokenBea, true, nil)
	plain := r.client(tokenAnn, false, nil)

	created := r.addTask(tokenAnn, "report")
	if created.ResultType != "task" || created.Status != "working" || created.TaskID == "" || created.TTLMs != nil || created.PollIntervalMs <= 0 {
		t.Fatalf("add_task answered %+v: want a working task (resultType task, ttlMs null)", created)
	}
	id := created.TaskID
	if got := r.stack.Task(id).Operator; got != r.ann {
		t.Errorf("the task's operator is %s, want ann (%s)", got, r.ann)
	}
	got, err := call(t, ann, "tasks/get", &extTaskParams{TaskID: id})
	if err != nil || got.ResultType != "complete" || (got.Status != "working" && got.Status != "input_required") {
		t.Fatalf("tasks/get: %+v, %v: want working (or already input_required)", got, err)
	}

	q := r.openQuestion(r.ann, id)
	got, err = call(t, ann, "tasks/get", &extTaskParams{TaskID: id})
	if err != nil || got.Status != "input_required" {
		t.Fatalf("tasks/get with alice's question open: %+v, %v: want input_required", got, err)
	}
	var ir inputRequest
	if err := json.Unmarshal(got.InputRequests[q.MessageID], &ir); err != nil {
		t.Fatalf("inputRequests %s: want the question %s: %v", got.InputRequests, q.MessageID, err)
	}
	if ir.Method != "elicitation/create" || ir.Params.Message != scripted.OperatorQuestion || ir.Params.RequestedSchema["properties"] == nil {
		t.Errorf("input request %+v: want alice's question as an elicitation form", ir)
	}

	// Bea sees none of it; a client without the extension is refused.
	for _, m := range []string{"tasks/get", "tasks/update", "tasks/cancel"} {
		// (A client adds its _meta to the params it is given: one each.)
		p := func() *extTaskParams {
			return &extTaskParams{TaskID: id, InputResponses: map[string]any{q.MessageID: map[string]any{"action": "accept", "content": map[string]any{"reply": "bea here"}}}}
		}
		if _, err := call(t, bea, m, p()); rpcCode(err) != jsonrpc.CodeInvalidParams || !strings.Contains(err.Error(), "no such task") {
			t.Errorf("bea's %s of ann's task: %v: want no such task", m, err)
		}
		if _, err := call(t, plain, m, p()); rpcCode(err) != -32021 {
			t.Errorf("%s without the extension declared: %v: want -32021", m, err)
		}
	}

	answer := func() *extTaskParams {
		return &extTaskParams{TaskID: id, InputResponses: map[string]any{q.MessageID: map[string]any{"action": "accept", "content": map[string]any{"reply": "Markdown, please."}}}}
	}
	if ack, err := call(t, ann, "tasks/update", answer()); err != nil || ack.ResultType != "complete" {
		t.Fatalf("tasks/update: %+v, %v", ack, err)
	}
	if _, err := call(t, ann, "tasks/update", answer()); err == nil || !strings.Contains(err.Error(), "already answered") {
		t.Errorf("answering again: %v: want already answered", err)
	}
	r.stack.WaitFor("the task to end", func() bool {
		s := r.stack.Task(id).ExecutionState
		return s == engine.StateFinished || s == engine.StateFailed
	})
	if !slices.ContainsFunc(r.team.OperatorAnswers(), func(s string) bool { return strings.Contains(s, "Markdown, please.") }) {
		t.Errorf("alice read %q: want the answer given by tasks/update", r.team.OperatorAnswers())
	}
	got, err = call(t, ann, "tasks/get", &extTaskParams{TaskID: id})
	if err != nil || got.Status != "completed" || got.Result == nil || got.Result.IsError || len(got.Result.Content) == 0 ||
		!strings.Contains(got.Result.Content[0].Text, scripted.TaskSummary) {
		t.Errorf("tasks/get after the end: %+v, %v: want completed with the summary", got, err)
	}
}

// TestTasksExtensionCancel: tasks/cancel acknowledges and cancels the MAS
// task; tasks/get then reports cancelled, also after a restart (the MCP
// task is the durable MAS task).
func TestTasksExtensionCancel(t *testing.T) {
	r := newExtRig(t)
	ann := r.client(tokenAnn, true, nil)
	id := r.addTask(tokenAnn, "to cancel").TaskID
	if ack, err := call(t, ann, "tasks/cancel", &extTaskParams{TaskID: id}); err != nil || ack.ResultType != "complete" {
		t.Fatalf("tasks/cancel: %+v, %v", ack, err)
	}
	r.stack.WaitFor("the task to end", func() bool { return r.stack.Task(id).ExecutionState == engine.StateFailed })
	if got, err := call(t, ann, "tasks/get", &extTaskParams{TaskID: id}); err != nil || got.Status != "cancelled" {
		t.Errorf("tasks/get after tasks/cancel: %+v, %v: want cancelled", got, err)
	}

	r.stack.Restart()
	srv, err := server.New(server.Config{System: r.stack.Sys, Logger: r.stack.Log,
		HTTP: server.HTTPConfig{Tokens: map[string]string{tokenAnn: r.ann, tokenBea: r.bea}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	r.url = ts.URL + "/mcp"
	if got, err := call(t, r.client(tokenAnn, true, nil), "tasks/get", &extTaskParams{TaskID: id}); err != nil || got.Status != "cancelled" {
		t.Errorf("tasks/get after a restart: %+v, %v: want cancelled", got, err)
	}
	if _, err := call(t, r.client(tokenBea, true, nil), "tasks/get", &extTaskParams{TaskID: id}); err == nil {
		t.Errorf("bea's tasks/get after a restart: want no such task")
	}
}

// TestWaitForUpdatesInputRequired: a 2026-07-28 client that takes
// elicitation calls wait_for_updates while alice's question is open: the
// server answers input_required with the question, go-sdk's client asks
// its elicitation handler and retries with the answer, which reaches
// alice; the retry then waits as usual. A client without elicitation
// just waits.
func TestWaitForUpdatesInputRequired(t *testing.T) {
	r := newExtRig(t)
	asked := make(chan *mcp.ElicitParams, 4)
	ann := r.client(tokenAnn, false, func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		asked <- req.Params
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"reply": "Plain text."}}, nil
	})
	id := r.addTask(tokenAnn, "report").TaskID
	q := r.openQuestion(r.ann, id)

	noForms := r.client(tokenAnn, false, nil)
	res, err := noForms.CallTool(context.Background(), &mcp.CallToolParams{Name: "wait_for_updates",
		Arguments: map[string]any{"task_id": id, "timeout_seconds": 1, "cursor": 0}})
	if err != nil || res.IsError || len(res.InputRequests) > 0 {
		t.Fatalf("wait_for_updates without elicitation: %+v, %v: want an ordinary wait", res, err)
	}

	res, err = ann.CallTool(context.Background(), &mcp.CallToolParams{Name: "wait_for_updates",
		Arguments: map[string]any{"task_id": id, "timeout_seconds": 5}})
	if err != nil || res.IsError {
		t.Fatalf("wait_for_updates: %+v, %v", res, err)
	}
	select {
	case p := <-asked:
		if p.Message != scripted.OperatorQuestion {
			t.Errorf("the client was asked %q, want alice's question", p.Message)
		}
	default:
		t.Fatal("the client's elicitation handler was never asked")
	}
	in, _ := r.stack.Sys.Inbox(r.ann)
	for _, e := range in {
		if e.MessageID == q.MessageID && e.AwaitingReply {
			t.Errorf("the question still awaits a reply after the round trip")
		}
	}
	r.stack.WaitFor("alice to read the answer", func() bool {
		return slices.ContainsFunc(r.team.OperatorAnswers(), func(s string) bool { return strings.Contains(s, "Plain text.") })
	})
}

// TestTasksExtensionApprovals: the risk gate's approval question and a
// form for a call's missing arguments are a task's inputRequests, each
// with its form (approve and note; the tool's missing field), and
// tasks/update answers them as answer_approval would: the approved call
// runs, and the form's value completes the other call's arguments.
func TestTasksExtensionApprovals(t *testing.T) {
	// A downstream server: write (unannotated, so it waits for approval)
	// and greet (read-only; its required name is left out by the agent).
	made := make(chan string, 2)
	ds := mcp.NewServer(&mcp.Implementation{Name: "fixture", Version: "1"}, nil)
	mcp.AddTool(ds, &mcp.Tool{Name: "write", Description: "write a line"},
		func(_ context.Context, _ *mcp.CallToolRequest, in struct {
			Text string `json:"text"`
		}) (*mcp.CallToolResult, any, error) {
			made <- "write " + in.Text
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "written"}}}, nil, nil
		})
	mcp.AddTool(ds, &mcp.Tool{Name: "greet", Description: "greet someone", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in struct {
			Name string `json:"name" jsonschema:"who to greet"`
		}) (*mcp.CallToolResult, any, error) {
			made <- "greet " + in.Name
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello " + in.Name}}}, nil, nil
		})
	dts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return ds }, nil))
	t.Cleanup(dts.Close)

	user := &scripted.ToolUser{Calls: []scripted.Call{
		{Server: "fixture", Tool: "write", Args: map[string]any{"text": "risky"}},
		{Server: "fixture", Tool: "greet", Args: map[string]any{}},
	}}
	set, err := prompts.Load("en", "")
	if err != nil {
		t.Fatal(err)
	}
	pool := downstream.NewPool(&downstream.Config{Servers: map[string]downstream.ServerConfig{
		"fixture": {URL: dts.URL, Timeout: downstream.Duration(time.Minute)},
	}}, nil)
	exec, err := downstream.NewExecutor(downstream.ExecutorConfig{Pool: pool, Texts: set, ConfirmTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	st := teststack.New(t, teststack.Options{Handler: user.Handle, Tools: pool, ToolExecutor: exec})
	t.Cleanup(func() { _ = pool.Close() })
	ann, err := st.Sys.AddOperator("ann")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{System: st.Sys, Logger: st.Log, HTTP: server.HTTPConfig{Tokens: map[string]string{tokenAnn: ann}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	pool.SetOperatorElicit(srv.ElicitOperator)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	r := &extRig{env: &env{t: t, stack: st, srv: srv}, url: ts.URL + "/mcp", ann: ann}
	cs := r.client(tokenAnn, true, nil)

	id := r.addTask(tokenAnn, "tools").TaskID
	w, err := st.Sys.CreateAgent(engine.AgentConfig{Template: "researcher", Name: "worker", Tools: []string{"fixture"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Sys.AgentInstruction(ann, engine.AgentInstruction{Action: "add_task_participant", TaskID: id, Agents: []string{w}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Sys.TaskInstruction(ann, engine.TaskInstruction{Action: "add_stage", TaskID: id,
		Stages: []engine.StageSpec{{StageIntention: "use tools", AgentAllocation: map[string]string{w: "make the calls"}}}}); err != nil {
		t.Fatal(err)
	}

	for _, step := range []struct {
		field   string         // the form's field to expect
		content map[string]any // the answer
		want    string         // the call made
	}{
		{"approve", map[string]any{"approve": true, "note": "fine"}, "write risky"},
		{"name", map[string]any{"name": "Ann"}, "greet Ann"},
	} {
		q := r.openQuestion(ann, id)
		got, err := call(t, cs, "tasks/get", &extTaskParams{TaskID: id})
		if err != nil || got.Status != "input_required" {
			t.Fatalf("tasks/get with a question open: %+v, %v", got, err)
		}
		var ir inputRequest
		if err := json.Unmarshal(got.InputRequests[q.MessageID], &ir); err != nil {
			t.Fatalf("inputRequests %s: want %s: %v", got.InputRequests, q.MessageID, err)
		}
		props, _ := ir.Params.RequestedSchema["properties"].(map[string]any)
		if props[step.field] == nil {
			t.Fatalf("the form of %q has fields %v, want %s", q.Content, props, step.field)
		}
		if _, err := call(t, cs, "tasks/update", &extTaskParams{TaskID: id,
			InputResponses: map[string]any{q.MessageID: map[string]any{"action": "accept", "content": step.content}}}); err != nil {
			t.Fatalf("tasks/update: %v", err)
		}
		select {
		case m := <-made:
			if m != step.want {
				t.Errorf("the call made: %q, want %q", m, step.want)
			}
		case <-time.After(30 * time.Second): // a bound for a hang
			t.Fatalf("no call was made after answering %q\n%s", q.Content, st.Dump())
		}
	}
}

type listedTasks struct {
	mcp.ResultBase
	Tasks []struct {
		TaskID        string `json:"taskId"`
		Status        string `json:"status"`
		StatusMessage string `json:"statusMessage"`
	} `json:"tasks"`
	NextCursor string `json:"nextCursor"`
}

type listTasksParams struct {
	mcp.ParamsBase
	Cursor string `json:"cursor,omitempty"`
}

// TestTasksListPaged: tasks/list pages the operator's tasks (MCP tasks
// are kept, ttl null: the list only grows) by limits.list_items, each
// status message cut, and the pages reach every task once; another
// operator's tasks are in none of them.
func TestTasksListPaged(t *testing.T) {
	r := newExtRig(t)
	const n = 70
	summary := strings.Repeat("s", 16<<10)
	want := map[string]bool{}
	for i := range n {
		id, err := r.stack.Sys.AddTask(r.ann, engine.AddTaskRequest{TaskName: "t", TaskIntention: "do it"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.stack.Sys.TaskInstruction(r.ann, engine.TaskInstruction{Action: engine.ActionCancelTask, TaskID: id, Summary: summary}); err != nil {
			t.Fatal(i, err)
		}
		want[id] = true
	}
	list := func(token string) (pages, biggest int, got map[string]int) {
		c := mcp.NewClient(&mcp.Implementation{Name: "lister", Version: "1"}, nil)
		if err := mcp.AddSendingCustomMethod[*listTasksParams, *listedTasks](c, "tasks/list"); err != nil {
			t.Fatal(err)
		}
		cs := r.httpClient(c, token)
		got = map[string]int{}
		cursor := ""
		for pages < n+2 {
			res, err := mcp.CallCustomMethod[*listTasksParams, *listedTasks](context.Background(), cs, "tasks/list", &listTasksParams{Cursor: cursor})
			if err != nil {
				t.Fatalf("tasks/list: %v", err)
			}
			pages++
			biggest = max(biggest, len(res.Tasks))
			for _, tk := range res.Tasks {
				got[tk.TaskID]++
			}
			if res.NextCursor == "" {
				break
			}
			cursor = res.NextCursor
		}
		return pages, biggest, got
	}
	pages, biggest, got := list(tokenAnn)
	for id := range want {
		if got[id] != 1 {
			t.Errorf("task %s listed %d times over the pages, want once", id, got[id])
			break
		}
	}
	if biggest > 64 {
		t.Errorf("tasks/list answered %d tasks (%d KB of summaries) in one result over %d page(s): want pages of at most limits.list_items (64) with nextCursor",
			biggest, biggest*len(summary)>>10, pages)
	}
	if _, _, beas := list(tokenBea); len(beas) != 0 {
		t.Errorf("bea's tasks/list shows %d of ann's tasks", len(beas))
	}
}

// httpClient connects c over streamable HTTP (protocol 2025-11-25) with token.
func (r *extRig) httpClient(c *mcp.Client, token string) *mcp.ClientSession {
	r.t.Helper()
	tr := &http.Transport{}
	r.t.Cleanup(tr.CloseIdleConnections)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: r.url,
		HTTPClient: &http.Client{Transport: teststack.Bearer{Token: token, Base: tr}}, MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = cs.Close() })
	return cs
}
