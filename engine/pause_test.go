package engine

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestPauseHoldsATaskAcrossARestart: pause a task mid-stage → no step of it
// starts while paused (the executors are never called), its supervision
// and wait timeouts are suspended; restart → still paused; resume → it
// finishes.
func TestPauseHoldsATaskAcrossARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := NewMemoryStore()
		var cfg Config
		b := bubbleBed(t, func(c *Config) { c.Store = st; c.WaitTimeout = testStall; cfg = *c })
		alice, bob := b.newAgent("alice"), b.newAgent("bob")
		id := b.newTask("report", alice, bob)
		thinking := make(chan struct{})
		release := make(chan struct{})
		b.sc.onAgent("alice", SkillPlanning, func(context.Context, *ExecInput) *Output {
			return &Output{AddSteps: []StepSpec{spec(SkillThink, "think long"), spec(SkillSendMessage, "ask bob"), spec(SkillThink, "after")}}
		})
		b.sc.onText("think long", func(context.Context, *ExecInput) *Output {
			close(thinking)
			<-release // the running step finishes after the pause
			return &Output{}
		})
		b.sc.onText("ask bob", func(context.Context, *ExecInput) *Output {
			return &Output{SendMessage: &OutgoingMessage{Receiver: StringList{bob}, Message: "question", NeedReply: true, Waiting: true}}
		})
		stages := b.addStages(id, StageSpec{StageIntention: "collect", AgentAllocation: map[string]string{alice: "collect facts"}})
		<-thinking
		if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionPauseTask, TaskID: id}); err != nil {
			t.Fatal(err)
		}
		// A step another agent popped just before the pause runs to its
		// end, as alice's does, and may reach its executor only now: once
		// everything settled, every call since the pause must be of a step
		// that was running at the pause.
		atPause, running := b.sc.count(), map[string]bool{}
		for _, id := range []string{alice, bob, b.mgr()} {
			a, _ := b.sys.agent(id)
			a.mu.Lock()
			running[a.running] = a.running != ""
			a.mu.Unlock()
		}
		synctest.Wait()
		for _, c := range b.sc.since(atPause) {
			if !running[c.StepID] {
				t.Fatalf("%s's %s step %s started while the task was paused", c.Agent, c.Skill, c.StepID)
			}
		}
		before := b.sc.count()
		close(release)
		// Far longer than the stall timeout passes: nothing starts, no notice.
		tick := time.NewTimer(10 * testStall)
		<-tick.C
		synctest.Wait()
		if n := b.sc.count(); n != before {
			t.Fatalf("%d executor calls while the task was paused: %+v", n-before, b.sc.since(before))
		}
		if n := len(b.stallNotices()); n != 0 {
			t.Fatalf("%d stall notices for a paused task", n)
		}
		if ws := b.agent(alice).WorkingState; ws != WorkingPaused {
			t.Errorf("alice shows %q, want paused", ws)
		}
		think := b.steps(alice, func(s StepState) bool { return s.TextContent == "think long" })
		if len(think) != 1 || think[0].ExecutionState != StateFinished {
			t.Errorf("the step running at the pause: %+v, want it finished", think)
		}

		// A restart (after a crash: no Close) keeps the pause.
		img, err := st.Image()
		if err != nil {
			t.Fatal(err)
		}
		b.sub.Close()
		_ = b.sys.Close()
		r := restartFrom(t, cfg, img, b.sc)
		if !r.task(id).Paused {
			t.Fatal("the task is not paused after the restart")
		}
		tick = time.NewTimer(5 * testStall)
		<-tick.C
		synctest.Wait()
		if n := r.sc.count(); n != before {
			t.Fatalf("%d executor calls after the restart of a paused task", n-before)
		}
		if _, err := r.sys.TaskInstruction(r.op(), TaskInstruction{Action: ActionResumeTask, TaskID: id}); err != nil {
			t.Fatal(err)
		}
		// Bob answers; alice's wait was not timed out by the pause.
		r.until("the stage to complete", 20*testStall, func() bool {
			return len(r.stage(id, stages[0]).CompletionSummary) == 1
		})
		for _, c := range r.sc.callsOf("alice", SkillProcessMessage) {
			if strings.Contains(c.Text, "none came within") {
				t.Errorf("alice's wait timed out although the time passed while paused: %s", c.Text)
			}
		}
	})
}

