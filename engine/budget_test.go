package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

// stageRun is one worker allocated alone to a fresh stage.
type stageRun struct {
	b           *testbed
	w           string
	task, stage string
}

// startStage creates worker w (scripts must be set before: its planning
// starts at once) and runs a one-stage task allocated to it.
func startStage(b *testbed) *stageRun {
	r := &stageRun{b: b}
	r.w = b.newAgent("w")
	r.task = b.newTask("budget", r.w)
	r.stage = b.addStages(r.task, StageSpec{StageIntention: "work", AgentAllocation: map[string]string{r.w: "the goal"}})[0]
	return r
}

// waitComplete waits until the manager was told that the stage completed.
func (r *stageRun) waitComplete() {
	r.b.t.Helper()
	r.b.waitFor("the manager's stage-complete notice", func() bool {
		return anyContains(notices(r.b, r.b.mgr(), r.task), "have submitted their completion summaries")
	})
	r.b.settle()
}

// executions lists the worker's executed skills (with the step text).
func (r *stageRun) executions() []string {
	var out []string
	for _, c := range r.b.sc.callsOf("w", "") {
		out = append(out, c.Skill+":"+c.Text)
	}
	return out
}

func (r *stageRun) stepsOf(exec string) []StepState {
	return r.b.steps(r.w, func(s StepState) bool { return s.Executor == exec && s.StageID == r.stage })
}

func plan(specs ...StepSpec) handler {
	return func(context.Context, *ExecInput) *Output { return &Output{AddSteps: specs} }
}

func TestStepBudgetLeadsToSummary(t *testing.T) {
	b := newTestbed(t, func(c *Config) { c.StageStepBudget = 3 })
	b.sc.onAgent("w", SkillPlanning, plan(spec(SkillThink, "t1"), spec(SkillThink, "t2"), spec(SkillThink, "t3"), spec(SkillThink, "t4")))
	r := startStage(b)
	r.waitComplete()

	planText := r.b.sc.callsOf("w", SkillPlanning)[0].Text
	want := []string{SkillPlanning + ":" + planText, "think:t1", "think:t2", "summary:" + r.stepsOf(SkillSummary)[0].TextContent}
	if diff := cmp.Diff(want, r.executions()); diff != "" {
		t.Errorf("executions mismatch (-want +got):\n%s", diff)
	}
	var skipped []string
	for _, s := range b.agent(r.w).AgentStep.StepList {
		if s.ExecuteResult["skipped"] == true {
			label := s.Executor
			if s.Executor == SkillThink {
				label += ":" + s.TextContent
			}
			skipped = append(skipped, label)
			if s.ExecutionState != StateFailed || !strings.Contains(s.ExecuteResult["error"].(string), "step budget of this stage (3 steps)") {
				t.Errorf("skipped step %+v, want failed with the budget reason", s)
			}
		}
	}
	if diff := cmp.Diff([]string{"think:t3", "think:t4", SkillReflection}, skipped); diff != "" {
		t.Errorf("skipped steps mismatch (-want +got):\n%s", diff)
	}
	sum := r.stepsOf(SkillSummary)
	if len(sum) != 1 || sum[0].ExecutionState != StateFinished || !strings.Contains(sum[0].TextContent, "step budget") {
		t.Errorf("summary steps %+v, want one finished, saying why", sum)
	}
	if st := b.stage(r.task, r.stage); st.EveryAgentState[r.w] != AgentFinished || st.CompletionSummary[r.w] != "done by w" {
		t.Errorf("stage %v %v, want w finished", st.EveryAgentState, st.CompletionSummary)
	}
}

