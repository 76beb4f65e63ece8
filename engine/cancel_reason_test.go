package engine

import (
	"context"
	"strings"
	"testing"
)

// A task ends with a reason. cancel_task's summary is optional: without
// one, the cancelled task's summary says who cancelled it (an operator or
// its manager agent, by name and ID); a summary given is kept as it is.
func TestCancelWithoutSummaryGivesAReason(t *testing.T) {
	for _, tc := range []struct {
		name, summary string
		byManager     bool
		want          func(b *testbed) []string // what the summary holds
	}{
		{name: "an operator without a summary", want: func(b *testbed) []string {
			op, _ := b.sys.AgentBrief(b.op())
			return []string{"operator", op.Name, op.AgentID}
		}},
		{name: "its manager without a summary", byManager: true, want: func(b *testbed) []string {
			m, _ := b.sys.AgentBrief(b.mgr())
			return []string{"agent", m.Name, m.AgentID}
		}},
		{name: "an operator's summary", summary: "not needed any more", want: func(*testbed) []string {
			return []string{"not needed any more"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newTestbed(t, nil)
			task := b.newTask("to cancel")
			ti := TaskInstruction{Action: ActionCancelTask, TaskID: task, Summary: tc.summary}
			if tc.byManager {
				b.sc.onText("cancel it", func(context.Context, *ExecInput) *Output { return &Output{TaskInstruction: &ti} })
				b.inject(b.mgr(), task, NoRelative, false, spec(SkillTaskManager, "cancel it"))
				b.waitFor("the cancel", func() bool { return b.ended(task) })
			} else if _, err := b.sys.TaskInstruction(b.op(), ti); err != nil {
				t.Fatal(err)
			}
			st := b.task(task)
			if st.ExecutionState != StateFailed {
				t.Fatalf("cancelled task: execution_state %q, want %q", st.ExecutionState, StateFailed)
			}
			for _, w := range tc.want(b) {
				if !strings.Contains(st.TaskSummary, w) {
					t.Errorf("cancelled task's summary %q lacks %q", st.TaskSummary, w)
				}
			}
		})
	}
}
