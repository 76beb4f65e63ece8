package engine

import (
	"context"
	"strings"
	"testing"
)

// The trail keeps every step's end (README, The audit trail; TrailKindStep:
// "kept after the step list drops it at the end of its stage"), also of
// the steps that end with their stage or task: a step running when its
// task is cancelled or its stage finished (dropped with the task's or
// stage's steps before its output applies: failed, saying why), and the
// manager's own step that finishes the task (finish_task drops the
// manager's steps of the task, that one included, while its output is
// being applied: finished, with its outcome).
func TestStepsEndedWithTheirTaskEndInTheTrail(t *testing.T) {
	stepEnd := func(trail *MemoryTrail, id string) (end *StepState, kinds []string) {
		for _, e := range trail.All() {
			if e.StepID != id {
				continue
			}
			kinds = append(kinds, e.Kind)
			if e.Kind == TrailKindStep {
				if end != nil {
					t.Errorf("step %s has a second %q entry in the trail: %+v", id, TrailKindStep, e.Step)
				}
				end = e.Step
			}
		}
		return end, kinds
	}
	for _, tc := range []struct {
		name, why string
		end       func(b *testbed, task, stage string) TaskInstruction
	}{
		{"cancel_task", "its task ended", func(_ *testbed, task, _ string) TaskInstruction {
			return TaskInstruction{Action: ActionCancelTask, TaskID: task, Summary: "stop it"}
		}},
		{"finish_stage", "its stage ended", func(_ *testbed, task, stage string) TaskInstruction {
			return TaskInstruction{Action: ActionFinishStage, TaskID: task, StageID: stage}
		}},
	} {
		t.Run("a worker's step cut off by "+tc.name, func(t *testing.T) {
			trail := NewMemoryTrail()
			b := newTestbed(t, func(c *Config) { c.Trail = trail })
			alice := b.newAgent("alice")
			task := b.newTask("cut off mid-step", alice)
			started := make(chan struct{})
			b.sc.onAgent("alice", SkillPlanning, func(ctx context.Context, _ *ExecInput) *Output {
				close(started)
				<-ctx.Done()
				return &Output{Err: ctx.Err(), Usage: Usage{Calls: 1, TotalTokens: 7}}
			})
			stage := b.addStages(task, StageSpec{StageIntention: "work", AgentAllocation: map[string]string{alice: "work"}})[0]
			waitChan(t, started, "alice's step")
			running := b.steps(alice, func(s StepState) bool { return s.ExecutionState == StateRunning })
			if len(running) != 1 {
				t.Fatalf("alice's running steps: %+v, want her planning step", running)
			}
			id := running[0].StepID
			if _, err := b.sys.TaskInstruction(b.op(), tc.end(b, task, stage)); err != nil {
				t.Fatal(err)
			}
			b.settle()
			end, kinds := stepEnd(trail, id)
			if end == nil {
				t.Fatalf("step %s, running when %s ended it, has no %q entry in the trail (its entries: %v)", id, tc.name, TrailKindStep, kinds)
			}
			why, _ := end.ExecuteResult["error"].(string)
			switch {
			case end.ExecutionState != StateFailed || !strings.Contains(why, tc.why):
				t.Errorf("step %s's end in the trail: %s, result %v; want failed: %s", id, end.ExecutionState, end.ExecuteResult, tc.why)
			case end.Usage.TotalTokens != 7 || end.FinishedAt.IsZero():
				t.Errorf("step %s's end in the trail: usage %+v, finished at %v; want the step's 7 tokens and the time", id, end.Usage, end.FinishedAt)
			}
		})
	}
	t.Run("the manager's step that finishes the task", func(t *testing.T) {
		trail := NewMemoryTrail()
		b := newTestbed(t, func(c *Config) { c.Trail = trail })
		task := b.newTask("finished by its manager")
		b.sc.onText("finish it", func(_ context.Context, in *ExecInput) *Output {
			return &Output{TaskInstruction: &TaskInstruction{Action: ActionFinishTask, TaskID: in.Step.TaskID, Summary: "all done"}}
		})
		id := b.inject(b.mgr(), task, NoRelative, false, spec(SkillTaskManager, "finish it"))[0]
		b.waitFor("the task's end", func() bool { return b.ended(task) })
		b.settle()
		end, kinds := stepEnd(trail, id)
		switch {
		case end == nil:
			t.Fatalf("the manager's task_manager step %s that finished task %s has no %q entry in the trail (its entries: %v)", id, task, TrailKindStep, kinds)
		case end.ExecutionState != StateFinished || end.ExecuteResult["instruction_result"] == nil:
			t.Errorf("the manager's step's end in the trail: %s, result %v; want finished, with its instruction's result", end.ExecutionState, end.ExecuteResult)
		}
	})
}
