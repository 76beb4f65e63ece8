package engine

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// Tests of the liveness promise: a task is always making progress, waiting
// on someone who has been told, or ended with a reason. They run in a
// synctest bubble: the stall timeout passes in fake time, and "at once"
// means before any fake time passed.

const testStall = 3 * time.Minute

// bubbleBed starts a testbed inside a synctest bubble with supervision at
// testStall and 2 notices.
func bubbleBed(t *testing.T, mod func(*Config)) *testbed {
	return newTestbed(t, func(c *Config) {
		c.StallTimeout = testStall
		c.StallNotices = 2
		if mod != nil {
			mod(c)
		}
	})
}

// until lets fake time pass (up to limit) until cond holds. Inside the
// bubble, time moves only when every goroutine is blocked, so this waits
// on the engine's own events and timers, never on a wall clock.
func (b *testbed) until(what string, limit time.Duration, cond func() bool) {
	b.t.Helper()
	if !untilOr(limit, cond) {
		b.t.Fatalf("%s: not after %s of fake time\n%s", what, limit, b.dump())
	}
}

// untilOr lets fake time pass (1 s at a time) until cond holds or limit
// has passed; it reports whether cond held. Inside the bubble, time moves
// only when every goroutine is blocked, so this waits on the engine's own
// events and timers, never on a wall clock.
func untilOr(limit time.Duration, cond func() bool) bool {
	start := time.Now()
	for {
		synctest.Wait()
		if cond() {
			return true
		}
		if time.Since(start) > limit {
			return false
		}
		tick := time.NewTimer(time.Second) // fake time: passes at once when all are blocked
		<-tick.C
	}
}

// ended reports whether a task is finished or failed.
func (b *testbed) ended(id string) bool {
	st := b.task(id).ExecutionState
	return st == StateFinished || st == StateFailed
}

// stallNotices returns the supervision notices the manager processed.
func (b *testbed) stallNotices() []execCall {
	var out []execCall
	for _, c := range b.sc.callsOf("manager", SkillProcessMessage) {
		if strings.Contains(c.Text, "[Supervision]") {
			out = append(out, c)
		}
	}
	return out
}

// inboxHas reports whether the operator's inbox holds a message containing text.
func (b *testbed) inboxHas(text string) bool {
	in, err := b.sys.Inbox(b.op())
	if err != nil {
		b.t.Fatal(err)
	}
	for _, e := range in {
		if strings.Contains(e.Content, text) {
			return true
		}
	}
	return false
}

