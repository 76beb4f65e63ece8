package engine_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
)

// budgetRun is the scripted team (flow_test.go) on a task with a budget.
// Every LLM call the fake receives while the task is held for its budget
// is recorded: there must be none.
type budgetRun struct {
	t    *testing.T
	s    *stack
	b    *teamBrain
	task string

	mu         sync.Mutex
	whileHeld  []int // fake call numbers received while the task was held
	heldBefore bool
}

func startBudgetTask(t *testing.T, limits engine.BudgetLimits, cfg engine.BudgetConfig) *budgetRun {
	t.Helper()
	r := &budgetRun{t: t, b: newTeamBrain()}
	r.b.override = func(c *fakellm.Call) (fakellm.Reply, bool) {
		r.b.mu.Lock()
		id := r.b.taskID
		r.b.mu.Unlock()
		if st, ok := r.s.sys.Task(id); ok && st.Paused {
			r.mu.Lock()
			r.whileHeld = append(r.whileHeld, c.N)
			r.mu.Unlock()
		}
		return fakellm.Reply{}, false
	}
	r.s = newStack(t, stackOpts{handler: r.b.handle, budgets: cfg})
	r.b.s = r.s
	r.b.mu.Lock()
	id, err := r.s.sys.AddTask(r.s.sys.OperatorID(), engine.AddTaskRequest{
		TaskName: "report", TaskIntention: "Research a topic and write a report.", Budget: &limits,
	})
	r.b.taskID, r.task = id, id
	r.b.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// question waits for the budget question in the operator's inbox.
func (r *budgetRun) question() engine.InboxEntry {
	r.t.Helper()
	var q engine.InboxEntry
	r.s.waitFor("the budget question in the operator's inbox", func() bool {
		in, err := r.s.sys.Inbox(r.s.sys.OperatorID())
		if err != nil {
			r.t.Fatal(err)
		}
		for _, e := range in {
			if e.TaskID == r.task && e.AwaitingReply && strings.Contains(e.Content, "[Budget reached]") {
				q = e
				return true
			}
		}
		return false
	})
	return q
}

// settledPaused waits until the task is held and its manager, with steps
// left in it, shows "paused": its loop looked at them and started none.
func (r *budgetRun) settledPaused() engine.TaskState {
	r.t.Helper()
	r.s.waitFor("the task held and its manager paused", func() bool {
		st := r.s.task(r.task)
		a, _ := r.s.sys.Agent(r.s.sys.ManagerID())
		return st.Paused && st.Budget.Held != "" && a.WorkingState == engine.WorkingPaused
	})
	return r.s.task(r.task)
}

func (r *budgetRun) waitEnded() engine.TaskState {
	r.t.Helper()
	r.s.waitFor("the task to end", func() bool {
		st := r.s.task(r.task).ExecutionState
		return st == engine.StateFinished || st == engine.StateFailed
	})
	return r.s.task(r.task)
}

func (r *budgetRun) noCallsWhileHeld() {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.whileHeld) > 0 {
		r.t.Errorf("LLM calls %v of the task started while it was held for its budget", r.whileHeld)
	}
}

