package engine

import (
	"context"
	"strings"
	"testing"
)

// A task ends with a reason. cancel_task's summary is optional, and so is
// finish_task's with execution_state "failed": without one, the ended
// task's summary says how it ended and who ended it (an operator or its
// manager agent, by name and ID); a summary given is kept as it is.
// finish_task "finished" without a summary is refused, naming the field: a
// finished task's summary is its result, which nobody else can give.
func TestEndWithoutSummaryGivesAReason(t *testing.T) {
	cancel := TaskInstruction{Action: ActionCancelTask}
	fail := TaskInstruction{Action: ActionFinishTask, ExecutionState: StateFailed}
	for _, tc := range []struct {
		name      string
		ti        TaskInstruction
		summary   string
		byManager bool
		want      func(b *testbed) []string // what the summary holds
	}{
		{name: "cancel by an operator without a summary", ti: cancel, want: func(b *testbed) []string {
			op, _ := b.sys.AgentBrief(b.op())
			return []string{"Cancelled", "operator", op.Name, op.AgentID}
		}},
		{name: "cancel by its manager without a summary", ti: cancel, byManager: true, want: func(b *testbed) []string {
			m, _ := b.sys.AgentBrief(b.mgr())
			return []string{"Cancelled", "agent", m.Name, m.AgentID}
		}},
		{name: "cancel with an operator's summary", ti: cancel, summary: "not needed any more", want: func(*testbed) []string {
			return []string{"not needed any more"}
		}},
		{name: "failed by an operator without a summary", ti: fail, summary: " ", want: func(b *testbed) []string {
			op, _ := b.sys.AgentBrief(b.op())
			return []string{"Failed", "operator", op.Name, op.AgentID}
		}},
		{name: "failed by its manager without a summary", ti: fail, byManager: true, want: func(b *testbed) []string {
			m, _ := b.sys.AgentBrief(b.mgr())
			return []string{"Failed", "manager", m.Name, m.AgentID}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newTestbed(t, nil)
			task := b.newTask("to end")
			ti := tc.ti
			ti.TaskID, ti.Summary = task, tc.summary
			if tc.byManager {
				b.sc.onText("end it", func(context.Context, *ExecInput) *Output { return &Output{TaskInstruction: &ti} })
				b.inject(b.mgr(), task, NoRelative, false, spec(SkillTaskManager, "end it"))
				b.waitFor("the task's end", func() bool { return b.ended(task) })
			} else if _, err := b.sys.TaskInstruction(b.op(), ti); err != nil {
				t.Fatal(err)
			}
			st := b.task(task)
			if st.ExecutionState != StateFailed {
				t.Fatalf("ended task: execution_state %q, want %q", st.ExecutionState, StateFailed)
			}
			for _, w := range tc.want(b) {
				if !strings.Contains(st.TaskSummary, w) {
					t.Errorf("ended task's summary %q lacks %q", st.TaskSummary, w)
				}
			}
		})
	}
	t.Run("finished without a summary", func(t *testing.T) {
		b := newTestbed(t, nil)
		task := b.newTask("to finish")
		_, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionFinishTask, TaskID: task, ExecutionState: StateFinished})
		isErr(t, err, ErrInvalid, "summary: is empty")
		if b.ended(task) {
			t.Errorf("finish_task without a summary ended the task: %q", b.task(task).TaskSummary)
		}
	})
}
