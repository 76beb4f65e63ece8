package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// costly is a think step that costs 100 tokens (80 prompt + 20 completion).
func costly(context.Context, *ExecInput) *Output {
	return &Output{Result: map[string]any{"think": "ok"}, Usage: Usage{Calls: 1, PromptTokens: 80, CompletionTokens: 20, TotalTokens: 100}}
}

// budgetQuestionOf waits for the operator's open budget question in a task.
func budgetQuestionOf(b *testbed, taskID string) InboxEntry {
	b.t.Helper()
	var q InboxEntry
	b.waitFor("the budget question", func() bool {
		in, err := b.sys.Inbox(b.op())
		if err != nil {
			b.t.Fatal(err)
		}
		for _, e := range in {
			if e.TaskID == taskID && e.AwaitingReply && strings.Contains(e.Content, "[Budget reached]") {
				q = e
				return true
			}
		}
		return false
	})
	return q
}

// settleHeld waits until no LLM agent runs a step or has one it may run:
// the agents with steps of held tasks show "paused" (testbed.settle counts
// those steps as runnable).
func settleHeld(b *testbed) {
	b.t.Helper()
	b.waitFor("the MAS to settle with held tasks", func() bool {
		seq := b.sys.EventSeq()
		for _, a := range b.sys.allAgents() {
			a.mu.Lock()
			busy := a.kind == KindLLM && (a.running != "" || a.st.WorkingState == WorkingWorking ||
				(len(a.st.AgentStep.TodoList) > 0 && len(a.st.StepLock) == 0 && a.st.WorkingState != WorkingPaused))
			a.mu.Unlock()
			if busy {
				return false
			}
		}
		return b.sys.EventSeq() == seq
	})
}

// A worker's budget in the task holds it after the step that reaches it;
// its further steps wait until the operator raises the budget.
func TestAgentBudgetHoldsTheTask(t *testing.T) {
	b := newTestbed(t, func(c *Config) { c.Budgets.AgentTokens = 250 })
	b.sc.onAgent("w", SkillPlanning, plan(spec(SkillThink, "t1"), spec(SkillThink, "t2"), spec(SkillThink, "t3"), spec(SkillThink, "t4"), spec(SkillThink, "t5")))
	b.sc.onSkill(SkillThink, costly)
	r := startStage(b)
	q := budgetQuestionOf(b, r.task)
	settleHeld(b)
	st := b.task(r.task)
	if !st.Paused || st.Budget.HeldFor != holdTask || !strings.Contains(st.Budget.Held, "agent "+r.w+" used 300 tokens") {
		t.Fatalf("task paused %v, held %q (%s); want held for agent %s's 300 tokens", st.Paused, st.Budget.Held, st.Budget.HeldFor, r.w)
	}
	if got := len(b.sc.callsOf("w", SkillThink)); got != 3 {
		t.Errorf("%d think steps ran, want 3 (the third reached 250)", got)
	}
	if st.Budget.AgentUsed[r.w] != 300 {
		t.Errorf("agent_tokens_used %v, want %s: 300", st.Budget.AgentUsed, r.w)
	}
	if !strings.Contains(q.Content, "250 tokens per agent") {
		t.Errorf("question %q does not say what approve adds", q.Content)
	}
	// A plain approve doubles the limit past what was used: 300 + 250.
	if err := b.sys.AnswerApproval(b.op(), q.MessageID, Decision{Approve: true}); err != nil {
		t.Fatal(err)
	}
	r.waitComplete()
	st = b.task(r.task)
	if st.Paused || st.Budget.Held != "" || st.Budget.AgentTokens != 550 {
		t.Errorf("after approve: paused %v held %q agent budget %d; want running, 550", st.Paused, st.Budget.Held, st.Budget.AgentTokens)
	}
	if got := len(b.sc.callsOf("w", SkillThink)); got != 5 {
		t.Errorf("%d think steps ran, want all 5 after the raise", got)
	}
}