func TestReflectionBudgetLeadsToSummary(t *testing.T) {
	b := newTestbed(t, func(c *Config) { c.StageReflectionBudget = 2 })
	b.sc.onAgent("w", SkillPlanning, plan())
	b.sc.onAgent("w", SkillReflection, plan(spec(SkillThink, "more")))
	r := startStage(b)
	r.waitComplete()

	if got := len(b.sc.callsOf("w", SkillReflection)); got != 2 {
		t.Errorf("reflection executor called %d times, want 2", got)
	}
	if got := len(b.sc.callsOf("w", SkillThink)); got != 2 {
		t.Errorf("think executor called %d times, want 2", got)
	}
	refl := r.stepsOf(SkillReflection)
	if len(refl) != 3 {
		t.Fatalf("reflection steps = %d, want 3", len(refl))
	}
	last := refl[2]
	if last.ExecutionState != StateFailed || last.ExecuteResult["skipped"] != true || !strings.Contains(last.ExecuteResult["error"].(string), "reflection budget of this stage (2 reflections)") {
		t.Errorf("third reflection %+v, want skipped for the reflection budget", last)
	}
	sum := r.stepsOf(SkillSummary)
	if len(sum) != 1 || sum[0].ExecutionState != StateFinished || !strings.Contains(sum[0].TextContent, "reflection budget") {
		t.Errorf("summary steps %+v, want one finished, saying why", sum)
	}
}

func TestFailedPlanningLeadsToReflection(t *testing.T) {
	b := newTestbed(t, nil)
	b.sc.onAgent("w", SkillPlanning, func(context.Context, *ExecInput) *Output {
		return &Output{Err: errors.New("the model answered nonsense")}
	})
	r := startStage(b)
	r.waitComplete()

	p := r.stepsOf(SkillPlanning)
	if len(p) != 1 || p[0].ExecutionState != StateFailed || p[0].ExecuteResult["error"] != "the model answered nonsense" {
		t.Fatalf("planning steps %+v, want one failed with the reason", p)
	}
	refl := r.stepsOf(SkillReflection)
	if len(refl) != 1 || !strings.Contains(refl[0].TextContent, "planning) failed: the model answered nonsense") {
		t.Fatalf("reflection steps %+v, want one naming the failure", refl)
	}
	if st := b.stage(r.task, r.stage); st.EveryAgentState[r.w] != AgentFinished {
		t.Errorf("w is %s in the stage, want finished", st.EveryAgentState[r.w])
	}
	var infos []string
	for _, si := range b.task(r.task).SharedInfoPool {
		if si.AgentID == r.w {
			infos = append(infos, si.Content)
		}
	}
	if len(infos) == 0 || infos[0] != "planning step failed: the model answered nonsense" {
		t.Errorf("shared info %q, want the failure reported first", infos)
	}
}

func TestSummaryThatKeepsFailing(t *testing.T) {
	b := newTestbed(t, nil)
	b.sc.onAgent("w", SkillSummary, func(context.Context, *ExecInput) *Output {
		return &Output{Err: errors.New("no summary block")}
	})
	r := startStage(b)
	r.waitComplete()

	if got := len(b.sc.callsOf("w", SkillSummary)); got != 2 {
		t.Errorf("summary executor called %d times, want SummaryAttempts = 2", got)
	}
	for _, s := range r.stepsOf(SkillSummary) {
		if s.ExecutionState != StateFailed {
			t.Errorf("summary step %s, want failed", s.ExecutionState)
		}
	}
	st := b.stage(r.task, r.stage)
	if st.EveryAgentState[r.w] != AgentFailed {
		t.Errorf("w is %q in the stage, want failed", st.EveryAgentState[r.w])
	}
	if c := st.CompletionSummary[r.w]; !strings.Contains(c, "summary step kept failing") || !strings.Contains(c, "no summary block") {
		t.Errorf("completion summary %q, want the summary_failed text with the reason", c)
	}
	if st.ExecutionState != StateRunning {
		t.Errorf("stage is %s, want running until the manager judges it", st.ExecutionState)
	}
	if a := b.agent(r.w); len(a.AgentStep.TodoList) != 0 {
		t.Errorf("w still has %d pending steps", len(a.AgentStep.TodoList))
	}
}

