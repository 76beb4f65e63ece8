package engine

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// A stage's end (finish_stage, retry_stage) drops the steps of its agents
// there and releases their waits on it; the questions they asked the
// operator in it are awaited by nobody any more, and no longer await a
// reply in the operator's inbox (marked expired: the task's MCP status is
// not input_required for them). A question outside the stage (the
// manager's) still awaits its reply. A crash after the stage's end was stored, before the
// operator's inbox was, changes nothing: the restart expires them.
func TestStageEndExpiresTheOperatorsQuestions(t *testing.T) {
	finish := func(_ *testbed, task, stage string) TaskInstruction {
		return TaskInstruction{Action: ActionFinishStage, TaskID: task, StageID: stage}
	}
	retry := func(b *testbed, task, stage string) TaskInstruction {
		return TaskInstruction{Action: ActionRetryStage, TaskID: task, OldStageID: stage,
			NewStageIntention: "do not wait again", NewAgentAllocation: map[string]string{b.agentNamed("alice"): "carry on"}}
	}
	for _, tc := range []struct {
		name  string
		end   func(b *testbed, task, stage string) TaskInstruction
		crash bool
	}{
		{"finish_stage", finish, false},
		{"retry_stage", retry, false},
		{"finish_stage, then a crash", finish, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, store, restart := newFreezeBed(t)
			op := b.op()
			alice, task, stage := askingInAStage(b)
			b.sc.onText("ask outside the stage", func(context.Context, *ExecInput) *Output {
				return &Output{SendMessage: &OutgoingMessage{Receiver: StringList{op}, Message: "and one more thing", NeedReply: true}}
			})
			mgr := b.mgr()
			outside := b.inject(mgr, task, NoRelative, false, spec(SkillSendMessage, "ask outside the stage"))[0]
			b.waitFor("the manager's question outside the stage", func() bool { return b.stepDone(mgr, outside) })
			b.settle()
			if awaiting := awaitingIn(b, task); len(awaiting) != 2 {
				t.Fatalf("the operator's questions of the task awaiting a reply: %+v, want alice's and the manager's", awaiting)
			}

			if tc.crash {
				// The store takes the task's document with the stage
				// ended, and nothing after it.
				store.mu.Lock()
				store.freezeTask = func(ts *TaskState) bool {
					return ts.TaskID == task && slices.ContainsFunc(ts.StageList, func(sg StageState) bool {
						return sg.StageID == stage && sg.ExecutionState != StateRunning
					})
				}
				store.mu.Unlock()
			}
			if _, err := b.sys.TaskInstruction(op, tc.end(b, task, stage)); err != nil {
				t.Fatal(err)
			}
			if tc.crash {
				b, _ = restart()
			}
			b.settle()
			// (After a crash the restart releases it: the stage ended.)
			if a := b.agent(alice); len(a.StepLock) != 0 {
				t.Fatalf("alice still waits after %s: %v", tc.name, a.StepLock)
			}
			for _, e := range awaitingIn(b, task) {
				if e.StageRelative == stage {
					t.Errorf("after %s of stage %s (alice's wait released, her steps there dropped), the operator's inbox still shows her question as awaiting a reply (waiting=%v): %q",
						tc.name, stage, e.Waiting, e.Content)
				}
			}
			if awaiting := awaitingIn(b, task); len(awaiting) != 1 || awaiting[0].SenderID != mgr {
				t.Errorf("the operator's questions of the task awaiting a reply after %s: %+v, want the manager's, outside the stage", tc.name, awaiting)
			}
		})
	}
}

// awaitingIn is the operator's messages of the task that await a reply.
func awaitingIn(b *testbed, task string) []InboxEntry {
	in, err := b.sys.Inbox(b.op())
	if err != nil {
		b.t.Fatal(err)
	}
	var out []InboxEntry
	for _, e := range in {
		if e.TaskID == task && e.AwaitingReply {
			out = append(out, e)
		}
	}
	return out
}

// The operator asks an agent and waits for the reply (a HumanAgent holds
// no step lock: the engine tells it "[No reply coming]" when the reply
// can no longer come). The stage ends before the agent's reply step sent
// it — the step queued, or running — and finish_stage drops the step: the
// operator is told that no reply is coming, and why.
func TestStageEndTellsTheOperatorNoReplyIsComing(t *testing.T) {
	for _, running := range []bool{false, true} {
		t.Run(map[bool]string{false: "reply step queued", true: "reply step running"}[running], func(t *testing.T) {
			b := newTestbed(t, nil)
			op := b.op()
			alice := b.newAgent("alice")
			task := b.newTask("busy", alice)
			busy, release, replying := make(chan struct{}), make(chan struct{}), make(chan struct{})
			b.sc.onAgent("alice", SkillPlanning, func(ctx context.Context, _ *ExecInput) *Output {
				close(busy)
				select { // busy until the stage ends, or released
				case <-ctx.Done():
				case <-release:
				}
				return &Output{}
			})
			b.sc.onAgent("alice", SkillSendMessage, func(ctx context.Context, _ *ExecInput) *Output {
				close(replying)
				<-ctx.Done() // writing the reply until the stage ends
				return &Output{Err: ctx.Err()}
			})
			stage := b.addStages(task, StageSpec{StageIntention: "work", AgentAllocation: map[string]string{alice: "work"}})[0]
			waitChan(t, busy, "alice's planning step")

			if _, err := b.sys.HumanSend(op, HumanMessage{TaskID: task, Receiver: []string{alice}, Content: "what is the status? I wait for it",
				StageRelative: stage, NeedReply: true, Waiting: true}); err != nil {
				t.Fatal(err)
			}
			b.waitFor("alice's reply step", func() bool {
				return len(b.steps(alice, func(s StepState) bool { return s.ReplyTo == op && s.ExecutionState == StateInit })) == 1
			})
			if running {
				close(release)
				waitChan(t, replying, "alice's reply step to run")
			}
			if _, err := b.sys.TaskInstruction(op, TaskInstruction{Action: ActionFinishStage, TaskID: task, StageID: stage}); err != nil {
				t.Fatal(err)
			}
			b.settle()
			if left := b.steps(alice, func(s StepState) bool { return s.ReplyTo == op }); len(left) != 0 {
				t.Fatalf("alice's reply step is still there: %+v", left)
			}
			in, err := b.sys.Inbox(op)
			if err != nil {
				t.Fatal(err)
			}
			var notices []string
			for _, e := range in {
				if e.SenderID == alice {
					t.Fatalf("alice replied after all: %q", e.Content)
				}
				if strings.Contains(e.Content, "[No reply coming]") {
					notices = append(notices, e.Content)
				}
			}
			if len(notices) != 1 || !strings.Contains(notices[0], "its stage ended") {
				t.Errorf("finish_stage dropped alice's reply step to the operator's waiting message; the operator's notices that no reply is coming: %q, want one saying %q", notices, "its stage ended")
			}
		})
	}
}

