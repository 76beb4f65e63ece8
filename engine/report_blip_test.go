package engine

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
)

// TestOwnTaskChangeAfterARefusedReport: the store refuses, once, the task's
// write of its manager's step report (a blip: the next write is taken).
// The manager's next step, an add_stage, must not fail because of it.
func TestOwnTaskChangeAfterARefusedReport(t *testing.T) {
	st := &refuseTaskStore{MemoryStore: NewMemoryStore()}
	b := newTestbed(t, func(c *Config) { c.Store = st })
	var planned, refused atomic.Int32
	var stageStep atomic.Value
	b.sc.onAgent("manager", SkillPlanning, func(_ context.Context, in *ExecInput) *Output {
		id := in.Step.TaskID
		if id == b.sys.BaseTaskID() || !planned.CompareAndSwap(0, 1) {
			return &Output{}
		}
		mgr := b.mgr()
		st.refuseWhen(func(ts *TaskState) bool {
			return ts.TaskID == id && slices.ContainsFunc(ts.SharedInfoPool, func(si SharedInfo) bool { return si.AgentID == mgr }) &&
				refused.CompareAndSwap(0, 1)
		})
		return &Output{AddSteps: []StepSpec{spec(SkillTaskManager, "stage it")}}
	})
	b.sc.onAgent("manager", SkillTaskManager, func(_ context.Context, in *ExecInput) *Output {
		stageStep.Store(in.Step.StepID)
		return &Output{TaskInstruction: &TaskInstruction{Action: ActionAddStage, TaskID: in.Step.TaskID,
			Stages: []StageSpec{{StageIntention: "work", AgentAllocation: map[string]string{b.mgr(): "the goal"}}}}}
	})
	b.newTask("blip")
	var step StepState
	b.waitFor("the add_stage step to end", func() bool {
		id, _ := stageStep.Load().(string)
		steps := b.steps(b.mgr(), func(s StepState) bool { return s.StepID == id })
		if len(steps) == 0 {
			return false
		}
		step = steps[0]
		return step.ExecutionState == StateFinished || step.ExecutionState == StateFailed
	})
	if refused.Load() == 0 {
		t.Fatal("no report write was refused: the scenario did not arise")
	}
	if step.ExecutionState != StateFinished {
		t.Errorf("add_stage %s after a refused report write: %v\n%s", step.ExecutionState, step.ExecuteResult["error"], b.dump())
	}
}