func TestMessageStepsRunPastTheBudget(t *testing.T) {
	b := newTestbed(t, func(c *Config) { c.StageStepBudget = 2 })
	inThink, release := make(chan struct{}), make(chan struct{})
	b.sc.onAgent("w", SkillPlanning, plan(spec(SkillThink, "t1"), spec(SkillThink, "t2"), spec(SkillThink, "t3")))
	b.sc.onText("t1", func(ctx context.Context, _ *ExecInput) *Output {
		close(inThink)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return &Output{}
	})
	r := startStage(b)
	waitChan(t, inThink, "the first think step")
	for _, hm := range []HumanMessage{
		{TaskID: r.task, Receiver: []string{r.w}, Content: "for your information", StageRelative: r.stage},
		{TaskID: r.task, Receiver: []string{r.w}, Content: "please answer", StageRelative: r.stage, NeedReply: true},
	} {
		if _, err := b.sys.HumanSend(b.op(), hm); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	r.waitComplete()

	var got []string
	for _, c := range b.sc.callsOf("w", "") {
		got = append(got, c.Skill)
	}
	want := []string{SkillPlanning, SkillThink, SkillProcessMessage, SkillSendMessage, SkillSummary}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("executions mismatch (-want +got):\n%s", diff)
	}
	for _, exec := range []string{SkillProcessMessage, SkillSendMessage} {
		if s := r.stepsOf(exec); len(s) != 1 || s[0].ExecutionState != StateFinished {
			t.Errorf("%s steps %+v, want one finished past the budget", exec, s)
		}
	}
}

func TestBaseTaskHasNoBudget(t *testing.T) {
	b := newTestbed(t, func(c *Config) { c.StageStepBudget = 1 })
	mgr := b.mgr()
	ids := b.inject(mgr, b.sys.BaseTaskID(), b.sys.BaseStageID(), false,
		spec(SkillThink, "b1"), spec(SkillThink, "b2"), spec(SkillThink, "b3"))
	b.waitFor("the base steps", func() bool { return b.stepDone(mgr, ids[2]) })
	b.settle()
	for _, id := range ids {
		if s, _ := b.step(mgr, id); s.ExecutionState != StateFinished {
			t.Errorf("base step %s is %s, want finished", s.TextContent, s.ExecutionState)
		}
	}
	if got := b.steps(mgr, func(s StepState) bool { return s.Executor == SkillSummary || s.Executor == SkillReflection }); len(got) != 0 {
		t.Errorf("the base task got %d guard steps, want none", len(got))
	}
}

func TestBaseTaskHistoryIsBounded(t *testing.T) {
	// The steps are injected, with no message between them: more than the
	// budget of steps outside a stage allows in a row.
	b := newTestbed(t, func(c *Config) { c.UnstagedStepBudget = 1000 })
	w := b.newAgent("w")
	base, baseStage := b.sys.BaseTaskID(), b.sys.BaseStageID()
	b.join(base, w)
	var specs []StepSpec
	const steps = 2*baseHistory + 5 // pruned once, in a batch, at 2*baseHistory+1
	for i := range steps {
		specs = append(specs, spec(SkillThink, fmt.Sprint("b", i)))
	}
	ids := b.inject(w, base, baseStage, false, specs...)
	b.waitFor("the base steps", func() bool { return b.stepDone(w, ids[len(ids)-1]) })
	b.settle()
	a := b.agent(w)
	kept := baseHistory + 4
	if diff := cmp.Diff(ids[steps-kept:], stepIDsOf(a)); diff != "" {
		t.Errorf("kept steps mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(ids[steps-kept:], a.WorkingMemory[base][baseStage]); diff != "" {
		t.Errorf("working memory mismatch (-want +got):\n%s", diff)
	}

	bt, _ := b.sys.task(base)
	const entries = 2*baseLogLimit + 5
	for i := range entries {
		bt.record(Message{TaskID: base, MessageID: fmt.Sprint("m", i)})
		bt.report(StepReport{StageID: baseStage, AgentID: w, SharedInfo: fmt.Sprint("i", i)})
	}
	ts := b.task(base)
	pool, info := ts.SharedConversationPool, ts.SharedInfoPool
	// Trimmed in batches: between baseLogLimit and 2*baseLogLimit entries,
	// the newest last and in order.
	if len(pool) < baseLogLimit || len(pool) > 2*baseLogLimit {
		t.Errorf("conversation pool has %d entries, want %d to %d", len(pool), baseLogLimit, 2*baseLogLimit)
	}
	if len(info) < baseLogLimit || len(info) > 2*baseLogLimit {
		t.Errorf("shared info pool has %d entries, want %d to %d", len(info), baseLogLimit, 2*baseLogLimit)
	}
	for i := 1; i <= baseLogLimit; i++ {
		if got, want := pool[len(pool)-i].MessageID, fmt.Sprint("m", entries-i); got != want {
			t.Fatalf("conversation pool entry -%d = %s, want %s", i, got, want)
		}
		if got, want := info[len(info)-i].Content, fmt.Sprint("i", entries-i); got != want {
			t.Fatalf("shared info entry -%d = %s, want %s", i, got, want)
		}
	}
}

// hookStore calls hook on every task write (under the task's mutex).
type hookStore struct {
	*MemoryStore
	mu        sync.Mutex
	hook      func(*TaskState)
	agentHook func(*AgentState)
}

func (h *hookStore) PutAgent(ctx context.Context, a *AgentState) error {
	h.mu.Lock()
	hook := h.agentHook
	h.mu.Unlock()
	if hook != nil {
		hook(a)
	}
	return h.MemoryStore.PutAgent(ctx, a)
}

func (h *hookStore) PutTask(ctx context.Context, t *TaskState) error {
	h.mu.Lock()
	hook := h.hook
	h.mu.Unlock()
	if hook != nil {
		hook(t)
	}
	return h.MemoryStore.PutTask(ctx, t)
}

// blockedIn reports whether some goroutine is blocked acquiring a mutex
// inside fn.
func blockedIn(fn string) bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, fn) && strings.Contains(g, "sync.(*Mutex).Lock") {
			return true
		}
	}
	return false
}