func TestBudgetPausesTheTaskUntilTheOperatorRaisesIt(t *testing.T) {
	r := startBudgetTask(t, engine.BudgetLimits{Tokens: new(1)}, engine.BudgetConfig{})
	q := r.question()
	held := r.settledPaused()
	if n := len(r.s.llm.Calls()); n != 1 {
		t.Errorf("the fake saw %d calls by the time the task was held, want 1 (the one that reached the budget)", n)
	}
	if !strings.Contains(held.Budget.Held, "its budget is 1") || held.Budget.HeldFor != "task" {
		t.Errorf("held for %q (%s), want the task's token budget of 1", held.Budget.Held, held.Budget.HeldFor)
	}
	if left := held.BudgetLeft(); left == nil || left.Tokens == nil || *left.Tokens != 0 || left.Cost != nil {
		t.Errorf("budget left = %+v, want 0 tokens and no cost limit", left)
	}
	if q.SenderID != held.TaskManager || !strings.Contains(q.Content, "answer_approval") {
		t.Errorf("question from %s: %q; want it from the task's manager, naming answer_approval", q.SenderID, q.Content)
	}

	res, err := r.s.sys.Query(r.s.sys.OperatorID(), engine.AskInfoQuery{Type: engine.QueryTaskInfo, TaskID: r.task})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"- usage: ", "- budget: 1 tokens (0 left)", "- paused for its budget: the task used"} {
		if !strings.Contains(res.Markdown, w) {
			t.Errorf("ask_info task_info lacks %q:\n%s", w, res.Markdown)
		}
	}
	if ti := res.Data.(engine.TaskInfo); ti.Budget == nil || ti.Budget.Tokens != 1 || ti.BudgetLeft == nil || ti.Usage.Calls != 1 {
		t.Errorf("ask_info data: budget %+v left %+v usage %+v", ti.Budget, ti.BudgetLeft, ti.Usage)
	}

	const raise = 100_000_000
	if err := r.s.sys.AnswerApproval(r.s.sys.OperatorID(), q.MessageID, engine.Decision{Approve: true, Arguments: map[string]any{"tokens": float64(raise)}}); err != nil {
		t.Fatal(err)
	}
	end := r.waitEnded()
	if end.ExecutionState != engine.StateFinished {
		t.Fatalf("task %s (%q), want finished once the budget was raised\n%s", end.ExecutionState, end.TaskSummary, r.s.dump())
	}
	used := held.Usage.TotalTokens
	if end.Budget.Tokens != used+raise || end.Budget.Held != "" || end.Paused {
		t.Errorf("budget after the raise: tokens %d held %q paused %v; want %d (used %d + %d), not held", end.Budget.Tokens, end.Budget.Held, end.Paused, used+raise, used, raise)
	}
	if left := end.BudgetLeft(); left == nil || left.Tokens == nil || *left.Tokens != end.Budget.Tokens-end.Usage.TotalTokens {
		t.Errorf("budget left = %+v, want %d tokens", left, end.Budget.Tokens-end.Usage.TotalTokens)
	}
	if got := len(r.s.llm.Calls()); got < 10 {
		t.Errorf("only %d LLM calls: the team did not carry on after the raise", got)
	}
	r.noCallsWhileHeld()
}

func TestBudgetDeclinedEndsTheTaskWithTheReason(t *testing.T) {
	r := startBudgetTask(t, engine.BudgetLimits{Tokens: new(1)}, engine.BudgetConfig{})
	q := r.question()
	r.settledPaused()
	if err := r.s.sys.AnswerApproval(r.s.sys.OperatorID(), q.MessageID, engine.Decision{Approve: false, Note: "too expensive"}); err != nil {
		t.Fatal(err)
	}
	end := r.waitEnded()
	if end.ExecutionState != engine.StateFailed {
		t.Fatalf("task %s, want failed once the operator declined", end.ExecutionState)
	}
	for _, w := range []string{"budget", "declined", "its budget is 1"} {
		if !strings.Contains(end.TaskSummary, w) {
			t.Errorf("summary %q lacks %q", end.TaskSummary, w)
		}
	}
	if n := len(r.s.llm.Calls()); n != 1 {
		t.Errorf("the fake saw %d calls, want only the one that reached the budget", n)
	}
	r.noCallsWhileHeld()
}

