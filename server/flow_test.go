package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
	"github.com/mas-mcp/mas-mcp/server"
)

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
				question = m.InboxEntry
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
	var answered server.GetInboxOut
	res := e.call("get_inbox", nil, &answered)
	// The answered question is labelled so, its sender named.
	text := res.Content[0].(*mcp.TextContent).Text
	if want := "[answered] from alice (" + question.SenderID + ")"; !strings.Contains(text, want) {
		t.Errorf("get_inbox's text lacks %q:\n%s", want, text)
	}
	for _, m := range answered.Messages {
		if m.MessageID == question.MessageID && (m.SenderName != "alice" || !m.Replied) {
			t.Errorf("the answered question in get_inbox: sender_name %q, replied %v", m.SenderName, m.Replied)
		}
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
