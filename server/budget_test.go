package server_test

import (
	"strings"
	"testing"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/server"
)

// heldQuestion waits until the task is held for its budget and returns the
// open budget question in the operator's inbox.
func heldQuestion(e *env, taskID string) engine.InboxEntry {
	e.t.Helper()
	var q engine.InboxEntry
	e.stack.WaitFor("the task held for its budget, and the question", func() bool {
		st := e.stack.Task(taskID)
		if !st.Paused || st.Budget.Held == "" {
			return false
		}
		in, err := e.stack.Sys.Inbox(e.stack.Sys.OperatorID())
		if err != nil {
			return false
		}
		for _, m := range in {
			if m.TaskID == taskID && m.AwaitingReply && strings.Contains(m.Content, "[Budget reached]") {
				q = m
				return true
			}
		}
		return false
	})
	return q
}

// Budgets over MCP: add_task sets one, the task resource shows usage and
// what is left, answer_approval raises it, set_budget lowers and lifts it,
// and bad limits are refused naming the field.
func TestBudgetOverMCP(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		budget map[string]any
		want   string
	}{
		{map[string]any{"tokens": -5}, "budget.tokens: -5: must not be negative"},
		{map[string]any{"agent_tokens": -1}, "budget.agent_tokens: -1: must not be negative"},
		{map[string]any{"cost": 0.5}, "budget.cost: no price table is configured"},
	} {
		got := e.callErr("add_task", map[string]any{"task_name": "n", "task_intention": "i", "budget": c.budget})
		if !strings.Contains(got, c.want) {
			t.Errorf("add_task budget %v: %q, want %q", c.budget, got, c.want)
		}
	}
	if n := len(e.stack.Sys.Tasks()); n != 1 {
		t.Errorf("%d tasks after refused add_tasks, want only the base task", n)
	}

	var added server.AddTaskOut
	e.call("add_task", map[string]any{"task_name": "report", "task_intention": "Research a topic and write a report.", "budget": map[string]any{"tokens": 1}}, &added)
	q := heldQuestion(e, added.TaskID)

	var doc struct {
		Paused bool `json:"paused"`
		Usage  struct {
			TotalTokens int `json:"total_tokens"`
		} `json:"usage"`
		Budget struct {
			Tokens int    `json:"tokens"`
			Held   string `json:"held"`
		} `json:"budget"`
		BudgetLeft struct {
			Tokens *int `json:"tokens"`
		} `json:"budget_left"`
	}
	e.read("mas://tasks/"+added.TaskID, &doc)
	if !doc.Paused || doc.Budget.Tokens != 1 || doc.Budget.Held == "" || doc.BudgetLeft.Tokens == nil || *doc.BudgetLeft.Tokens != 0 || doc.Usage.TotalTokens < 1 {
		t.Errorf("task resource while held: %+v", doc)
	}

	e.call("answer_approval", map[string]any{"message_id": q.MessageID, "approve": true, "arguments": map[string]any{"tokens": 1_000_000}}, nil)
	e.stack.WaitFor("the task to resume", func() bool { return !e.stack.Task(added.TaskID).Paused })
	if st := e.stack.Task(added.TaskID); st.Budget.Tokens < 1_000_000 || st.Budget.Held != "" {
		t.Errorf("after approve: budget %+v", st.Budget)
	}

	for _, c := range []struct {
		budget map[string]any
		want   string
	}{
		{map[string]any{"tokens": -2}, "budget.tokens: -2: must not be negative"},
		{map[string]any{}, "budget: is empty"},
	} {
		got := e.callErr("manage_task", map[string]any{"action": "set_budget", "task_id": added.TaskID, "budget": c.budget})
		if !strings.Contains(got, c.want) {
			t.Errorf("set_budget %v: %q, want %q", c.budget, got, c.want)
		}
	}
	// Lowered below what was used: held at once, and asked about.
	var out instructionOut
	e.call("manage_task", map[string]any{"action": "set_budget", "task_id": added.TaskID, "budget": map[string]any{"tokens": 1}}, &out)
	if out.Result["held"] == "" {
		t.Errorf("set_budget below the usage: %v, want the task held", out.Result)
	}
	heldQuestion(e, added.TaskID)
	got := e.callErr("manage_task", map[string]any{"action": "resume_task", "task_id": added.TaskID})
	if !strings.Contains(got, "budget is reached") {
		t.Errorf("resume_task while held: %q", got)
	}
	e.call("manage_task", map[string]any{"action": "set_budget", "task_id": added.TaskID, "budget": map[string]any{"tokens": 0}}, &out)
	if st := e.stack.Task(added.TaskID); st.Paused || st.Budget.Held != "" || st.Budget.Tokens != 0 {
		t.Errorf("after set_budget 0: paused %v, budget %+v; want running without a token limit", st.Paused, st.Budget)
	}
}