func TestPauseAgent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bubbleBed(t, nil)
		alice := b.newAgent("alice")
		id := b.newTask("report", alice)
		if _, err := b.sys.AgentInstruction(b.op(), AgentInstruction{Action: ActionPauseAgent, Agents: StringList{alice}}); err != nil {
			t.Fatal(err)
		}
		stages := b.addStages(id, StageSpec{StageIntention: "collect", AgentAllocation: map[string]string{alice: "collect facts"}})
		synctest.Wait()
		if n := len(b.sc.callsOf("alice", "")); n != 0 {
			t.Fatalf("a paused agent ran %d steps", n)
		}
		if ws := b.agent(alice).WorkingState; ws != WorkingPaused {
			t.Errorf("alice shows %q, want paused", ws)
		}
		// Agents may not pause others; operators only.
		_, err := b.sys.AgentInstruction(b.mgr(), AgentInstruction{Action: ActionResumeAgent, Agents: StringList{alice}})
		isErr(t, err, ErrForbidden, "operators")
		if _, err := b.sys.AgentInstruction(b.op(), AgentInstruction{Action: ActionResumeAgent, Agents: StringList{alice}}); err != nil {
			t.Fatal(err)
		}
		b.until("alice's summary", 10*testStall, func() bool {
			return len(b.stage(id, stages[0]).CompletionSummary) == 1
		})
	})
}

func TestPauseRefusals(t *testing.T) {
	b := newTestbed(t, nil)
	_, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionPauseTask, TaskID: b.sys.BaseTaskID()})
	isErr(t, err, ErrInvalid, "base task")
	id := b.newTask("report")
	if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionCancelTask, TaskID: id}); err != nil {
		t.Fatal(err)
	}
	_, err = b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionPauseTask, TaskID: id})
	isErr(t, err, ErrEnded, id)
	_, err = b.sys.AgentInstruction(b.op(), AgentInstruction{Action: ActionPauseAgent, Agents: StringList{b.op()}})
	isErr(t, err, ErrInvalid, "HumanAgent")
	_, err = b.sys.AgentInstruction(b.op(), AgentInstruction{Action: ActionPauseAgent})
	isErr(t, err, ErrInvalid, "agents")
}

// TestPauseSuspendsWaitTimeouts: a wait in a paused task does not time out
// while the task is paused; its deadline moves by the time it was paused.
func TestPauseSuspendsWaitTimeouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bubbleBed(t, func(c *Config) { c.WaitTimeout = testStall })
		alice, bob := b.newAgent("alice"), b.newAgent("bob")
		id := b.newTask("report", alice, bob)
		b.sc.onAgent("alice", SkillPlanning, func(context.Context, *ExecInput) *Output {
			return &Output{AddSteps: []StepSpec{spec(SkillSendMessage, "ask bob")}}
		})
		b.sc.onText("ask bob", func(context.Context, *ExecInput) *Output {
			return &Output{SendMessage: &OutgoingMessage{Receiver: StringList{bob}, Message: "question", NeedReply: true, Waiting: true}}
		})
		b.sc.onAgent("bob", SkillSendMessage, func(context.Context, *ExecInput) *Output {
			return &Output{SendMessage: &OutgoingMessage{Message: "answer"}}
		})
		// Bob is held, so alice's question waits.
		if _, err := b.sys.AgentInstruction(b.op(), AgentInstruction{Action: ActionPauseAgent, Agents: StringList{bob}}); err != nil {
			t.Fatal(err)
		}
		b.addStages(id, StageSpec{StageIntention: "talk", AgentAllocation: map[string]string{alice: "ask bob"}})
		b.until("alice to wait", time.Minute, func() bool { return len(b.agent(alice).StepLock) == 1 })
		if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionPauseTask, TaskID: id}); err != nil {
			t.Fatal(err)
		}
		tick := time.NewTimer(10 * testStall) // ten wait timeouts
		<-tick.C
		synctest.Wait()
		if len(b.agent(alice).StepLock) != 1 {
			t.Fatal("alice's wait timed out while the task was paused")
		}
		if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionResumeTask, TaskID: id}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if len(b.agent(alice).StepLock) != 1 {
			t.Fatal("alice's wait timed out at once on resume: its deadline did not move")
		}
		if _, err := b.sys.AgentInstruction(b.op(), AgentInstruction{Action: ActionResumeAgent, Agents: StringList{bob}}); err != nil {
			t.Fatal(err)
		}
		b.until("bob's answer to release alice", time.Minute, func() bool { return len(b.agent(alice).StepLock) == 0 })
		for _, c := range b.sc.callsOf("alice", SkillProcessMessage) {
			if strings.Contains(c.Text, "none came within") {
				t.Errorf("alice's wait timed out: %s", c.Text)
			}
		}
	})
}