// The progress guard reads the stage's state, then takes the agent's mutex
// to add a reflection. This test stops the agent between the two and ends
// the stage there, exactly as a concurrent finish_stage can.
func TestProgressGuardRacesWithTheEndOfTheStage(t *testing.T) {
	b := newTestbed(t, nil)
	alice := b.newAgent("alice")
	task := b.newTask("race", alice)
	b.settle()
	var once sync.Once
	// Right after alice's guard saw her stage running, the stage ends (its
	// finish_stage instruction cleans her steps and working memory).
	keepMovingHook = func(a *agent, step *StepState) {
		if a.id != alice || step.Executor != SkillPlanning {
			return
		}
		once.Do(func() {
			tk, _ := b.sys.task(task)
			// (the stage ends here, inside the guard's window)
			tk.mu.Lock()
			st, _ := tk.stageLocked(step.StageID)
			msgs := tk.endStageLocked(st, StateFinished, "test")
			tk.mu.Unlock()
			b.sys.deliver(msgs...)
		})
	}
	t.Cleanup(func() { keepMovingHook = nil })
	b.sc.onAgent("alice", SkillPlanning, func(context.Context, *ExecInput) *Output { return &Output{} })
	stage := b.addStages(task, StageSpec{StageIntention: "s", AgentAllocation: map[string]string{alice: "g"}})[0]
	b.waitFor("the stage to end in alice's guard", func() bool {
		st, _ := b.sys.Stage(task, stage)
		return st.ExecutionState == StateFinished
	})
	b.settle()
	if left := b.steps(alice, func(s StepState) bool { return s.StageID == stage }); len(left) > 0 {
		t.Errorf("the guard added a %s to the stage that ended (%d steps left, never cleaned up)", left[0].Executor, len(left))
	}
}

