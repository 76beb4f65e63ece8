package engine

import (
	"context"
	"slices"
	"testing"
)

// reportOutage starts a task whose stages (two) alice is allocated to, on a
// store that refuses the task's writes once they hold one of alice's
// reports, and returns once her first report is on its way: stored with
// her, refused by the task.
func reportOutage(t *testing.T) (b *testbed, st *refuseTaskStore, alice, id string, stages []string) {
	t.Helper()
	st = &refuseTaskStore{MemoryStore: NewMemoryStore()}
	b = newTestbed(t, func(c *Config) { c.Store = st })
	alice = b.newAgent("alice")
	b.sc.onAgent("alice", SkillPlanning, func(context.Context, *ExecInput) *Output {
		return &Output{AddSteps: []StepSpec{spec(SkillThink, "think")}}
	})
	id = b.newTask("report", alice)
	fromAlice := func(si SharedInfo) bool { return si.AgentID == alice }
	st.refuseWhen(func(ts *TaskState) bool { return ts.TaskID == id && slices.ContainsFunc(ts.SharedInfoPool, fromAlice) })
	stages = b.addStages(id,
		StageSpec{StageIntention: "collect", AgentAllocation: map[string]string{alice: "collect facts"}},
		StageSpec{StageIntention: "write", AgentAllocation: map[string]string{alice: "write it up"}})
	b.waitFor("alice's first report to be on its way", func() bool {
		stored, _ := st.Agent(alice)
		return len(stored.Reports) > 0
	})
	// The task takes it a moment after her write: until then nothing of
	// hers is pending in the task, and a change would be stored alone.
	tk, _ := b.sys.task(id)
	b.waitFor("the task to take alice's first report", func() bool {
		tk.mu.lockToRead()
		defer tk.mu.unlockRead()
		return slices.ContainsFunc(tk.st.SharedInfoPool, fromAlice)
	})
	return b, st, alice, id, stages
}

// TestRefusedChangesDuringAReportOutage: while a step report is on its way
// to a task whose writes the store refuses (kept, tried again), an
// operator's change of the task is refused and the operator told so. It
// must not be stored later with the report (grouped with it and kept):
// lockDurable has what is on its way stored first, and the change fails
// before it is made. Otherwise a finish_stage would be stored with stage 2
// running and nobody told to start it, a pause stored (and shown) while
// no agent was held, a share let the other operator in.
func TestRefusedChangesDuringAReportOutage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(b *testbed, id string, stages []string, bob string) error
		check  func(t *testing.T, b *testbed, stored *TaskState, alice string, stages []string, bob string)
	}{{
		name: "finish_stage",
		change: func(b *testbed, id string, stages []string, _ string) error {
			_, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionFinishStage, TaskID: id, StageID: stages[0]})
			return err
		},
		check: func(t *testing.T, b *testbed, stored *TaskState, alice string, stages []string, _ string) {
			if stored.StageList[0].ExecutionState != StateRunning {
				t.Errorf("the store holds stage 1 %s and stage 2 %s", stored.StageList[0].ExecutionState, stored.StageList[1].ExecutionState)
			}
			if stored.StageList[1].ExecutionState == StateRunning && len(b.steps(alice, func(s StepState) bool { return s.StageID == stages[1] })) == 0 {
				t.Errorf("stage 2 is stored running but its agent was never told to start it\n%s", b.dump())
			}
		},
	}, {
		name: "pause_task",
		change: func(b *testbed, id string, _ []string, _ string) error {
			_, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionPauseTask, TaskID: id})
			return err
		},
		check: func(t *testing.T, b *testbed, stored *TaskState, _ string, _ []string, _ string) {
			if stored.Paused {
				_, held := b.sys.paused.Load(stored.TaskID)
				t.Errorf("the store (and clients) hold the task paused; agents held: %v", held)
			}
		},
	}, {
		name: "share_task",
		change: func(b *testbed, id string, _ []string, bob string) error {
			_, err := b.sys.ShareTask(b.op(), id, bob)
			if err != nil && b.sys.MayOperate(bob, id) == nil {
				b.t.Errorf("the share failed, but bob may operate the task")
			}
			return err
		},
		check: func(t *testing.T, _ *testbed, stored *TaskState, _ string, _ []string, bob string) {
			if slices.Contains(stored.SharedWith, bob) {
				t.Errorf("the store holds the task shared with bob")
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			b, st, alice, id, stages := reportOutage(t)
			bob, err := b.sys.AddOperator("bob")
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.change(b, id, stages, bob); err == nil {
				t.Fatalf("%s was not refused: the scenario did not arise", tc.name)
			}
			st.refuseWhen(nil)
			b.waitFor("the reports to be stored", func() bool { return b.sys.ReportsOnTheirWay() == 0 && len(b.task(id).SharedInfoPool) > 0 })
			b.settle()
			stored, _ := st.Task(id)
			tc.check(t, b, &stored, alice, stages, bob)
		})
	}
}