// TestControlsFollowOwnership: another operator may not pause, resume or
// interrupt what belongs to a task it may not operate.
func TestControlsFollowOwnership(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bubbleBed(t, nil)
		other, err := b.sys.AddOperator("other")
		if err != nil {
			t.Fatal(err)
		}
		alice := b.newAgent("alice")
		id := b.newTask("report", alice)
		started := make(chan struct{})
		b.sc.onAgent("alice", SkillPlanning, func(ctx context.Context, _ *ExecInput) *Output {
			close(started)
			<-ctx.Done()
			return &Output{Err: ctx.Err()}
		})
		b.addStages(id, StageSpec{StageIntention: "collect", AgentAllocation: map[string]string{alice: "collect facts"}})
		<-started
		_, err = b.sys.TaskInstruction(other, TaskInstruction{Action: ActionPauseTask, TaskID: id})
		isErr(t, err, ErrForbidden, "owned by operator")
		// The refusals of controls of an agent name no task of another
		// operator, nor its owner: the caller may not see them.
		_, err = b.sys.AgentInstruction(other, AgentInstruction{Action: ActionPauseAgent, Agents: StringList{alice}})
		isErr(t, err, ErrForbidden, "also works on a task you may not operate")
		if strings.Contains(err.Error(), id) || strings.Contains(err.Error(), b.op()) {
			t.Errorf("pause_agent's refusal names the other operator's task or owner: %v", err)
		}
		_, err = b.sys.Interrupt(other, alice, "", "stop")
		isErr(t, err, ErrForbidden, "belongs to a task you may not operate")
		if strings.Contains(err.Error(), id) || strings.Contains(err.Error(), b.op()) {
			t.Errorf("interrupt's refusal names the other operator's task or owner: %v", err)
		}
		if b.task(id).Paused || b.agent(alice).Paused {
			t.Error("a refused control changed something")
		}
		if _, err := b.sys.Interrupt(b.op(), alice, "", "stop"); err != nil {
			t.Errorf("the owner's interrupt: %v", err)
		}
	})
}

// TestOverlappingPauseAndResumeAgree: a pause and a resume of a task that
// overlap leave the task's Paused (what supervision reads) and s.paused
// (what the agents' loops and wait timers read) agreeing. Were they
// applied in different orders, the task could read as running while
// s.paused holds it: no agent would start a step of it, resume_task would
// change nothing, and supervision would count it busy — idle and
// unended, and nobody told.
func TestOverlappingPauseAndResumeAgree(t *testing.T) {
	b := newTestbed(t, nil)
	alice := b.newAgent("alice")
	id := b.newTask("racy", alice)
	b.settle()
	tk, _ := b.sys.task(id)
	op := b.op()
	pause := func(p bool) {
		action := ActionResumeTask
		if p {
			action = ActionPauseTask
		}
		_, _ = b.sys.TaskInstruction(op, TaskInstruction{Action: action, TaskID: id})
	}
	const rounds = 4000
	for i := 0; i < rounds; i++ {
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); <-start; pause(true) }()
		go func() { defer wg.Done(); <-start; pause(false) }()
		close(start)
		wg.Wait()
		tk.mu.Lock()
		taskPaused := tk.st.Paused
		tk.mu.Unlock()
		if inMap := b.sys.isPaused(id); inMap != taskPaused {
			t.Errorf("round %d: task Paused=%v but s.paused says %v", i, taskPaused, inMap)
			if taskPaused {
				return // the other order: a "paused" task whose steps run
			}
			// The task reads as running; resume_task does nothing.
			res, err := b.sys.TaskInstruction(op, TaskInstruction{Action: ActionResumeTask, TaskID: id})
			if err == nil && res.PauseTask != nil && !res.PauseTask.Changed && b.sys.isPaused(id) {
				t.Errorf("resume_task: changed=false, and the task stays held in s.paused")
			}
			ids := b.inject(alice, id, NoRelative, false, spec(SkillThink, "a step of the task"))
			b.waitFor("alice to show paused", func() bool { return b.agent(alice).WorkingState == WorkingPaused })
			st := b.task(id)
			if !st.Paused && !b.stepDone(alice, ids[0]) && b.sys.busy(&st) {
				t.Errorf("the task is not paused, alice holds its step %s unrun (working_state %s), and supervision counts the task busy: it never moves",
					ids[0], b.agent(alice).WorkingState)
			}
			return
		}
		// Back to running for the next round.
		if taskPaused {
			pause(false)
		}
	}
}