// TestUnstagedStepsAreBounded: outside any stage (here the base task) no
// stage budget or stage end stops a plan that plans again. An agent runs
// UnstagedStepBudget steps there in a row without a new message; past them
// its steps there are skipped with the reason, and a message from the
// operator gives it the budget again.
func TestUnstagedStepsAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const budget = 10
		b := bubbleBed(t, func(c *Config) { c.UnstagedStepBudget = budget })
		b.sc.onAgent("manager", SkillPlanning, func(context.Context, *ExecInput) *Output {
			if len(b.sc.callsOf("manager", "")) > 5*budget {
				return &Output{} // so that the test ends (and fails) without the bound
			}
			return &Output{AddSteps: []StepSpec{spec(SkillPlanning, "plan again")}}
		})
		b.sc.onAgent("manager", SkillProcessMessage, func(context.Context, *ExecInput) *Output {
			return &Output{AddSteps: []StepSpec{spec(SkillPlanning, "plan from the message")}}
		})
		base := b.sys.BaseTaskID()
		b.inject(b.mgr(), base, NoRelative, false, spec(SkillPlanning, "start"))
		synctest.Wait()
		if n := len(b.sc.callsOf("manager", "")); n != budget {
			t.Fatalf("the manager ran %d steps outside any stage, want the budget of %d", n, budget)
		}
		skipped := b.steps(b.mgr(), func(s StepState) bool {
			reason, _ := s.ExecuteResult["error"].(string)
			return s.ExecutionState == StateFailed && strings.Contains(reason, "steps in a row outside any stage")
		})
		if len(skipped) == 0 {
			t.Error("no step was skipped with the reason")
		}
		// Supervision's notice about the stop is not new input: the
		// manager digests it (message steps run) but plans no more.
		st := b.task(base)
		b.sys.noticeStalled(&st, "its last step was skipped", 1)
		synctest.Wait()
		const notices = 1
		if n := len(b.sc.callsOf("manager", "")); n != budget+notices {
			t.Fatalf("after supervision's notice the manager ran %d steps in all, want only the notice's past the budget (%d)", n, budget+notices)
		}
		if _, err := b.sys.HumanSend(b.op(), HumanMessage{TaskID: base, Receiver: []string{b.mgr()}, Content: "carry on"}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n := len(b.sc.callsOf("manager", "")); n != 2*budget+notices {
			t.Errorf("after the operator's message the manager ran %d steps in all, want the budget again (%d in all)", n, 2*budget+notices)
		}
	})
}

// TestInterruptGivesTheUnstagedBudgetAgain: an operator's interrupt is new
// input, as a message is: outside any stage, the steps the agent plans on
// its instruction run, even when the loop it stopped had used the budget.
func TestInterruptGivesTheUnstagedBudgetAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Four: the interrupted step, the instruction's process_message
		// and the reflection queued before leave room for the step the
		// instruction leads to only when the interrupt gave the budget
		// again (without it: two loop steps before, and it is skipped).
		b := bubbleBed(t, func(c *Config) { c.UnstagedStepBudget = 4 })
		alice := b.newAgent("alice")
		task := b.newTask("t", alice)
		var loops atomic.Int32
		var blocked atomic.Bool
		b.sc.onText("loop", func(ctx context.Context, in *ExecInput) *Output {
			if loops.Add(1) == 2 {
				blocked.Store(true)
				<-ctx.Done()
				return &Output{Err: ctx.Err()}
			}
			return &Output{AddSteps: []StepSpec{spec(SkillPlanning, "loop")}}
		})
		b.sc.onAgent("alice", SkillProcessMessage, func(_ context.Context, in *ExecInput) *Output {
			if strings.Contains(in.Step.TextContent, "do X instead") {
				return &Output{AddSteps: []StepSpec{spec(SkillPlanning, "X")}}
			}
			return &Output{}
		})
		synctest.Wait()
		b.inject(alice, task, NoRelative, false, spec(SkillPlanning, "loop"))
		b.until("alice's second loop step to run", time.Minute, blocked.Load)
		if _, err := b.sys.Interrupt(b.op(), alice, "it loops", "do X instead"); err != nil {
			t.Fatal(err)
		}
		var x []StepState
		b.until("the step the operator's instruction led to to end", time.Minute, func() bool {
			x = b.steps(alice, func(s StepState) bool {
				return s.TextContent == "X" && (s.ExecutionState == StateFinished || s.ExecutionState == StateFailed)
			})
			return len(x) == 1
		})
		if x[0].ExecutionState != StateFinished {
			t.Errorf("the step alice planned on the operator's interrupt instruction: %s, %v; want it run", x[0].ExecutionState, x[0].ExecuteResult["error"])
		}
	})
}