func TestStalledTasksEndWithAReason(t *testing.T) {
	fail := func(msg string) handler {
		return func(context.Context, *ExecInput) *Output { return &Output{Err: errors.New(msg)} }
	}
	tests := []struct {
		name string
		// staff sets the task up as far as the scripted manager gets;
		// it returns the task's ID.
		staff func(b *testbed) string
		// wantWhy must be in the failed task's summary.
		wantWhy []string
	}{
		{
			name: "manager never adds a stage",
			staff: func(b *testbed) string {
				return b.newTask("report")
			},
			wantWhy: []string{"no stages yet"},
		},
		{
			name: "manager's first planning fails",
			staff: func(b *testbed) string {
				b.sc.onAgent("manager", SkillPlanning, fail("status 500: upstream exploded"))
				return b.newTask("report")
			},
			// What was missing, and why the manager did not act.
			wantWhy: []string{"no stages yet", "manager's steps in it failed, the newest (planning", "status 500: upstream exploded"},
		},
		{
			name: "add_stage allocates agents by name",
			staff: func(b *testbed) string {
				alice := b.newAgent("alice")
				id := b.newTask("report", alice)
				_, err := b.sys.TaskInstruction(b.mgr(), TaskInstruction{Action: ActionAddStage, TaskID: id,
					Stages: []StageSpec{{StageIntention: "collect", AgentAllocation: map[string]string{"alice": "collect facts"}}}})
				isErr(t, err, ErrNotFound, "alice")
				return id
			},
			wantWhy: []string{"no stages yet"},
		},
		{
			name: "staffing names agents instead of IDs",
			staff: func(b *testbed) string {
				b.newAgent("alice")
				id := b.newTask("report")
				_, err := b.sys.AgentInstruction(b.mgr(), AgentInstruction{Action: ActionAddTaskParticipant, TaskID: id, Agents: StringList{"alice"}})
				isErr(t, err, ErrNotFound, "alice")
				return id
			},
			wantWhy: []string{"no stages yet"},
		},
		{
			name: "add_stage with an empty allocation",
			staff: func(b *testbed) string {
				id := b.newTask("report")
				_, err := b.sys.TaskInstruction(b.mgr(), TaskInstruction{Action: ActionAddStage, TaskID: id,
					Stages: []StageSpec{{StageIntention: "collect", AgentAllocation: map[string]string{}}}})
				isErr(t, err, ErrInvalid, "agent_allocation")
				return id
			},
			wantWhy: []string{"no stages yet"},
		},
		{
			name: "finish_stage names an unknown stage and the manager ignores the completion",
			staff: func(b *testbed) string {
				alice := b.newAgent("alice")
				id := b.newTask("report", alice)
				b.addStages(id, StageSpec{StageIntention: "collect", AgentAllocation: map[string]string{alice: "collect facts"}})
				_, err := b.sys.TaskInstruction(b.mgr(), TaskInstruction{Action: ActionFinishStage, TaskID: id, StageID: "no-such-stage"})
				isErr(t, err, ErrNotFound, "no-such-stage")
				return id
			},
			wantWhy: []string{"still running", "alice", "nobody has ended the stage"},
		},
		{
			name: "every stage ended but nobody finishes the task",
			staff: func(b *testbed) string {
				alice := b.newAgent("alice")
				id := b.newTask("report", alice)
				stages := b.addStages(id, StageSpec{StageIntention: "collect", AgentAllocation: map[string]string{alice: "collect facts"}})
				b.until("alice's summary", time.Minute, func() bool {
					_, ok := b.stage(id, stages[0]).CompletionSummary[alice]
					return ok
				})
				if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionFinishStage, TaskID: id, StageID: stages[0]}); err != nil {
					t.Fatal(err)
				}
				return id
			},
			wantWhy: []string{"all its stages have ended"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := bubbleBed(t, nil)
				start := time.Now()
				id := tt.staff(b)
				b.until("the stalled task to fail", 30*testStall, func() bool { return b.ended(id) })
				task := b.task(id)
				if task.ExecutionState != StateFailed {
					t.Fatalf("task %s, want failed", task.ExecutionState)
				}
				for _, w := range append([]string{"supervision"}, tt.wantWhy...) {
					if !strings.Contains(task.TaskSummary, w) {
						t.Errorf("reason %q does not say %q", task.TaskSummary, w)
					}
				}
				if n := len(b.stallNotices()); n != 2 {
					t.Errorf("manager processed %d supervision notices, want 2", n)
				}
				// Two notices and the failure, each after a quiet period.
				if took := time.Since(start); took < 3*testStall || took > 4*testStall {
					t.Errorf("failed after %s of quiet, want about 3 stall timeouts (%s)", took, 3*testStall)
				}
				if !b.inboxHas("has been marked failed") {
					t.Error("the operator's inbox does not say the task failed")
				}
			})
		})
	}
}

func TestStalledTaskRecoversAfterANotice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bubbleBed(t, nil)
		var id string
		// The manager wakes up at the supervision notice and finishes the task.
		b.sc.onAgent("manager", SkillProcessMessage, func(_ context.Context, in *ExecInput) *Output {
			if !strings.Contains(in.Step.TextContent, "[Supervision]") {
				return &Output{}
			}
			return &Output{TaskInstruction: &TaskInstruction{Action: ActionFinishTask, TaskID: id, Summary: "done after all"}}
		})
		id = b.newTask("report")
		b.until("the task to end", 10*testStall, func() bool { return b.ended(id) })
		if st := b.task(id); st.ExecutionState != StateFinished || st.TaskSummary != "done after all" {
			t.Fatalf("task %s (%q), want finished by the manager", st.ExecutionState, st.TaskSummary)
		}
		if n := len(b.stallNotices()); n != 1 {
			t.Errorf("%d notices, want 1", n)
		}
	})
}

func TestBusyTasksAreNotNoticed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bubbleBed(t, func(c *Config) { c.WaitTimeout = 10 * testStall })
		alice, bob := b.newAgent("alice"), b.newAgent("bob")
		id := b.newTask("report", alice, bob)
		// Alice waits on bob, who holds the reply back in a long step: the
		// task is waiting on someone (a timeout will release it) and busy.
		release := make(chan struct{})
		b.sc.onAgent("bob", SkillSendMessage, func(ctx context.Context, in *ExecInput) *Output {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return &Output{SendMessage: &OutgoingMessage{Message: "answer"}}
		})
		b.sc.onAgent("alice", SkillPlanning, func(_ context.Context, in *ExecInput) *Output {
			return &Output{AddSteps: []StepSpec{spec(SkillSendMessage, "ask bob")}}
		})
		b.sc.onText("ask bob", func(_ context.Context, in *ExecInput) *Output {
			return &Output{SendMessage: &OutgoingMessage{Receiver: StringList{bob}, Message: "question", NeedReply: true, Waiting: true}}
		})
		b.addStages(id, StageSpec{StageIntention: "talk", AgentAllocation: map[string]string{alice: "ask bob"}})
		// Many stall timeouts pass while bob's reply step runs.
		tick := time.NewTimer(5 * testStall)
		<-tick.C
		synctest.Wait()
		if n := len(b.stallNotices()); n != 0 {
			t.Fatalf("%d notices for a busy task", n)
		}
		close(release)
		b.until("the stage to complete", 10*testStall, func() bool {
			return len(b.task(id).StageList[0].CompletionSummary) == 1
		})
	})
}

func TestBaseTaskIsNeverFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bubbleBed(t, nil)
		var calls atomic.Int32
		b.sc.onAgent("manager", SkillProcessMessage, func(context.Context, *ExecInput) *Output {
			calls.Add(1)
			return &Output{Err: errors.New("status 500: down")}
		})
		// The operator's request fails in the manager's hands.
		if _, err := b.sys.HumanSend(b.op(), HumanMessage{TaskID: b.sys.BaseTaskID(), Receiver: []string{b.mgr()}, Content: "hello"}); err != nil {
			t.Fatal(err)
		}
		tick := time.NewTimer(20 * testStall)
		<-tick.C
		synctest.Wait()
		base := b.task(b.sys.BaseTaskID())
		if base.ExecutionState != StateRunning {
			t.Fatalf("base task %s", base.ExecutionState)
		}
		// The message, then at most StallNotices notices (each failing too).
		if n := calls.Load(); n != 3 {
			t.Errorf("manager processed %d messages, want the operator's and 2 notices", n)
		}
	})
}

func TestWaiterIsReleasedAtOnceWhenTheReplyCannotCome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bubbleBed(t, nil) // WaitTimeout stays at its 10-minute default
		alice, bob := b.newAgent("alice"), b.newAgent("bob")
		id := b.newTask("report", alice, bob)
		b.sc.onAgent("alice", SkillPlanning, func(context.Context, *ExecInput) *Output {
			return &Output{AddSteps: []StepSpec{spec(SkillSendMessage, "ask bob"), spec(SkillThink, "carry on")}}
		})
		b.sc.onText("ask bob", func(context.Context, *ExecInput) *Output {
			return &Output{SendMessage: &OutgoingMessage{Receiver: StringList{bob}, Message: "question", NeedReply: true, Waiting: true}}
		})
		// Bob's reply step fails: the reply can no longer come.
		b.sc.onAgent("bob", SkillSendMessage, func(context.Context, *ExecInput) *Output {
			return &Output{Err: errors.New("the LLM endpoint refused the API key (HTTP 401)")}
		})
		start := time.Now()
		b.addStages(id, StageSpec{StageIntention: "talk", AgentAllocation: map[string]string{alice: "ask bob", bob: "answer"}})
		b.until("alice to read that no reply comes", time.Minute, func() bool {
			for _, c := range b.sc.callsOf("alice", SkillProcessMessage) {
				if strings.Contains(c.Text, "can no longer come") && strings.Contains(c.Text, "HTTP 401") {
					return true
				}
			}
			return false
		})
		if waited := time.Since(start); waited >= time.Minute {
			t.Errorf("alice was released after %s, want at once (the wait timeout is 10m)", waited)
		}
		if lock := b.agent(alice).StepLock; len(lock) != 0 {
			t.Errorf("alice still holds %v", lock)
		}
	})
}

func TestRetryStageIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bubbleBed(t, func(c *Config) { c.RetryStageLimit = 3 })
		alice := b.newAgent("alice")
		var id string
		// Every call costs tokens, so the task's total shows the work done.
		cost := Usage{PromptTokens: 900, CompletionTokens: 100, TotalTokens: 1000, Calls: 1}
		for _, sk := range []string{SkillPlanning, SkillThink, SkillReflection} {
			b.sc.onSkill(sk, func(context.Context, *ExecInput) *Output { return &Output{AddSteps: []StepSpec{}, Usage: cost} })
		}
		b.sc.onSkill(SkillSummary, func(_ context.Context, in *ExecInput) *Output {
			done := "done by " + in.Agent.Name
			return &Output{Completion: &done, Usage: cost}
		})
		// A manager that answers every completed stage with retry_stage.
		b.sc.onAgent("manager", SkillProcessMessage, func(_ context.Context, in *ExecInput) *Output {
			if !strings.Contains(in.Step.TextContent, "have submitted their completion summaries") {
				return &Output{Usage: cost}
			}
			rs := running(b.task(id))
			if rs == nil {
				return &Output{Usage: cost}
			}
			return &Output{Usage: cost, TaskInstruction: &TaskInstruction{Action: ActionRetryStage, TaskID: id, OldStageID: rs.StageID,
				NewStageIntention: "again", NewAgentAllocation: map[string]string{alice: "collect again"}}}
		})
		id = b.newTask("report", alice)
		b.addStages(id, StageSpec{StageIntention: "collect", AgentAllocation: map[string]string{alice: "collect facts"}})
		b.until("the task to end", 50*testStall, func() bool { return b.ended(id) })
		task := b.task(id)
		if task.ExecutionState != StateFailed {
			t.Fatalf("task %s, want failed by supervision after the retries", task.ExecutionState)
		}
		if n := len(task.StageList); n != 4 {
			t.Errorf("%d stages, want the original and 3 retries", n)
		}
		var refused bool
		for _, s := range b.agent(b.mgr()).AgentStep.StepList {
			if e, _ := s.ExecuteResult["error"].(string); strings.Contains(e, "retried 3 times, the limit") {
				refused = true
			}
		}
		if !refused {
			// The manager's steps were cleaned at finish_task; the
			// shared info pool keeps the failure.
			for _, si := range task.SharedInfoPool {
				if strings.Contains(si.Content, "retried 3 times, the limit") {
					refused = true
				}
			}
		}
		if !refused {
			t.Error("the fourth retry_stage was not refused with the limit named")
		}
		if n := len(b.sc.callsOf("alice", SkillSummary)); n != 4 {
			t.Errorf("alice summarised %d times, want 4 (bounded work)", n)
		}
		// The token total is bounded: every call of the task is counted,
		// and there are a few dozen at most (4 stages, 2 notices; at least a planning and a summary per stage).
		calls := 0
		for _, c := range append(b.sc.callsOf("alice", ""), b.sc.callsOf("manager", "")...) {
			if c.TaskID == id {
				calls++
			}
		}
		if got, want := task.Usage.TotalTokens, calls*cost.TotalTokens; got != want || calls < 8 || calls > 30 {
			t.Errorf("the task's token total is %d over %d calls, want %d over 8 to 30", got, calls, want)
		}
	})
}

func TestManagerKeepsItsFinishStageStep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bubbleBed(t, nil)
		alice := b.newAgent("alice")
		var id string
		b.sc.onAgent("manager", SkillProcessMessage, func(_ context.Context, in *ExecInput) *Output {
			if !strings.Contains(in.Step.TextContent, "have submitted their completion summaries") {
				return &Output{}
			}
			return &Output{ReactAction: &StepSpec{StepIntention: "judge", TextContent: "judge the stage"}}
		})
		b.sc.onText("judge the stage", func(context.Context, *ExecInput) *Output {
			return &Output{AddNextSteps: []StepSpec{spec(SkillTaskManager, "accept the stage")}}
		})
		b.sc.onText("accept the stage", func(_ context.Context, in *ExecInput) *Output {
			// It finishes the stage and plans telling the operator.
			return &Output{
				TaskInstruction: &TaskInstruction{Action: ActionFinishStage, TaskID: id, StageID: in.Step.StageID},
				AddNextSteps:    []StepSpec{spec(SkillThink, "tell the operator the stage is done")},
			}
		})
		id = b.newTask("report", alice)
		stages := b.addStages(id, StageSpec{StageIntention: "collect", AgentAllocation: map[string]string{alice: "collect facts"}})
		b.until("the stage to finish", 10*testStall, func() bool { return b.stage(id, stages[0]).ExecutionState == StateFinished })
		b.until("the planned step to run", time.Minute, func() bool {
			return len(b.sc.callsOf("manager", SkillThink)) == 1
		})
		finish := b.steps(b.mgr(), func(s StepState) bool { return s.TextContent == "accept the stage" })
		if len(finish) != 1 || finish[0].ExecutionState != StateFinished {
			t.Fatalf("manager's finish_stage step: %+v, want it kept and finished", finish)
		}
		told := b.steps(b.mgr(), func(s StepState) bool { return s.TextContent == "tell the operator the stage is done" })
		if len(told) != 1 || told[0].ExecutionState != StateFinished {
			t.Fatalf("the step it planned: %+v, want it kept and run", told)
		}
	})
}

// running returns the task's running stage, or nil.
func running(t TaskState) *StageState {
	for i := range t.StageList {
		if t.StageList[i].ExecutionState == StateRunning {
			return &t.StageList[i]
		}
	}
	return nil
}
