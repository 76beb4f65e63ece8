package engine

import (
	"context"
	"slices"
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
			// (A restart leaves alice's wait to its timeout: the release
			// came after the crash.)
			if a := b.agent(alice); len(a.StepLock) != 0 && !tc.crash {
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
