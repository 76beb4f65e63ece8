package engine

// An ended stage (finish_stage, retry_stage) has no work running or
// queued after a restart either: a crash between the write of the stage's
// end (the task's document) and those of its agents (the finish_stage
// instructions delivered, their steps dropped, their waits released)
// leaves nothing of the stage running or waiting.

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// isFinishStageP is isFinishStage of a message's address.
func isFinishStageP(m *Message) bool { return isFinishStage(*m) }

// crashAfterFinishStage has the operator finish a stage and crashes right
// after the store took the task's document with the stage finished, and
// before anything else: it returns the image a restart finds.
func crashAfterFinishStage(t *testing.T, b *testbed, store *freezeStore, task, stage string) *Image {
	t.Helper()
	store.freezeTask = func(ts *TaskState) bool {
		for _, sg := range ts.StageList {
			if ts.TaskID == task && sg.StageID == stage && sg.ExecutionState == StateFinished {
				return true
			}
		}
		return false
	}
	if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionFinishStage, TaskID: task, StageID: stage}); err != nil {
		t.Fatal(err)
	}
	return crashed(t, b, store)
}

// kill -9 right after finish_stage: the task's document says the stage
// finished, but the finish_stage instructions to its agents (which drop
// their steps of the stage) were not stored yet. The restart sends them
// again (task.implied); meanwhile no agent runs its step of the ended
// stage, running at the crash or queued (an LLM call, or a tool call with
// effects downstream, for work the stage's end dropped). The store's
// write of the instruction is held until a step of the stage runs (at
// most an hour of fake time): the engine's own order decides.
func TestNoStepOfAFinishedStageRunsAfterARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, store, cfg := frozenBed(t, nil)
		alice := b.newAgent("alice")
		task := b.newTask("a stage to finish", alice)
		longWork(b)
		b.sc.onAgent("alice", SkillPlanning, func(context.Context, *ExecInput) *Output {
			return &Output{AddSteps: []StepSpec{spec(SkillThink, "long work"), spec(SkillThink, "more work")}}
		})
		stage := b.addStages(task, StageSpec{StageIntention: "work", AgentAllocation: map[string]string{alice: "work"}})[0]
		synctest.Wait()
		if id, run := b.sys.mustAgent(t, alice).runningStep(); id == "" || run != task {
			t.Fatalf("alice runs %q of %q, want a step of the stage\n%s", id, run, b.dump())
		}
		img := crashAfterFinishStage(t, b, store, task, stage)
		queued := 0
		for _, a := range img.Agents {
			for _, s := range a.AgentStep.StepList {
				if a.AgentID == alice && s.StageID == stage && (s.ExecutionState == StateInit || s.ExecutionState == StateRunning) {
					queued++
				}
			}
		}
		if queued < 2 {
			t.Fatalf("image: alice has %d steps of the stage to run, want her running and queued ones still there", queued)
		}

		ran, calls := runsOf(b.sc, func(s *StepState) bool { return s.StageID == stage }, "long work", "more work")
		cfg.Store = &heldStore{MemoryStore: NewMemoryStore(), release: ran, limit: time.Hour, hold: isFinishStageP}
		b2 := startFrom(t, cfg, img, b.sc)
		synctest.Wait()

		if c := calls(); len(c) > 0 {
			t.Errorf("after the restart, alice ran %v of stage %s, which finished before the crash", c, stage)
		}
		if left := b2.steps(alice, func(s StepState) bool {
			return s.StageID == stage && (s.ExecutionState == StateInit || s.ExecutionState == StateRunning)
		}); len(left) != 0 {
			t.Errorf("alice still has %d steps of the finished stage to run", len(left))
		}
	})
}

// kill -9 right after finish_stage, as above, while an agent waits in the
// stage (on the operator's reply): the stage's end released the wait in
// memory (stageEnded), but the crash came before the agent's document was
// written without it. The restart releases it, as the stage's end did:
// the agent does not sit out its wait timeout.
func TestAWaitInAFinishedStageEndsAfterARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, store, cfg := frozenBed(t, nil)
		alice, task, stage := askingInAStage(b)
		waitEndsAfterRestart(t, cfg, b, crashAfterFinishStage(t, b, store, task, stage), alice, "the finished stage")
	})
}