// A cost budget from the price table ("*" prices every model).
func TestCostBudgetHoldsTheTask(t *testing.T) {
	b := newTestbed(t, func(c *Config) {
		c.Budgets.Prices = map[string]Price{"*": {Prompt: 2, Completion: 10}}
		c.Budgets.TaskCost = 0.0007 // 3 calls: 3 × (80×2 + 20×10)/1e6 = 0.00108
	})
	b.sc.onAgent("w", SkillPlanning, plan(spec(SkillThink, "t1"), spec(SkillThink, "t2"), spec(SkillThink, "t3"), spec(SkillThink, "t4")))
	b.sc.onSkill(SkillThink, costly)
	r := startStage(b)
	budgetQuestionOf(b, r.task)
	settleHeld(b)
	st := b.task(r.task)
	if got := len(b.sc.callsOf("w", SkillThink)); got != 2 {
		t.Errorf("%d think steps ran, want 2 (0.00072 reached 0.0007)", got)
	}
	if !strings.Contains(st.Budget.Held, "cost 0.0007, its cost budget is 0.0007") {
		t.Errorf("held %q, want the cost budget named", st.Budget.Held)
	}
	if left := st.BudgetLeft(); left == nil || left.Cost == nil || *left.Cost != 0 || left.Tokens != nil {
		t.Errorf("budget left %+v, want cost 0 and no token limit", left)
	}
}

// pastTheDailyBudget starts two tasks of the operator, each with a worker
// (w1, w2) planning three costly think steps: 600 tokens in all, past a
// daily budget of 450 (the testbed's Budgets.OperatorDailyTokens).
func pastTheDailyBudget(b *testbed) (t1, t2 string) {
	b.sc.onAgent("w1", SkillPlanning, plan(spec(SkillThink, "a1"), spec(SkillThink, "a2"), spec(SkillThink, "a3")))
	b.sc.onAgent("w2", SkillPlanning, plan(spec(SkillThink, "b1"), spec(SkillThink, "b2"), spec(SkillThink, "b3")))
	b.sc.onSkill(SkillThink, costly)
	w1, w2 := b.newAgent("w1"), b.newAgent("w2")
	t1, t2 = b.newTask("one", w1), b.newTask("two", w2)
	b.addStages(t1, StageSpec{StageIntention: "s1", AgentAllocation: map[string]string{w1: "g1"}})
	b.addStages(t2, StageSpec{StageIntention: "s2", AgentAllocation: map[string]string{w2: "g2"}})
	return t1, t2
}

// openBudgetQuestions is the operator's budget questions awaiting a reply.
func openBudgetQuestions(b *testbed) []InboxEntry {
	in, err := b.sys.Inbox(b.op())
	if err != nil {
		b.t.Fatal(err)
	}
	var open []InboxEntry
	for _, e := range in {
		if e.AwaitingReply && strings.Contains(e.Content, "[Budget reached]") {
			open = append(open, e)
		}
	}
	return open
}

