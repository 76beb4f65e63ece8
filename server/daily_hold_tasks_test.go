package server_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
)

// TestDailyHoldShowsTheDailyQuestionOnEveryHeldTask: the operator's daily
// budget holds every task of the operator with one question, asked in one
// of them. Every task it holds waits on that question, so each is
// input_required for the operator (tasks/get of protocol 2025-11-25, and
// of the 2026-07-28 extension with the question in its inputRequests),
// not "working" while nothing in it can run; and the question can be
// answered through any of them (tasks/update, or the elicitation
// tasks/result sends, of a task it was not asked in), which releases them
// all.
func TestDailyHoldShowsTheDailyQuestionOnEveryHeldTask(t *testing.T) {
	for _, via := range []string{"tasks/update", "tasks/result"} {
		t.Run(strings.ReplaceAll(via, "/", "_"), func(t *testing.T) { dailyHoldOnEveryTask(t, via) })
	}
}

// dailyHoldOnEveryTask checks the statuses, then answers the daily
// question through the task it was not asked in: by tasks/update
// (2026-07-28), or by the elicitation tasks/result (2025-11-25) puts.
func dailyHoldOnEveryTask(t *testing.T, via string) {
	e, ann, bea, url := newTwoOperatorEnvWith(t, func(o *teststack.Options) { o.Budgets.OperatorDailyTokens = 500 })
	r := &extRig{env: e, url: url + "/mcp", ann: ann, bea: bea}
	cs := r.client(tokenAnn, true, nil)
	// Ann's budget for today is raised well past what the tasks need.
	raise := map[string]any{"approve": true, "note": "1000000"}
	asked := make(chan *mcp.ElicitParams, 4)
	sepc := mcp.NewClient(&mcp.Implementation{Name: "sep-1686", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked <- req.Params
			return &mcp.ElicitResult{Action: "accept", Content: raise}, nil
		},
	})
	for _, m := range []string{"tasks/get", "tasks/result"} {
		if err := mcp.AddSendingCustomMethod[*sepTaskParams, *sepTask](sepc, m); err != nil {
			t.Fatal(err)
		}
	}
	sep := r.httpClient(sepc, tokenAnn)

	first := r.addTask(tokenAnn, "first").TaskID
	e.stack.WaitFor("ann's daily budget to hold her first task", func() bool {
		return e.stack.Task(first).Budget.Held != ""
	})
	// Ann hands over another task: it is held at once, for the same budget.
	second := r.addTask(tokenAnn, "second").TaskID
	e.stack.WaitFor("the second task held too", func() bool {
		st := e.stack.Task(second)
		return st.Paused && st.Budget.Held != ""
	})
	// The daily question: an approval, asked in one of the held tasks.
	var q engine.InboxEntry
	e.stack.WaitFor("the daily budget question", func() bool {
		in, _ := e.stack.Sys.Inbox(ann)
		for _, m := range in {
			if m.AwaitingReply && m.Approval && (m.TaskID == first || m.TaskID == second) {
				q = m
				return true
			}
		}
		return false
	})
	mrtr := r.mrtrClient(tokenAnn)
	for _, id := range []string{first, second} {
		name := e.stack.Task(id).TaskName
		got, err := call(t, cs, "tasks/get", &extTaskParams{TaskID: id})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != "input_required" || got.InputRequests[q.MessageID] == nil {
			t.Errorf("2026-07-28 tasks/get of ann's task %q, held for her daily budget (%q): %s (%s) with %d inputRequests; "+
				"want input_required with the daily budget question %s (asked in task %s), the one thing it waits on",
				name, e.stack.Task(id).Budget.Held, got.Status, got.StatusMessage, len(got.InputRequests), q.MessageID, q.TaskID)
		} else {
			var ir inputRequest
			if err := json.Unmarshal(got.InputRequests[q.MessageID], &ir); err != nil || ir.Method != "elicitation/create" ||
				ir.Params.RequestedSchema["properties"] == nil {
				t.Errorf("task %q: the daily question's input request %s: want an elicitation form (%v)", name, got.InputRequests[q.MessageID], err)
			}
		}
		old, err := mcp.CallCustomMethod[*sepTaskParams, *sepTask](context.Background(), sep, "tasks/get", &sepTaskParams{TaskID: id})
		if err != nil || old.Status != "input_required" {
			t.Errorf("2025-11-25 tasks/get of ann's held task %q: %+v, %v; want input_required", name, old, err)
		}
		// wait_for_updates of the task (2026-07-28, form elicitation)
		// puts the same questions as tasks/get: the daily one too.
		res, err := mrtr.CallTool(context.Background(), &mcp.CallToolParams{Name: "wait_for_updates", Arguments: map[string]any{"task_id": id, "timeout_seconds": 1}})
		if err != nil || res.InputRequests[q.MessageID] == nil {
			t.Errorf("wait_for_updates of ann's task %q, held for her daily budget: %d inputRequests (%v); want the daily budget question %s (asked in task %s) among them",
				name, len(res.InputRequests), err, q.MessageID, q.TaskID)
		}
	}

	// Ann answers through the task the question was not asked in.
	other := first
	if q.TaskID == first {
		other = second
	}
	switch via {
	case "tasks/update":
		ack, err := call(t, cs, "tasks/update", &extTaskParams{TaskID: other, InputResponses: map[string]any{
			q.MessageID: map[string]any{"action": "accept", "content": raise}}})
		if err != nil || ack.ResultType != "complete" {
			t.Fatalf("tasks/update of task %s answering the daily question %s (asked in %s): %+v, %v; want it applied",
				other, q.MessageID, q.TaskID, ack, err)
		}
	case "tasks/result":
		call := e.startTaskResult(sep, other)
		guard := time.NewTimer(20 * time.Second)
		defer guard.Stop()
		select {
		case p := <-asked:
			if p.Message != q.Content || relatedTask(p.Meta) != other {
				t.Errorf("tasks/result of task %s asked %q related to %q; want the daily question %q related to the task", other, p.Message, relatedTask(p.Meta), q.Content)
			}
		case <-call.done:
			t.Fatalf("tasks/result of a held task returned: %v", call.err)
		case <-guard.C:
			t.Fatalf("tasks/result of task %s, held for the daily question %s (asked in %s), put no elicitation", other, q.MessageID, q.TaskID)
		}
	}
	e.stack.WaitFor("the raise to release both tasks", func() bool {
		return e.stack.Task(first).Budget.Held == "" && e.stack.Task(second).Budget.Held == ""
	})
}
