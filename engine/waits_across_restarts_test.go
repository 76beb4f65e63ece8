package engine

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mas-mcp/mas-mcp/llm"
)

// What an agent waits for inside a call (an outage, a budget), across
// crashes, interrupts and operators (found by a review).

// inboxCount counts the operator's inbox entries that start with prefix.
func inboxCount(b *testbed, op, prefix string) int {
	b.t.Helper()
	in, err := b.sys.Inbox(op)
	if err != nil {
		b.t.Fatal(err)
	}
	n := 0
	for _, e := range in {
		if strings.HasPrefix(e.Content, prefix) {
			n++
		}
	}
	return n
}

// TestBudgetWaitIsNoOutageAfterACrash: an agent's LLM call waits for its
// task's budget; the operator raises the budget and the process dies
// between the task's write (the hold released) and the agent's (no longer
// waiting). There never was an LLM outage: after the restart the operator
// must not be told the endpoint answers again (the restore knows what a
// stored waiting_for waited on, AgentState.WaitingOn); and the task, whose
// resume the crash lost, must run again.
func TestBudgetWaitIsNoOutageAfterACrash(t *testing.T) {
	b, store, restart := freezeBedWith(t, func(c *Config) { c.Budgets.TaskTokens = 150 })
	alice, bob := b.newAgent("alice"), b.newAgent("bob")
	task := b.newTask("t", alice, bob)
	started, proceed, gated := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	var runs atomic.Int32
	b.sc.onText("gated call", func(ctx context.Context, in *ExecInput) *Output {
		if runs.Add(1) > 1 {
			return &Output{Result: map[string]any{"think": "done"}, Usage: Usage{Calls: 1}}
		}
		// The step's second LLM call (a repair round) is asked of the
		// gate, as the OpenAI client does, once the task is held.
		close(started)
		<-proceed
		a, _ := b.sys.agent(in.Agent.AgentID)
		step := in.Step
		err := (&stepOutage{a: a, step: &step}).BeforeCall(ctx)
		gated <- err
		<-ctx.Done()
		return &Output{Err: ctx.Err()}
	})
	b.sc.onText("costly", costly)
	b.inject(alice, task, NoRelative, false, spec(SkillThink, "gated call"))
	<-started
	b.inject(bob, task, NoRelative, false, spec(SkillThink, "costly"), spec(SkillThink, "costly"))
	budgetQuestionOf(b, task)
	close(proceed)
	b.waitFor("alice shown waiting for the budget", func() bool {
		return strings.Contains(b.agent(alice).WaitingFor, "paused for its budget")
	})
	if n := inboxCount(b, b.op(), "[LLM endpoint"); n != 0 {
		t.Fatalf("the operator got %d LLM endpoint notices before any outage", n)
	}
	// The crash: right after the task's write that releases the hold.
	store.mu.Lock()
	store.freezeTask = func(ts *TaskState) bool { return ts.TaskID == task && ts.Budget.Held == "" }
	store.mu.Unlock()
	if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionSetBudget, TaskID: task, Budget: &BudgetLimits{Tokens: new(10_000)}}); err != nil {
		t.Fatal(err)
	}
	if err := <-gated; err != nil {
		t.Fatalf("the gated call did not go ahead after the raise: %v", err)
	}
	b2, img := restart()
	shown := false
	for _, a := range img.Agents {
		if a.AgentID == alice && strings.Contains(a.WaitingFor, "paused for its budget") {
			shown = true
		}
	}
	if !shown {
		t.Fatal("the image does not show alice waiting for the budget: the crash is not the one meant")
	}
	// Any call answered after the restart (here bob's, in the base task).
	b2.sc.onText("answered", func(context.Context, *ExecInput) *Output {
		return &Output{Result: map[string]any{"think": "ok"}, Usage: Usage{Calls: 1}}
	})
	id := b2.inject(bob, b2.sys.baseTaskID, NoRelative, false, spec(SkillThink, "answered"))[0]
	b2.waitFor("bob's answered step", func() bool { return b2.stepDone(bob, id) })
	if n := inboxCount(b2, b2.op(), "[LLM endpoint available]"); n != 0 {
		t.Errorf("the operator, never told of an LLM outage (there was none), is told %d time(s) the endpoint answers again after the restart", n)
	}
	// The crash also came before the task's resume was stored: the
	// restore resumes a task paused for a budget that no longer holds it.
	if st := img.Tasks; len(st) > 0 {
		for _, ts := range st {
			if ts.TaskID == task && (!ts.Paused || ts.PausedFor != PausedBudget) {
				t.Fatalf("the image holds the task paused=%v for %q, want paused for its budget", ts.Paused, ts.PausedFor)
			}
		}
	}
	if ts := b2.task(task); ts.Paused {
		t.Errorf("after the restart the task whose budget was raised is still paused (for %q), with nothing to resume it", ts.PausedFor)
	}
}