// The operator's daily budget holds all their tasks with one question;
// approve raises today's budget and releases them all.
func TestDailyBudgetHoldsEveryTaskOfTheOperator(t *testing.T) {
	b := newTestbed(t, func(c *Config) { c.Budgets.OperatorDailyTokens = 450 })
	t1, t2 := pastTheDailyBudget(b)

	var held []string
	b.waitFor("both tasks held", func() bool {
		held = held[:0]
		for _, id := range []string{t1, t2} {
			if st := b.task(id); st.Paused && st.Budget.HeldFor == holdDaily {
				held = append(held, id)
			}
		}
		return len(held) == 2
	})
	settleHeld(b)
	// A task added now is held before its manager starts on it.
	t3 := b.newTask("three")
	if st := b.task(t3); !st.Paused || st.Budget.HeldFor != holdDaily {
		t.Errorf("a task added past the daily budget: paused %v held for %q; want held for the daily budget", st.Paused, st.Budget.HeldFor)
	}
	settleHeld(b)
	for _, c := range b.sc.callsOf("manager", "") {
		if c.TaskID == t3 {
			t.Errorf("the manager ran %s in the held task three", c.Skill)
		}
	}
	var open []InboxEntry
	b.waitFor("the daily budget question", func() bool {
		open = openBudgetQuestions(b)
		return len(open) > 0
	})
	if len(open) != 1 || !strings.Contains(open[0].Content, "daily budget") {
		t.Fatalf("open budget questions %v, want one about the daily budget", open)
	}
	ran := len(b.sc.callsOf("w1", SkillThink)) + len(b.sc.callsOf("w2", SkillThink))
	if ran < 5 || ran > 6 {
		t.Errorf("%d think steps ran, want 5 (the fifth reached 450) or 6 (one running on the other task)", ran)
	}
	if err := b.sys.AnswerApproval(b.op(), open[0].MessageID, Decision{Approve: true, Arguments: map[string]any{"tokens": 1000}}); err != nil {
		t.Fatal(err)
	}
	b.waitFor("every task released", func() bool { return !b.task(t1).Paused && !b.task(t2).Paused && !b.task(t3).Paused })
	b.settle()
	if got := len(b.sc.callsOf("w1", SkillThink)) + len(b.sc.callsOf("w2", SkillThink)); got != 6 {
		t.Errorf("%d think steps ran after the raise, want all 6", got)
	}
	if d := b.agent(b.op()).BudgetDay; d == nil || d.Day != b.sys.day() || d.Tokens < 1000 {
		t.Errorf("operator's budget_day %+v, want today's raise of at least 1000", d)
	}
}

// A task held for its budget is asked about again after a restart (the
// question asked before it expired with the process).
func TestBudgetQuestionAskedAgainAfterRestart(t *testing.T) {
	store := NewMemoryStore()
	cfg := func(c *Config) { c.Budgets.TaskTokens = 150; c.Store = store }
	b := newTestbed(t, cfg)
	b.sc.onAgent("w", SkillPlanning, plan(spec(SkillThink, "t1"), spec(SkillThink, "t2"), spec(SkillThink, "t3")))
	b.sc.onSkill(SkillThink, costly)
	r := startStage(b)
	first := budgetQuestionOf(b, r.task)
	settleHeld(b)
	_ = b.sys.Close()
	img, err := store.Image()
	if err != nil {
		t.Fatal(err)
	}
	c := b.sys.cfg
	nb := restartFrom(t, c, img, b.sc)
	again := budgetQuestionOf(nb, r.task)
	if again.MessageID == first.MessageID {
		t.Fatalf("the question before the restart is still the open one")
	}
	if st := nb.task(r.task); !st.Paused || st.Budget.Held == "" {
		t.Errorf("after restart: paused %v held %q; want still held", st.Paused, st.Budget.Held)
	}
	if err := nb.sys.AnswerApproval(nb.op(), again.MessageID, Decision{Approve: false}); err != nil {
		t.Fatal(err)
	}
	nb.waitFor("the task to fail", func() bool { return nb.task(r.task).ExecutionState == StateFailed })
}

// An agent's add_task cannot set a budget (it could lift the default); an
// operator's gets the defaults where it sets none.
func TestTaskBudgetDefaultsAndWhoSetsThem(t *testing.T) {
	b := newTestbed(t, func(c *Config) { c.Budgets.TaskTokens = 5000; c.Budgets.AgentTokens = 900 })
	_, err := b.sys.TaskInstruction(b.mgr(), TaskInstruction{Action: ActionAddTask, TaskName: "n", TaskIntention: "i", Budget: &BudgetLimits{Tokens: new(0)}})
	isErr(t, err, ErrForbidden, "budget: only an operator")
	id, err := b.sys.AddTask(b.op(), AddTaskRequest{TaskName: "n", TaskIntention: "i", Budget: &BudgetLimits{AgentTokens: new(0)}})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.task(id).Budget; got.Tokens != 5000 || got.AgentTokens != 0 {
		t.Errorf("budget %+v, want the default 5000 tokens and no per-agent limit", got)
	}
}