// TestEngineNoticesGiveTheUnstagedBudgetAgain: a manager's steps of a task
// outside its stages (start_task planning, staffing, the judge notice's
// handling) have their budget again with each notice of the engine that
// asks it to act: its finish_task after the judge notice runs and the task
// ends finished, not failed by supervision.
func TestEngineNoticesGiveTheUnstagedBudgetAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bubbleBed(t, func(c *Config) { c.UnstagedStepBudget = 2 })
		alice := b.newAgent("alice")
		// The manager's start_task planning queues one more step: its
		// staffing, say (2 steps outside any stage).
		b.sc.onAgent("manager", SkillPlanning, func(_ context.Context, in *ExecInput) *Output {
			if in.Step.StageID == NoRelative && strings.Contains(in.Step.TextContent, "intention of t") {
				return &Output{AddSteps: []StepSpec{spec(SkillThink, "staff the task")}}
			}
			return &Output{AddSteps: []StepSpec{}}
		})
		var finish atomic.Bool
		b.sc.onAgent("manager", SkillProcessMessage, func(_ context.Context, in *ExecInput) *Output {
			if in.Step.StageID == NoRelative && !strings.Contains(in.Step.TextContent, "[Supervision]") {
				finish.Store(true)
				return &Output{AddSteps: []StepSpec{spec(SkillTaskManager, "finish the task")}}
			}
			return &Output{}
		})
		var task string
		b.sc.onText("finish the task", func(context.Context, *ExecInput) *Output {
			return &Output{TaskInstruction: &TaskInstruction{Action: ActionFinishTask, TaskID: task, Summary: "done"}}
		})
		task = b.newTask("t", alice)
		b.until("the manager to plan the task", time.Minute, func() bool {
			return len(b.steps(b.mgr(), func(s StepState) bool { return s.TextContent == "staff the task" && s.ExecutionState == StateFinished })) == 1
		})
		stages := b.addStages(task, StageSpec{StageIntention: "work", AgentAllocation: map[string]string{alice: "do the work"}})
		b.until("alice to finish her part", 10*testStall, func() bool { return len(b.stage(task, stages[0]).CompletionSummary) == 1 })
		if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionFinishStage, TaskID: task, StageID: stages[0]}); err != nil {
			t.Fatal(err)
		}
		b.until("the judge notice to be handled", 10*testStall, finish.Load)
		var fin StepState
		b.until("the manager's finish step to end", 10*testStall, func() bool {
			done := b.steps(b.mgr(), func(s StepState) bool {
				return s.TextContent == "finish the task" && (s.ExecutionState == StateFinished || s.ExecutionState == StateFailed)
			})
			if len(done) > 0 {
				fin = done[0]
			}
			return len(done) > 0 || b.ended(task)
		})
		if fin.ExecutionState == StateFailed {
			t.Errorf("the manager's finish_task, planned on the judge notice: %s: %v", fin.ExecutionState, fin.ExecuteResult["error"])
		}
		b.until("the task to end", 10*testStall, func() bool { return b.ended(task) })
		if st := b.task(task); st.ExecutionState != StateFinished {
			t.Errorf("task %s ended %s: %.120s", task, st.ExecutionState, st.TaskSummary)
		}
	})
}

// TestAgentsAnsweringEachOtherAreBounded: two agents whose every message
// asks for a reply would answer each other for ever (a reply is a message
// step, which no step budget stops). The conversation stops at
// MessageChainLimit messages with the reason on the step that was not
// sent, and an operator's word lets it go on.
func TestAgentsAnsweringEachOtherAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 8
		b := bubbleBed(t, func(c *Config) { c.MessageChainLimit = limit })
		alice, bob, task, sent := talkers(b, limit)
		b.inject(alice, task, NoRelative, false, spec(SkillSendMessage, "start talking"))
		synctest.Wait()
		if n := sent.Load(); n != limit+1 {
			t.Fatalf("the agents tried to send %d messages, want the limit %d and the one refused", n, limit)
		}
		refused := slices.Concat(b.steps(alice, failedWith("messages between agents in a row")), b.steps(bob, failedWith("messages between agents in a row")))
		if len(refused) != 1 {
			t.Fatalf("%d steps failed naming the limit, want 1", len(refused))
		}
		// An operator's word starts a new conversation.
		b.sc.onAgent("alice", SkillProcessMessage, func(context.Context, *ExecInput) *Output {
			return &Output{AddSteps: []StepSpec{spec(SkillSendMessage, "ask bob again")}}
		})
		before := sent.Load()
		if _, err := b.sys.HumanSend(b.op(), HumanMessage{TaskID: task, Receiver: []string{alice}, StageRelative: NoRelative, Content: "ask bob again"}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n := sent.Load() - before; n != limit+1 {
			t.Errorf("after the operator's message the agents tried %d messages, want the limit again (%d) and the one refused", n, limit)
		}
	})
}

