package engine

import (
	"context"
	"slices"
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
		r := restartFrom(t, cfg, b.crashImage(st), b.sc)
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

// TestPausedTaskWaitLetsTheAgentRunItsOtherTasks: an agent waiting for a
// reply in a task that is then paused runs its other tasks' steps while
// the pause lasts (the wait is held with its paused task), and is held by
// the wait again once the task resumes. Held whole, the agent left its
// other tasks idle for as long as the pause lasted, with nobody told.
func TestPausedTaskWaitLetsTheAgentRunItsOtherTasks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bubbleBed(t, nil)
		alice := b.newAgent("alice")
		other := b.newTask("other", alice)
		first := b.newTask("first", alice)
		b.sc.onAgent("alice", SkillPlanning, func(_ context.Context, in *ExecInput) *Output {
			if in.Step.TaskID == other {
				return &Output{AddSteps: []StepSpec{spec(SkillSendMessage, "ask the operator")}}
			}
			return &Output{AddSteps: []StepSpec{}}
		})
		b.sc.onText("ask the operator", func(context.Context, *ExecInput) *Output {
			return &Output{SendMessage: &OutgoingMessage{Receiver: StringList{b.op()}, Message: "which sources?", NeedReply: true, Waiting: true}}
		})
		b.addStages(other, StageSpec{StageIntention: "ask", AgentAllocation: map[string]string{alice: "ask the operator"}})
		b.until("alice to wait on the operator", time.Minute, func() bool { return len(b.agent(alice).StepLock) == 1 })
		if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionPauseTask, TaskID: other}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if ws := b.agent(alice).WorkingState; ws != WorkingPaused {
			t.Errorf("alice, waiting only in a paused task with nothing else to run, shows %q; want paused", ws)
		}
		stages := b.addStages(first, StageSpec{StageIntention: "work", AgentAllocation: map[string]string{alice: "do the work"}})
		b.until("alice to finish her part of the first task", 10*testStall, func() bool {
			return len(b.stage(first, stages[0]).CompletionSummary) == 1
		})
		if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionResumeTask, TaskID: other}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if a := b.agent(alice); len(a.StepLock) != 1 || a.WorkingState != WorkingWaiting {
			t.Errorf("after the resume alice has lock %v and shows %q; want her wait to hold her again", a.StepLock, a.WorkingState)
		}
	})
}

// TestPausedAgentJoinsNoTask: a paused agent is refused as a new member of
// a task, as a participant or through a stage's new allocation: its pause
// would hold a task whose operator did not pause it and is not told, and
// its pauser could no longer resume it. Once resumed it joins.
func TestPausedAgentJoinsNoTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bubbleBed(t, nil)
		alice, bob := b.newAgent("alice"), b.newAgent("bob")
		if _, err := b.sys.AgentInstruction(b.op(), AgentInstruction{Action: ActionPauseAgent, Agents: StringList{alice}}); err != nil {
			t.Fatal(err)
		}
		bea, err := b.sys.AddOperator("bea")
		if err != nil {
			t.Fatal(err)
		}
		id, err := b.sys.AddTask(bea, AddTaskRequest{TaskName: "report", TaskIntention: "write a report"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = b.sys.AgentInstruction(bea, AgentInstruction{Action: ActionAddTaskParticipant, TaskID: id, Agents: StringList{alice}})
		isErr(t, err, ErrInvalid, "is paused")
		if _, err := b.sys.AgentInstruction(bea, AgentInstruction{Action: ActionAddTaskParticipant, TaskID: id, Agents: StringList{bob}}); err != nil {
			t.Fatal(err)
		}
		stages, err := b.sys.TaskInstruction(bea, TaskInstruction{Action: ActionAddStage, TaskID: id,
			Stages: []StageSpec{{StageIntention: "collect", AgentAllocation: map[string]string{bob: "collect facts"}}}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = b.sys.TaskInstruction(bea, TaskInstruction{Action: ActionRetryStage, TaskID: id, OldStageID: stages.AddStage.StageIDs[0],
			NewStageIntention: "collect again", NewAgentAllocation: map[string]string{alice: "collect facts"}})
		isErr(t, err, ErrInvalid, "new_agent_allocation: agent \""+alice+"\": is paused")
		if group := b.task(id).TaskGroup; slices.Contains(group, alice) {
			t.Fatalf("the refused agent is in the task group %v", group)
		}
		if _, err := b.sys.AgentInstruction(b.op(), AgentInstruction{Action: ActionResumeAgent, Agents: StringList{alice}}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.sys.AgentInstruction(bea, AgentInstruction{Action: ActionAddTaskParticipant, TaskID: id, Agents: StringList{alice}}); err != nil {
			t.Fatalf("the resumed agent: %v", err)
		}
	})
}

// TestPausedAgentManagesNoNewTask: a paused agent joins no task as its
// manager either: add_task naming it (or defaulting to it) is refused, so
// the new task does not wait on a manager that starts no step, and its
// pauser can still resume it.
func TestPausedAgentManagesNoNewTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bubbleBed(t, nil)
		m2, err := b.sys.CreateAgent(AgentConfig{Template: b.sys.cfg.ManagerTemplate, Name: "m2"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.sys.AgentInstruction(b.op(), AgentInstruction{Action: ActionPauseAgent, Agents: StringList{m2}}); err != nil {
			t.Fatal(err)
		}
		bea, err := b.sys.AddOperator("bea")
		if err != nil {
			t.Fatal(err)
		}
		id, err := b.sys.AddTask(bea, AddTaskRequest{TaskName: "report", TaskIntention: "write a report", Manager: m2})
		if err == nil {
			synctest.Wait()
			t.Errorf("add_task took the paused agent %s as its manager (task %s, group %v)", m2, id, b.task(id).TaskGroup)
			_, rerr := b.sys.AgentInstruction(b.op(), AgentInstruction{Action: ActionResumeAgent, Agents: StringList{m2}})
			if rerr != nil {
				t.Errorf("and its pauser can no longer resume it: %v", rerr)
			}
			return
		}
		isErr(t, err, ErrInvalid, "is paused")
	})
}