func TestReadBudgetAnswer(t *testing.T) {
	type res struct {
		Approve bool
		Tokens  int
		OK      bool
	}
	for _, c := range []struct {
		in   Answer
		want res
	}{
		{Answer{Decision: &Decision{Approve: true}}, res{true, 0, true}},
		{Answer{Decision: &Decision{Approve: true, Arguments: map[string]any{"tokens": float64(5000)}}}, res{true, 5000, true}},
		{Answer{Decision: &Decision{Approve: true, Note: "add 20,000 please"}}, res{true, 20000, true}},
		{Answer{Decision: &Decision{Approve: false, Note: "no"}}, res{false, 0, true}},
		{Answer{Text: "yes"}, res{true, 0, true}},
		{Answer{Text: "Yes, raise it by 30000"}, res{true, 30000, true}},
		{Answer{Text: "50000"}, res{true, 50000, true}},
		{Answer{Text: "no, finish it"}, res{false, 0, true}},
		{Answer{Text: "同意，提高 8000"}, res{true, 8000, true}},
		{Answer{Text: "拒绝"}, res{false, 0, true}},
		{Answer{Text: "hmm, what is this?"}, res{false, 0, false}},
	} {
		a, n, ok := readBudgetAnswer(c.in)
		if diff := cmp.Diff(c.want, res{a, n, ok}); diff != "" {
			t.Errorf("readBudgetAnswer(%+v) mismatch (-want +got):\n%s", c.in, diff)
		}
	}
}

func TestBudgetConfigErrorsNameTheField(t *testing.T) {
	for _, c := range []struct {
		mod  func(*BudgetConfig)
		want string
	}{
		{func(b *BudgetConfig) { b.TaskTokens = -1 }, "Budgets.TaskTokens -1: must not be negative"},
		{func(b *BudgetConfig) { b.AgentTokens = -2 }, "Budgets.AgentTokens -2"},
		{func(b *BudgetConfig) { b.OperatorDailyTokens = -3 }, "Budgets.OperatorDailyTokens -3"},
		{func(b *BudgetConfig) { b.TaskCost = 1 }, "Budgets.TaskCost: a cost budget needs Budgets.Prices"},
		{func(b *BudgetConfig) { b.Prices = map[string]Price{"gpt": {Prompt: -1}} }, `Budgets.Prices["gpt"]`},
	} {
		cfg := Config{Texts: loadTexts(t)}
		c.mod(&cfg.Budgets)
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New: %v, want %q", err, c.want)
		}
	}
}

// An LLM call of a held task waits (the agent shown waiting) until the hold
// ends: a step that was running when the hold began, or its repair round,
// starts no call meanwhile (llm.CallGate, asked by the OpenAI client).
func TestHeldTaskCallsWait(t *testing.T) {
	b := newTestbed(t, func(c *Config) { c.Budgets.TaskTokens = 150 })
	b.sc.onAgent("w", SkillPlanning, plan(spec(SkillThink, "t1"), spec(SkillThink, "t2"), spec(SkillThink, "t3")))
	b.sc.onSkill(SkillThink, costly)
	r := startStage(b)
	budgetQuestionOf(b, r.task)
	settleHeld(b)

	a, _ := b.sys.agent(r.w)
	gate := &stepOutage{a: a, step: &StepState{TaskID: r.task, StepID: "s-running"}}
	done := make(chan error, 1)
	go func() { done <- gate.BeforeCall(t.Context()) }()
	b.waitFor("the agent shown waiting for the budget", func() bool {
		return strings.Contains(b.agent(r.w).WaitingFor, "paused for its budget")
	})
	select {
	case err := <-done:
		t.Fatalf("the call went ahead (%v) while the task is held", err)
	default:
	}
	if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionSetBudget, TaskID: r.task, Budget: &BudgetLimits{Tokens: new(10_000)}}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("BeforeCall after the raise: %v, want nil", err)
	}
	b.waitFor("the agent no longer waiting", func() bool { return b.agent(r.w).WaitingFor == "" })

	// Not held: no wait at all. The caller gone: its error.
	if err := gate.BeforeCall(t.Context()); err != nil {
		t.Errorf("BeforeCall of a task not held: %v", err)
	}
	b.sys.budgets.block(r.task)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := gate.BeforeCall(ctx); err == nil {
		t.Error("BeforeCall with a cancelled context: nil, want its error")
	}
	b.sys.budgets.unblock(r.task)
}