// talkers makes agents alice and bob, in a task t, whose every message
// asks the other for a reply: for their first 5*limit messages, so that
// without the chain limit the conversation still ends (and the test
// fails). sent counts the messages they tried to send.
func talkers(b *testbed, limit int) (alice, bob, task string, sent *atomic.Int32) {
	alice, bob = b.newAgent("alice"), b.newAgent("bob")
	task = b.newTask("t", alice, bob)
	sent = new(atomic.Int32)
	talk := func(to string) handler {
		return func(context.Context, *ExecInput) *Output {
			return &Output{SendMessage: &OutgoingMessage{Receiver: StringList{to}, Message: "and you?", NeedReply: sent.Add(1) < int32(5*limit)}}
		}
	}
	b.sc.onAgent("alice", SkillSendMessage, talk(bob))
	b.sc.onAgent("bob", SkillSendMessage, talk(alice))
	return alice, bob, task, sent
}

// failedWith matches the failed steps whose error holds reason.
func failedWith(reason string) func(StepState) bool {
	return func(s StepState) bool {
		msg, _ := s.ExecuteResult["error"].(string)
		return s.ExecutionState == StateFailed && strings.Contains(msg, reason)
	}
}

// TestTrimsKeepTheDeliveryIndexes checks that the indexes by which a message
// delivered again is taken once — the base task's log and an agent's list
// of received IDs — still answer for every kept ID, and only for those,
// after their lists are trimmed (a trim deletes the IDs it drops from them
// instead of making them again).
func TestTrimsKeepTheDeliveryIndexes(t *testing.T) {
	b := newTestbed(t, nil)
	base := b.sys.baseTaskID
	bt, _ := b.sys.task(base)
	const entries = 2*baseLogLimit + 5
	for i := range entries {
		bt.record(Message{TaskID: base, MessageID: fmt.Sprint("m", i)})
	}
	before := len(b.task(base).SharedConversationPool)
	// Kept: recorded already, so not again. Dropped: recorded anew.
	bt.record(Message{TaskID: base, MessageID: fmt.Sprint("m", entries-1)})
	if got := len(b.task(base).SharedConversationPool); got != before {
		t.Fatalf("a kept message delivered again was logged again: %d entries, want %d", got, before)
	}
	bt.record(Message{TaskID: base, MessageID: "m0"})
	if pool := b.task(base).SharedConversationPool; len(pool) != before+1 || pool[len(pool)-1].MessageID != "m0" {
		t.Fatalf("a message trimmed from the log was not logged when delivered again (%d entries, want %d)", len(pool), before+1)
	}

	a := &agent{}
	const ids = 2*receivedKept + 1
	for i := range ids {
		if a.seenLocked(fmt.Sprint("r", i)) {
			t.Fatalf("r%d seen before it was received", i)
		}
	}
	if len(a.st.Received) != receivedKept {
		t.Fatalf("%d received IDs kept, want %d", len(a.st.Received), receivedKept)
	}
	if len(a.received) != len(a.st.Received) {
		t.Fatalf("the index holds %d IDs, the list %d", len(a.received), len(a.st.Received))
	}
	if !a.seenLocked(fmt.Sprint("r", ids-1)) || !a.seenLocked(fmt.Sprint("r", ids-receivedKept)) {
		t.Error("a kept received ID is not seen")
	}
	if a.seenLocked(fmt.Sprint("r", ids-receivedKept-1)) {
		t.Error("a dropped received ID is still seen")
	}
}
