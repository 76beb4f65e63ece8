package server_test

import (
	"context"
	"encoding/json"
	"strings"

	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
	"github.com/mas-mcp/mas-mcp/server"
)

// env is a MAS on the fake LLM (scripted team), its MCP server, and one
// client connected over in-memory transports.
type env struct {
	t       *testing.T
	stack   *teststack.Stack
	team    *scripted.Team
	srv     *server.Server
	client  *mcp.ClientSession
	updates chan string // URIs of resources/updated notifications
	logs    chan *mcp.LoggingMessageParams
}

func newEnv(t *testing.T) *env {
	t.Helper()
	team := scripted.NewTeam()
	team.AskOperator = true
	st := teststack.New(t, teststack.Options{Handler: team.Handle})
	srv, err := server.New(server.Config{System: st.Sys, Logger: st.Log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	e := &env{t: t, stack: st, team: team, srv: srv, updates: make(chan string, 4096), logs: make(chan *mcp.LoggingMessageParams, 4096)}
	ct, stt := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := srv.MCP().Connect(ctx, stt, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	client := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
			select {
			case e.updates <- r.Params.URI:
			default:
			}
		},
		LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
			select {
			case e.logs <- r.Params:
			default:
			}
		},
	})
	cs, err := client.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	e.client = cs
	return e
}

// call calls a tool and decodes its structured output into out.
func (e *env) call(name string, args any, out any) *mcp.CallToolResult {
	e.t.Helper()
	res, err := e.client.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		e.t.Fatalf("%s: protocol error: %v", name, err)
	}
	if res.IsError {
		e.t.Fatalf("%s: tool error: %s", name, resultText(res))
	}
	if out != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			e.t.Fatalf("%s: structured output %s: %v", name, b, err)
		}
	}
	return res
}

func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// read reads a resource's JSON document into out.
func (e *env) read(uri string, out any) {
	e.t.Helper()
	res, err := e.client.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: uri})
	if err != nil {
		e.t.Fatalf("read %s: %v", uri, err)
	}
	if err := json.Unmarshal([]byte(res.Contents[0].Text), out); err != nil {
		e.t.Fatalf("read %s: %v", uri, err)
	}
}

// TestOperatorRunsATaskThroughMCP is the whole operator flow over MCP:
// hand over a task, see an agent's question arrive in the inbox, answer it,
// watch the task finish — with resource subscriptions and wait_for_updates.
func TestOperatorRunsATaskThroughMCP(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if err := e.client.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}

	var added server.AddTaskOut
	e.call("add_task", map[string]any{"task_name": "report", "task_intention": "Research a topic and write a report."}, &added)
	if added.TaskID == "" || added.ResourceURI != "mas://tasks/"+added.TaskID {
		t.Fatalf("add_task = %+v", added)
	}
	if err := e.client.Subscribe(ctx, &mcp.SubscribeParams{URI: added.ResourceURI}); err != nil {
		t.Fatal(err)
	}

	// Wait for alice's question, following the MAS with wait_for_updates.
	var question engine.InboxEntry
	var cursor uint64
	deadline := time.Now().Add(30 * time.Second)
	for question.MessageID == "" {
		if time.Now().After(deadline) {
			t.Fatalf("no question reached the operator\n%s", e.stack.Dump())
		}
		var inbox server.GetInboxOut
		e.call("get_inbox", map[string]any{"only_awaiting_reply": true}, &inbox)
		for _, m := range inbox.Messages {
			if m.Content == scripted.OperatorQuestion {
				question = m
			}
		}
		var w server.WaitOut
		e.call("wait_for_updates", map[string]any{"cursor": cursor, "timeout_seconds": 5}, &w)
		cursor = w.Cursor
	}
	if !question.Waiting || !question.AwaitingReply || question.TaskID != added.TaskID {
		t.Errorf("question = %+v, want a waiting message of the task awaiting a reply", question)
	}

	const answer = "Use markdown with one section per finding."
	var sent server.SendMessageOut
	e.call("send_message", map[string]any{"task_id": added.TaskID, "receiver": []string{question.SenderID}, "content": answer}, &sent)
	if len(sent.Messages) != 1 || !sent.Messages[0].Answers {
		t.Errorf("send_message = %+v, want one message answering the waiting question", sent)
	}

	// The task runs to its end; its resource is updated on the way.
	var task server.TaskDocument
	e.stack.WaitFor("the task to finish", func() bool {
		e.read(added.ResourceURI, &task)
		return task.ExecutionState == engine.StateFinished
	})
	if task.TaskSummary != scripted.TaskSummary || len(task.StageList) != 2 {
		t.Errorf("task: summary %q, %d stages", task.TaskSummary, len(task.StageList))
	}
	if got := e.team.OperatorAnswers(); len(got) != 1 || !strings.Contains(got[0], answer) {
		t.Errorf("alice read %q from the operator, want the answer", got)
	}
	updates := drain(e.updates)
	if !contains(updates, added.ResourceURI) {
		t.Errorf("no resources/updated for %s (got %d updates)", added.ResourceURI, len(updates))
	}
	var logged int
	for range len(e.logs) {
		<-e.logs
		logged++
	}
	if logged == 0 {
		t.Error("no logging notification of the agents' steps")
	}
	var inbox server.GetInboxOut
	e.call("get_inbox", nil, &inbox)
	if inbox.AwaitingReply != 0 {
		t.Errorf("inbox still has %d message(s) awaiting a reply", inbox.AwaitingReply)
	}
	for _, s := range []string{teststack.SentinelKey} {
		if strings.Contains(e.stack.Logs.String(), s) {
			t.Error("the API key appears in the logs")
		}
	}
}

func drain(c chan string) []string {
	var out []string
	for {
		select {
		case s := <-c:
			out = append(out, s)
		default:
			return out
		}
	}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}