// A hold is decided on a reading of the task's usage and limits taken
// before the hold's write: an operator's set_budget in between (raising or
// removing the limit) must win, or the task would be held, and its
// operator asked, for a limit that no longer exists (seen as a rare
// failure of TestBudgetOverMCP: held "its budget is 1" after set_budget 0).
func TestHoldOnAStaleReadingDoesNotLand(t *testing.T) {
	b := newTestbed(t, func(c *Config) { c.Budgets.TaskTokens = 150 })
	b.sc.onAgent("w", SkillPlanning, plan(spec(SkillThink, "t1")))
	b.sc.onSkill(SkillThink, costly)
	r := startStage(b)
	r.waitComplete()
	task, _ := b.sys.task(r.task)
	// The reading a step's meter takes while a limit of 50 stands (100
	// tokens used), then the operator's set_budget that removes it before
	// the hold is written.
	task.mu.Lock()
	task.st.Budget.Tokens = 50
	task.mu.Unlock()
	task.mu.lockToRead()
	stale := b.sys.reachedLocked(task)
	task.mu.unlockRead()
	if stale == "" {
		t.Fatal("100 tokens used under a limit of 50: not reached")
	}
	if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: "set_budget", TaskID: r.task, Budget: &BudgetLimits{Tokens: new(0)}}); err != nil {
		t.Fatal(err)
	}
	if b.sys.hold(task, holdTask, stale, false) {
		t.Errorf("held for %q after set_budget removed the limit", stale)
	}
	if st := b.task(r.task); st.Budget.Held != "" || st.Paused {
		t.Errorf("task held %q, paused %v; want neither", st.Budget.Held, st.Paused)
	}
}

// The same for the operator's daily budget: a raise between a step's
// reading of the day's usage and the holds (the operator approved more
// tokens for today) must win over the stale reading.
func TestDailyHoldOnAStaleReadingDoesNotLand(t *testing.T) {
	b := newTestbed(t, func(c *Config) { c.Budgets.OperatorDailyTokens = 50 })
	b.sc.onAgent("w", SkillPlanning, plan(spec(SkillThink, "t1")))
	b.sc.onSkill(SkillThink, costly)
	r := startStage(b)
	b.waitFor("the task held for the daily budget", func() bool { return b.task(r.task).Budget.HeldFor == holdDaily })
	settleHeld(b)
	op := b.op()
	stale := b.sys.dailyReached(op)
	if stale == "" {
		t.Fatal("100 tokens used today under a daily budget of 50: not reached")
	}
	task, _ := b.sys.task(r.task)
	if err := b.sys.raiseBudget(task, op, 1000); err != nil {
		t.Fatal(err)
	}
	b.waitFor("the task released", func() bool { return b.task(r.task).Budget.Held == "" })
	b.sys.holdOperator(op, stale, task)
	if st := b.task(r.task); st.Budget.Held != "" {
		t.Errorf("task held %q after the raise to 1050 tokens today; want it free", st.Budget.Held)
	}
}