// A question an agent sends the operator in a stage as the stage ends
// reaches the operator's inbox after the stage end's pass that expires
// the operator's questions of the stage (stageEnded): nobody waits for its
// answer any more either, so it must not await a reply there for good (the
// task's MCP status input_required). It is marked expired at receipt, as
// a message of an ended task is not taken (lateLocked). Driven
// deterministically: the stage ends, then the question is delivered.
func TestQuestionOfAnEndedStageArrivesExpired(t *testing.T) {
	b := newTestbed(t, nil)
	op := b.op()
	alice := b.newAgent("alice")
	task := b.newTask("late question", alice)
	stage := b.addStages(task, StageSpec{StageIntention: "work", AgentAllocation: map[string]string{alice: "the goal"}})[0]
	b.settle()
	if _, err := b.sys.TaskInstruction(op, TaskInstruction{Action: ActionFinishStage, TaskID: task, StageID: stage}); err != nil {
		t.Fatal(err)
	}
	b.settle()

	// Alice's send step, still running as the stage ended, posts its
	// question now: after the stage end's pass over the operator's inbox.
	m := b.sys.newMessage("", task, alice, []string{op}, "a question of the ended stage", stage)
	m.NeedReply = true
	m.Waiting = []string{derivedID(m.MessageID, "wait", op)}
	if err := b.sys.post(m); err != nil {
		t.Fatal(err)
	}
	in, err := b.sys.Inbox(op)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(in, func(e InboxEntry) bool { return e.MessageID == m.MessageID })
	if i < 0 {
		t.Fatalf("the question is not in the operator's inbox: %+v", in)
	}
	if e := in[i]; e.AwaitingReply || !e.Expired {
		t.Errorf("a question of stage %s, which had ended, reached the operator awaiting a reply (%v, expired %v): nobody waits for it, and it would await one for good",
			stage, e.AwaitingReply, e.Expired)
	}
}

// TestWaiterOnAQuestionOfAnEndedStageIsReleased: alice sends the operator a
// waiting question in a stage that has ended (a step of a message in that
// stage sends it): the question reaches the operator expired, so nobody
// will answer it, and alice, blocked on it, must not wait out the whole
// wait timeout with every step of hers held: her wait is released, a step
// telling her no reply will come.
func TestWaiterOnAQuestionOfAnEndedStageIsReleased(t *testing.T) {
	b := newTestbed(t, nil)
	op := b.op()
	alice := b.newAgent("alice")
	task := b.newTask("late waiting question", alice)
	stage := b.addStages(task, StageSpec{StageIntention: "work", AgentAllocation: map[string]string{alice: "the goal"}})[0]
	b.settle()
	if _, err := b.sys.TaskInstruction(op, TaskInstruction{Action: ActionFinishStage, TaskID: task, StageID: stage}); err != nil {
		t.Fatal(err)
	}
	b.settle()

	a, _ := b.sys.agent(alice)
	m := b.sys.newMessage("", task, alice, []string{op}, "a waiting question of the ended stage", stage)
	m.NeedReply = true
	m.Waiting = []string{derivedID(m.MessageID, "wait", op)}
	b.sys.engageWaits(a, &m)
	if got := b.agent(alice).StepLock; len(got) != 1 {
		t.Fatalf("alice's step lock before the question is sent: %v, want her wait on the operator", got)
	}
	if err := b.sys.post(m); err != nil {
		t.Fatal(err)
	}
	b.waitFor("alice's wait on the expired question released", func() bool { return len(b.agent(alice).StepLock) == 0 })
}

// TestStageEndAfterItsTaskEndedLeavesNoMark: a stage's end that comes
// after its task's end (a cancel racing finish_stage: the task's end forgot
// its ended stages before this one was marked) leaves no mark of the stage
// behind: the task's end covers it, and nothing would ever drop the mark.
func TestStageEndAfterItsTaskEndedLeavesNoMark(t *testing.T) {
	b := newTestbed(t, nil)
	alice := b.newAgent("alice")
	task := b.newTask("racing ends", alice)
	stage := b.addStages(task, StageSpec{StageIntention: "work", AgentAllocation: map[string]string{alice: "the goal"}})[0]
	b.settle()
	if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionCancelTask, TaskID: task}); err != nil {
		t.Fatal(err)
	}
	b.settle()
	b.sys.stageEnded(task, stage) // the stage's end, arriving last
	if b.sys.stageHasEnded(task, stage) {
		t.Errorf("stage %s of the ended task %s is still marked ended after both ends: the mark stays for the process's life", stage, task)
	}
}