// A small raise is reached again and asked about again; set_budget then
// lifts the limit, the open question expires and the task finishes.
// resume_task is refused while the budget is reached, and bad limits name
// their field.
func TestSetBudgetResumesAHeldTask(t *testing.T) {
	r := startBudgetTask(t, engine.BudgetLimits{Tokens: new(1)}, engine.BudgetConfig{})
	op := r.s.sys.OperatorID()
	q := r.question()
	r.settledPaused()

	_, err := r.s.sys.TaskInstruction(op, engine.TaskInstruction{Action: engine.ActionResumeTask, TaskID: r.task})
	if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), "budget is reached") {
		t.Errorf("resume_task while the budget is reached: %v, want it refused naming the budget", err)
	}
	for _, c := range []struct {
		limits engine.BudgetLimits
		want   string
	}{
		{engine.BudgetLimits{Tokens: new(-5)}, "budget.tokens: -5: must not be negative"},
		{engine.BudgetLimits{AgentTokens: new(-1)}, "budget.agent_tokens: -1: must not be negative"},
		{engine.BudgetLimits{Cost: new(2.5)}, "budget.cost: no price table"},
		{engine.BudgetLimits{}, "budget: is empty"},
	} {
		_, err := r.s.sys.TaskInstruction(op, engine.TaskInstruction{Action: engine.ActionSetBudget, TaskID: r.task, Budget: &c.limits})
		if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("set_budget %+v: %v, want %q", c.limits, err, c.want)
		}
		if c.want == "budget: is empty" {
			continue // a task with the default budget: fine for add_task
		}
		_, err = r.s.sys.AddTask(op, engine.AddTaskRequest{TaskName: "n", TaskIntention: "i", Budget: &c.limits})
		if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("add_task with %+v: %v, want %q", c.limits, err, c.want)
		}
	}
	if _, err := r.s.sys.TaskInstruction(r.s.sys.ManagerID(), engine.TaskInstruction{Action: engine.ActionSetBudget, TaskID: r.task, Budget: &engine.BudgetLimits{Tokens: new(0)}}); !errors.Is(err, engine.ErrForbidden) {
		t.Errorf("set_budget by the manager agent: %v, want forbidden", err)
	}

	// Approve by 1 token: the next call reaches the raised limit again.
	if err := r.s.sys.AnswerApproval(op, q.MessageID, engine.Decision{Approve: true, Note: "just 1"}); err != nil {
		t.Fatal(err)
	}
	again := r.question() // q is answered: this is a new one
	held := r.settledPaused()
	if n := len(r.s.llm.Calls()); n != 2 {
		t.Errorf("the fake saw %d calls, want 2 (one per raise)", n)
	}
	if held.Budget.Tokens <= 1 {
		t.Errorf("budget %d: the approval did not raise it", held.Budget.Tokens)
	}

	res, err := r.s.sys.TaskInstruction(op, engine.TaskInstruction{Action: engine.ActionSetBudget, TaskID: r.task, Budget: &engine.BudgetLimits{Tokens: new(0)}})
	if err != nil {
		t.Fatal(err)
	}
	if res.SetBudget == nil || res.SetBudget.Held != "" {
		t.Errorf("set_budget result %+v: still held", res.SetBudget)
	}
	end := r.waitEnded()
	if end.ExecutionState != engine.StateFinished || end.Budget.Tokens != 0 || end.BudgetLeft() != nil {
		t.Errorf("task %s, budget %+v; want finished without a token limit", end.ExecutionState, end.Budget)
	}
	// Nobody waits for the second question's answer any more (it expired,
	// or left the inbox with the ended task).
	r.s.waitFor("the second question to expire", func() bool {
		in, _ := r.s.sys.Inbox(op)
		for _, e := range in {
			if e.MessageID == again.MessageID {
				return !e.AwaitingReply
			}
		}
		return true
	})
	if err := r.s.sys.AnswerApproval(op, again.MessageID, engine.Decision{Approve: true}); err == nil {
		t.Errorf("answering the expired question worked, want it refused")
	}
	r.noCallsWhileHeld()
}

// TestBudgetRaiseKeepsTheOperatorsPause: an operator who pauses a task held
// for its budget takes the pause over: raising the budget then releases
// the hold but does not resume the task; the operator's resume_task does.
func TestBudgetRaiseKeepsTheOperatorsPause(t *testing.T) {
	r := startBudgetTask(t, engine.BudgetLimits{Tokens: new(1)}, engine.BudgetConfig{})
	op := r.s.sys.OperatorID()
	r.question()
	if held := r.settledPaused(); held.PausedFor != "budget" {
		t.Errorf("task held for its budget reads paused_for %q, want \"budget\"", held.PausedFor)
	}
	if _, err := r.s.sys.TaskInstruction(op, engine.TaskInstruction{Action: engine.ActionPauseTask, TaskID: r.task}); err != nil {
		t.Fatal(err)
	}
	if st := r.s.task(r.task); !st.Paused || st.PausedFor != "" {
		t.Fatalf("after the operator's pause: paused=%v for %q, want paused as the operator's", st.Paused, st.PausedFor)
	}
	if _, err := r.s.sys.TaskInstruction(op, engine.TaskInstruction{Action: engine.ActionSetBudget, TaskID: r.task, Budget: &engine.BudgetLimits{Tokens: new(0)}}); err != nil {
		t.Fatal(err)
	}
	if st := r.s.task(r.task); !st.Paused || st.Budget.Held != "" {
		t.Fatalf("after the budget was raised: paused=%v, held %q; want the hold released and the operator's pause kept", st.Paused, st.Budget.Held)
	}
	if _, err := r.s.sys.TaskInstruction(op, engine.TaskInstruction{Action: engine.ActionResumeTask, TaskID: r.task}); err != nil {
		t.Fatal(err)
	}
	if end := r.waitEnded(); end.ExecutionState != engine.StateFinished {
		t.Errorf("task %s after the operator resumed it, want finished", end.ExecutionState)
	}
	r.noCallsWhileHeld()
}