// TestOutageWaitOfAHeldTaskLostWithACrash: a step's call waits out an LLM
// outage and its operator is told "You will be told when it answers
// again"; meanwhile the task is held for its budget, and the process dies.
// After the restart the endpoint answers: the operator must be told, the
// budget hold notwithstanding.
func TestOutageWaitOfAHeldTaskLostWithACrash(t *testing.T) {
	b, store, restart := freezeBedWith(t, nil)
	alice, bob := b.newAgent("alice"), b.newAgent("bob")
	task := b.newTask("t", alice, bob)
	waiting := make(chan struct{})
	var runs atomic.Int32
	b.sc.onText("wait it out", func(ctx context.Context, in *ExecInput) *Output {
		if runs.Add(1) == 1 {
			return waitingOnTheEndpoint(b, waiting)(ctx, in)
		}
		return &Output{Result: map[string]any{"think": "done"}, Usage: Usage{Calls: 1}}
	})
	b.sc.onText("costly", costly)
	// The task used 100 tokens before the outage.
	first := b.inject(bob, task, NoRelative, false, spec(SkillThink, "costly"))[0]
	b.waitFor("bob's costly step", func() bool { return b.stepDone(bob, first) })
	b.inject(alice, task, NoRelative, false, spec(SkillThink, "wait it out"))
	<-waiting
	b.waitFor("the operator told of the outage", func() bool { return b.inboxHas("[LLM endpoint unavailable]") })
	// The operator caps the task below what it used: it is held for its
	// budget.
	if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionSetBudget, TaskID: task, Budget: &BudgetLimits{Tokens: new(50)}}); err != nil {
		t.Fatal(err)
	}
	b.waitFor("the task held for its budget", func() bool { return b.task(task).Budget.Held != "" })
	// The crash, now.
	store.mu.Lock()
	store.take(true)
	store.mu.Unlock()
	b2, img := restart()
	for _, a := range img.Agents {
		if a.AgentID == alice && !strings.Contains(a.WaitingFor, "LLM endpoint unavailable") {
			t.Fatalf("the image shows alice waiting_for %q: the crash is not the one meant", a.WaitingFor)
		}
	}
	// After the restart a call is answered (bob's, in the base task).
	b2.sc.onText("answered", func(context.Context, *ExecInput) *Output {
		return &Output{Result: map[string]any{"think": "ok"}, Usage: Usage{Calls: 1}}
	})
	id := b2.inject(bob, b2.sys.baseTaskID, NoRelative, false, spec(SkillThink, "answered"))[0]
	b2.waitFor("bob's answered step", func() bool { return b2.stepDone(bob, id) })
	if n := inboxCount(b2, b2.op(), "[LLM endpoint available]"); n != 1 {
		t.Errorf("the operator, told of the outage and promised a word when the endpoint answers again, got %d such notice(s) once a call was answered after the restart", n)
	}
}