// kill -9 while the manager's step that finished a stage is applied: the
// task's document says the stage finished, the step's own end and the
// finish_stage instructions were not stored. The restart ends the stage
// for its agents before any loop runs, but keeps the manager's step that
// ended it (it runs again, as a step found running does, and its
// finish_stage is taken as done) and what it plans: the steps a
// finish_stage keeps for the step that sent it (endingStepLocked).
func TestTheStepThatFinishedAStageRunsAgainAfterARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, store, cfg := frozenBed(t, nil)
		alice := b.newAgent("alice")
		task := b.newTask("a stage the manager finishes", alice)
		stage := b.addStages(task, StageSpec{StageIntention: "work", AgentAllocation: map[string]string{alice: "work"}})[0]
		synctest.Wait()
		b.sc.onText("end the stage", func(_ context.Context, in *ExecInput) *Output {
			return &Output{
				TaskInstruction: &TaskInstruction{Action: ActionFinishStage, TaskID: task, StageID: in.Step.StageID},
				AddNextSteps:    []StepSpec{spec(SkillThink, "tell the operator the stage is done")},
			}
		})
		store.freezeTask = func(ts *TaskState) bool {
			return ts.TaskID == task && ts.StageList[0].ExecutionState == StateFinished
		}
		mgr := b.mgr()
		id := b.inject(mgr, task, stage, false, spec(SkillTaskManager, "end the stage"))[0]
		img := crashed(t, b, store)
		for _, a := range img.Agents {
			for _, s := range a.AgentStep.StepList {
				if s.StepID == id && s.ExecutionState != StateRunning {
					t.Fatalf("image: the manager's step is %s, want running (the crash came before its end)", s.ExecutionState)
				}
			}
		}

		b2 := restartFrom(t, cfg, img, b.sc)
		synctest.Wait()
		if s, ok := b2.step(mgr, id); !ok || s.ExecutionState != StateFinished {
			t.Errorf("after the restart the manager's step that finished the stage: %+v (found %v), want it run again and finished", s, ok)
		}
		told := b2.steps(mgr, func(s StepState) bool { return s.TextContent == "tell the operator the stage is done" })
		if len(told) != 1 || told[0].ExecutionState != StateFinished {
			t.Errorf("the step it plans: %+v, want it kept and run", told)
		}
	})
}

// kill -9 right after finish_stage, as above, while a reply is owed in the
// stage: alice, busy, has a queued reply step for a question asked there
// (by bob, an agent, or by the operator, each waiting for the reply). The
// stage's end dropped the reply step and settled the wait; the crash came
// before the documents said so. After the restart alice does not send that
// reply, bob waits no more (the stage's end released his wait), and the
// operator, who holds no step lock, is told the reply can no longer come.
func TestAReplyOwedInAFinishedStageAfterARestart(t *testing.T) {
	for _, byOperator := range []bool{false, true} {
		t.Run(map[bool]string{false: "an agent waits", true: "the operator waits"}[byOperator], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, store, cfg := frozenBed(t, nil)
				op := b.op()
				alice, bob := b.newAgent("alice"), b.newAgent("bob")
				task := b.newTask("a reply owed", alice, bob)
				longWork(b)
				b.sc.onAgent("alice", SkillPlanning, func(context.Context, *ExecInput) *Output {
					return &Output{AddSteps: []StepSpec{spec(SkillThink, "long work")}}
				})
				b.sc.onAgent("bob", SkillPlanning, func(context.Context, *ExecInput) *Output { return &Output{} })
				b.sc.onText("ask alice", func(context.Context, *ExecInput) *Output {
					return &Output{SendMessage: &OutgoingMessage{Receiver: StringList{alice}, Message: "are you done?", NeedReply: true, Waiting: true}}
				})
				stage := b.addStages(task, StageSpec{StageIntention: "work", AgentAllocation: map[string]string{alice: "work", bob: "ask"}})[0]
				synctest.Wait()
				if byOperator {
					if _, err := b.sys.HumanSend(op, HumanMessage{TaskID: task, Receiver: []string{alice}, Content: "are you done?", StageRelative: stage, NeedReply: true, Waiting: true}); err != nil {
						t.Fatal(err)
					}
				} else {
					b.inject(bob, task, stage, false, spec(SkillSendMessage, "ask alice"))
				}
				synctest.Wait()
				replies := func(b *testbed) []StepState {
					return b.steps(alice, func(s StepState) bool { return s.Executor == SkillSendMessage && s.ReturnWaitingID != "" })
				}
				if r := replies(b); len(r) != 1 || r[0].ExecutionState != StateInit {
					t.Fatalf("alice's reply steps %+v, want one queued\n%s", r, b.dump())
				}
				waiting := replies(b)[0].ReturnWaitingID
				img := crashAfterFinishStage(t, b, store, task, stage)

				b2 := restartFrom(t, cfg, img, b.sc)
				synctest.Wait()
				if n := len(b2.sc.callsOf("alice", SkillSendMessage)); n != 0 {
					t.Errorf("after the restart alice ran %d send_message steps: the reply owed in the finished stage was sent", n)
				}
				if r := replies(b2); len(r) != 0 {
					t.Errorf("alice still has the reply step of the finished stage: %+v", r)
				}
				if byOperator {
					if !slices.Contains(b2.agent(op).Received, replyLostID(waiting)) {
						t.Errorf("the operator was not told that alice's reply can no longer come")
					}
					return
				}
				if a := b2.agent(bob); len(a.StepLock) != 0 || len(a.Waits) != 0 {
					t.Errorf("after the restart bob still waits for alice's reply in the finished stage: step lock %v, waits %+v", a.StepLock, a.Waits)
				}
			})
		})
	}
}