// TestGiveUpToldOnlyToOperatorsWhoseCallsGaveUp: two operators' steps wait
// out an LLM outage; each operator is told of it. The first interrupts its
// agent (its call leaves: nobody gave up, its task is not paused). When the
// second operator's call gives up, only the second is told the calls
// stopped waiting; the first stays among those told of the outage and is
// told when the endpoint answers again.
func TestGiveUpToldOnlyToOperatorsWhoseCallsGaveUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bubbleBed(t, nil)
		op1, op2 := b.op(), b.operator("op2")
		alice, bob := b.newAgent("alice"), b.newAgent("bob")
		task1 := b.newTask("one", alice)
		task2, err := b.sys.AddTask(op2, AddTaskRequest{TaskName: "two", TaskIntention: "intention of two"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.sys.AgentInstruction(op2, AgentInstruction{Action: ActionAddTaskParticipant, TaskID: task2, Agents: StringList{bob}}); err != nil {
			t.Fatal(err)
		}
		waitingA, waitingB, giveUp := make(chan struct{}), make(chan struct{}), make(chan struct{})
		b.sc.onText("alice waits", waitingOnTheEndpoint(b, waitingA))
		var bobRuns atomic.Int32
		b.sc.onText("bob waits", func(ctx context.Context, in *ExecInput) *Output {
			if bobRuns.Add(1) > 1 {
				return &Output{Result: map[string]any{"think": "done"}, Usage: Usage{Calls: 1}}
			}
			a, _ := b.sys.agent(in.Agent.AgentID)
			step := in.Step
			o := &stepOutage{a: a, step: &step}
			o.OutageBegan(time.Now(), "status 503: overloaded")
			close(waitingB)
			<-giveUp
			o.OutageEnded(llm.OutageGaveUp)
			return gaveUp()
		})
		b.sc.onText("after", func(context.Context, *ExecInput) *Output {
			return &Output{Result: map[string]any{"think": "done"}, Usage: Usage{Calls: 1}}
		})
		b.inject(alice, task1, NoRelative, false, spec(SkillThink, "alice waits"))
		b.inject(bob, task2, NoRelative, false, spec(SkillThink, "bob waits"))
		<-waitingA
		<-waitingB
		synctest.Wait()
		for _, op := range []string{op1, op2} {
			if n := inboxCount(b, op, "[LLM endpoint unavailable]"); n != 1 {
				t.Fatalf("operator %s was told %d times of the outage, want once", op, n)
			}
		}
		if _, err := b.sys.Interrupt(op1, alice, "", "start over"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		close(giveUp)
		synctest.Wait()
		if ts := b.task(task2); ts.PausedFor != PausedOutage {
			t.Fatalf("the second operator's task is not paused for the outage (%q)\n%s", ts.PausedFor, b.dump())
		}
		if ts := b.task(task1); ts.Paused {
			t.Fatalf("the first operator's task is paused (%q)", ts.PausedFor)
		}
		if n := inboxCount(b, op1, "[LLM endpoint still unavailable]"); n != 0 {
			t.Errorf("operator 1, whose call left on its interrupt and whose task is not paused, is told %d time(s) that the steps that waited stopped waiting and their tasks are paused", n)
		}
		// The endpoint answers (alice's next call).
		b.inject(alice, task1, NoRelative, false, spec(SkillThink, "after"))
		synctest.Wait()
		if n := inboxCount(b, op1, "[LLM endpoint available]"); n != 1 {
			t.Errorf("operator 1, told it would be told when the endpoint answers again, got %d such notice(s) after it answered", n)
		}
	})
}

// TestWaitingForHidesAnotherOperatorsTask: an agent waits, in operator A's
// task, for that task's budget. Operator B, who may not see that task,
// reads the agent: its waiting_for, which names A's task and budget, must
// not be shown to B (filterAgent drops what a task B may not see says).
func TestWaitingForHidesAnotherOperatorsTask(t *testing.T) {
	b := newTestbed(t, func(c *Config) { c.Budgets.TaskTokens = 150 })
	opB := b.operator("bea")
	b.sc.onAgent("w", SkillPlanning, plan(spec(SkillThink, "t1"), spec(SkillThink, "t2"), spec(SkillThink, "t3")))
	b.sc.onSkill(SkillThink, costly)
	r := startStage(b)
	budgetQuestionOf(b, r.task)
	settleHeld(b)
	a, _ := b.sys.agent(r.w)
	gate := &stepOutage{a: a, step: &StepState{TaskID: r.task, StepID: "s-running"}}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- gate.BeforeCall(ctx) }()
	defer func() { cancel(); <-done }()
	b.waitFor("w shown waiting for the budget", func() bool {
		return strings.Contains(b.agent(r.w).WaitingFor, "paused for its budget")
	})
	if b.sys.Visible(opB, r.task) {
		t.Fatal("bea sees the task: not the case meant")
	}
	st, _ := b.sys.AgentFor(opB, r.w)
	if strings.Contains(st.WaitingFor, r.task) {
		t.Errorf("bea, who may not see task %s, reads w's waiting_for %q", r.task, st.WaitingFor)
	}
}
