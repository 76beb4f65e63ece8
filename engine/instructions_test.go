package engine

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// instrWorld is a settled MAS with a task "t" (w1, w2 in its group; stage s1
// allocated to w1 and running, s2 allocated to w2 and not started), an
// ended task, an agent outside every task and a second manager-like agent.
type instrWorld struct {
	b                   *testbed
	w1, w2, outsider    string
	peerMgr             string
	task, s1, s2, ended string
	base, baseStage     string
	mgr, op             string
	endedStage          string
}

func newInstrWorld(t *testing.T) *instrWorld {
	b := newTestbed(t, nil)
	w := &instrWorld{b: b, w1: b.newAgent("w1"), w2: b.newAgent("w2"), outsider: b.newAgent("outsider"),
		base: b.sys.BaseTaskID(), baseStage: b.sys.BaseStageID(), mgr: b.mgr(), op: b.op()}
	id, err := b.sys.CreateAgent(AgentConfig{Template: "manager", Name: "peer manager"})
	if err != nil {
		t.Fatal(err)
	}
	w.peerMgr = id
	w.task = b.newTask("t", w.w1, w.w2)
	ids := b.addStages(w.task,
		StageSpec{StageIntention: "one", AgentAllocation: map[string]string{w.w1: "goal one"}},
		StageSpec{StageIntention: "two", AgentAllocation: map[string]string{w.w2: "goal two"}})
	w.s1, w.s2 = ids[0], ids[1]
	w.ended = b.newTask("ended", w.w1)
	w.endedStage = b.addStages(w.ended, StageSpec{StageIntention: "e", AgentAllocation: map[string]string{w.w1: "e"}})[0]
	if _, err := b.sys.TaskInstruction(w.op, TaskInstruction{Action: ActionCancelTask, TaskID: w.ended}); err != nil {
		t.Fatal(err)
	}
	b.settle()
	return w
}

func TestTaskInstructionErrors(t *testing.T) {
	w := newInstrWorld(t)
	alloc := func(id string) map[string]string { return map[string]string{id: "a goal"} }
	stages := func(intention string, a map[string]string) []StageSpec {
		return []StageSpec{{StageIntention: intention, AgentAllocation: a}}
	}
	tests := []struct {
		name  string
		actor string
		ti    TaskInstruction
		kind  error
		field string
	}{
		{"unknown actor", "a-404", TaskInstruction{Action: ActionFinishTask, TaskID: w.task}, ErrNotFound, `agent_id "a-404"`},
		{"actor lacks task_manager", w.w1, TaskInstruction{Action: ActionFinishTask, TaskID: w.task}, ErrForbidden, "task_manager skill"},
		{"empty action", w.mgr, TaskInstruction{TaskID: w.task}, ErrInvalid, "action: is empty"},
		{"unknown action", w.mgr, TaskInstruction{Action: "explode", TaskID: w.task}, ErrInvalid, `action "explode"`},
		{"missing task_id", w.mgr, TaskInstruction{Action: ActionAddStage}, ErrInvalid, "task_id: is empty"},
		{"unknown task_id", w.mgr, TaskInstruction{Action: ActionAddStage, TaskID: "t-404"}, ErrNotFound, `task_id "t-404"`},

		{"add_task without name", w.op, TaskInstruction{Action: ActionAddTask, TaskIntention: "i"}, ErrInvalid, "task_name"},
		{"add_task without intention", w.op, TaskInstruction{Action: ActionAddTask, TaskName: "n"}, ErrInvalid, "task_intention"},
		{"add_task unknown manager", w.op, TaskInstruction{Action: ActionAddTask, TaskName: "n", TaskIntention: "i", Manager: "a-404"}, ErrNotFound, `task_manager "a-404"`},
		{"add_task manager without the skill", w.op, TaskInstruction{Action: ActionAddTask, TaskName: "n", TaskIntention: "i", Manager: w.w1}, ErrInvalid, "task_manager"},
		{"add_task manager is a HumanAgent", w.mgr, TaskInstruction{Action: ActionAddTask, TaskName: "n", TaskIntention: "i", Manager: w.op}, ErrInvalid, "task_manager"},

		{"add_stage without stages", w.mgr, TaskInstruction{Action: ActionAddStage, TaskID: w.task}, ErrInvalid, "stages: is empty"},
		{"add_stage without intention", w.mgr, TaskInstruction{Action: ActionAddStage, TaskID: w.task, Stages: stages(" ", alloc(w.w1))}, ErrInvalid, "stages[0].stage_intention"},
		{"add_stage without allocation", w.mgr, TaskInstruction{Action: ActionAddStage, TaskID: w.task, Stages: stages("x", nil)}, ErrInvalid, "stages[0].agent_allocation"},
		{"add_stage to an agent outside the group", w.mgr, TaskInstruction{Action: ActionAddStage, TaskID: w.task, Stages: stages("x", alloc(w.outsider))}, ErrInvalid, "not in the task group"},
		{"add_stage to an unknown agent", w.mgr, TaskInstruction{Action: ActionAddStage, TaskID: w.task, Stages: stages("x", alloc("a-404"))}, ErrNotFound, `stages[0].agent_allocation: agent "a-404"`},
		{"add_stage to a HumanAgent", w.mgr, TaskInstruction{Action: ActionAddStage, TaskID: w.task, Stages: stages("x", alloc(w.op))}, ErrInvalid, "is a HumanAgent"},
		{"add_stage with an empty goal", w.mgr, TaskInstruction{Action: ActionAddStage, TaskID: w.task, Stages: stages("x", map[string]string{w.w1: " "})}, ErrInvalid, "goal is empty"},
		{"add_stage second spec checked too", w.mgr, TaskInstruction{Action: ActionAddStage, TaskID: w.task, Stages: append(stages("x", alloc(w.w1)), StageSpec{StageIntention: "y"})}, ErrInvalid, "stages[1].agent_allocation"},
		{"add_stage by another manager", w.peerMgr, TaskInstruction{Action: ActionAddStage, TaskID: w.task, Stages: stages("x", alloc(w.w1))}, ErrForbidden, "only its manager"},
		{"add_stage to an ended task", w.op, TaskInstruction{Action: ActionAddStage, TaskID: w.ended, Stages: stages("x", alloc(w.w1))}, ErrEnded, "task_id"},
		{"add_stage to the base task", w.op, TaskInstruction{Action: ActionAddStage, TaskID: w.base, Stages: stages("x", alloc(w.mgr))}, ErrEnded, "base task"},

		{"finish_stage without stage_id", w.mgr, TaskInstruction{Action: ActionFinishStage, TaskID: w.task}, ErrInvalid, "stage_id: is empty"},
		{"finish_stage unknown stage", w.mgr, TaskInstruction{Action: ActionFinishStage, TaskID: w.task, StageID: "s-404"}, ErrNotFound, `stage_id "s-404"`},
		{"finish_stage of another task", w.mgr, TaskInstruction{Action: ActionFinishStage, TaskID: w.task, StageID: w.endedStage}, ErrNotFound, "stage_id"},
		{"finish_stage not running", w.mgr, TaskInstruction{Action: ActionFinishStage, TaskID: w.task, StageID: w.s2}, ErrInvalid, "is init, not running"},
		{"finish_stage of an ended task", w.op, TaskInstruction{Action: ActionFinishStage, TaskID: w.ended, StageID: w.endedStage}, ErrInvalid, "not running"},
		{"finish_stage of the base task", w.op, TaskInstruction{Action: ActionFinishStage, TaskID: w.base, StageID: w.baseStage}, ErrInvalid, "never finishes"},
		{"finish_stage by another manager", w.peerMgr, TaskInstruction{Action: ActionFinishStage, TaskID: w.task, StageID: w.s1}, ErrForbidden, "only its manager"},

		{"retry_stage without intention", w.mgr, TaskInstruction{Action: ActionRetryStage, TaskID: w.task, OldStageID: w.s1, NewAgentAllocation: alloc(w.w1)}, ErrInvalid, "new_stage_intention"},
		{"retry_stage without allocation", w.mgr, TaskInstruction{Action: ActionRetryStage, TaskID: w.task, OldStageID: w.s1, NewStageIntention: "again"}, ErrInvalid, "new_agent_allocation"},
		{"retry_stage to a HumanAgent", w.mgr, TaskInstruction{Action: ActionRetryStage, TaskID: w.task, OldStageID: w.s1, NewStageIntention: "again", NewAgentAllocation: alloc(w.op)}, ErrInvalid, "new_agent_allocation"},
		{"retry_stage without old stage", w.mgr, TaskInstruction{Action: ActionRetryStage, TaskID: w.task, NewStageIntention: "again", NewAgentAllocation: alloc(w.w1)}, ErrInvalid, "old_stage_id: is empty"},
		{"retry_stage unknown old stage", w.mgr, TaskInstruction{Action: ActionRetryStage, TaskID: w.task, OldStageID: "s-404", NewStageIntention: "again", NewAgentAllocation: alloc(w.w1)}, ErrNotFound, `old_stage_id "s-404"`},
		{"retry_stage of a stage that never ran", w.mgr, TaskInstruction{Action: ActionRetryStage, TaskID: w.task, OldStageID: w.s2, NewStageIntention: "again", NewAgentAllocation: alloc(w.w2)}, ErrInvalid, `old_stage_id "` + w.s2 + `"`},
		{"retry_stage of an ended task", w.op, TaskInstruction{Action: ActionRetryStage, TaskID: w.ended, OldStageID: w.endedStage, NewStageIntention: "again", NewAgentAllocation: alloc(w.w1)}, ErrEnded, "has ended"},
		{"retry_stage by another manager", w.peerMgr, TaskInstruction{Action: ActionRetryStage, TaskID: w.task, OldStageID: w.s1, NewStageIntention: "again", NewAgentAllocation: alloc(w.w1)}, ErrForbidden, "only its manager"},

		{"finish_task of the base task", w.op, TaskInstruction{Action: ActionFinishTask, TaskID: w.base, Summary: "s"}, ErrInvalid, "base task never ends"},
		{"finish_task without summary", w.mgr, TaskInstruction{Action: ActionFinishTask, TaskID: w.task}, ErrInvalid, "summary"},
		{"finish_task of an ended task", w.op, TaskInstruction{Action: ActionFinishTask, TaskID: w.ended, Summary: "s"}, ErrEnded, "already ended"},
		{"finish_task by another manager", w.peerMgr, TaskInstruction{Action: ActionFinishTask, TaskID: w.task, Summary: "s"}, ErrForbidden, "only its manager"},
		{"finish_task with an unknown execution_state", w.mgr, TaskInstruction{Action: ActionFinishTask, TaskID: w.task, Summary: "s", ExecutionState: "abandoned"}, ErrInvalid, `execution_state "abandoned"`},
		{"cancel_task of the base task", w.op, TaskInstruction{Action: ActionCancelTask, TaskID: w.base}, ErrInvalid, "base task never ends"},
		{"cancel_task of an ended task", w.op, TaskInstruction{Action: ActionCancelTask, TaskID: w.ended}, ErrEnded, "already ended"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seq := w.b.sys.EventSeq()
			res, err := w.b.sys.TaskInstruction(tt.actor, tt.ti)
			if res != (TaskInstructionResult{}) {
				t.Errorf("result %+v alongside the error", res)
			}
			isErr(t, err, tt.kind, tt.field)
			if got := w.b.sys.EventSeq(); got != seq {
				t.Errorf("a refused instruction changed the state (%d events)", got-seq)
			}
		})
	}
}

// planningTexts returns the text of every planning step an agent ran.
func planningTexts(b *testbed, name string) []string {
	var out []string
	for _, c := range b.sc.callsOf(name, SkillPlanning) {
		out = append(out, c.Text)
	}
	return out
}

// notices returns the texts of the process_message steps an agent has.
func notices(b *testbed, agentID, taskID string) []string {
	var out []string
	for _, s := range b.agent(agentID).AgentStep.StepList {
		if s.Executor == SkillProcessMessage && s.TaskID == taskID {
			out = append(out, s.TextContent)
		}
	}
	return out
}

func anyContains(list []string, sub string) bool {
	for _, s := range list {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func TestStageLifecycle(t *testing.T) {
	b := newTestbed(t, nil)
	mgr := b.mgr()
	w1, w2 := b.newAgent("w1"), b.newAgent("w2")
	task := b.newTask("lifecycle", w1, w2)

	res, err := b.sys.TaskInstruction(mgr, TaskInstruction{Action: ActionAddStage, TaskID: task, Stages: []StageSpec{
		{StageIntention: "collect the facts", AgentAllocation: map[string]string{w1: "find three sources"}},
		{StageIntention: "write the text", AgentAllocation: map[string]string{w2: "write one page"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res.AddStage == nil || len(res.AddStage.StageIDs) != 2 || res.AddStage.TaskID != task {
		t.Fatalf("result %+v, want the task and two stage IDs", res.AddStage)
	}
	ids := res.AddStage.StageIDs
	s1, s2 := ids[0], ids[1]
	ts := b.task(task)
	if ts.ExecutionState != StateRunning || ts.StageList[0].ExecutionState != StateRunning || ts.StageList[0].StartedAt.IsZero() || ts.StageList[1].ExecutionState != StateInit {
		t.Errorf("after add_stage: task %s, stages %s/%s; want running, running, init", ts.ExecutionState, ts.StageList[0].ExecutionState, ts.StageList[1].ExecutionState)
	}
	b.waitFor("stage 1 to complete", func() bool { return anyContains(notices(b, mgr, task), "have submitted their completion summaries") })
	b.settle()
	texts := planningTexts(b, "w1")
	if len(texts) != 1 || !strings.Contains(texts[0], "collect the facts") || !strings.Contains(texts[0], "Your own goal in this stage:\nfind three sources") {
		t.Errorf("w1's planning texts %q, want one with the stage intention and its goal", texts)
	}
	if got := planningTexts(b, "w2"); len(got) != 0 {
		t.Errorf("w2 planned before its stage started: %q", got)
	}
	if st := b.stage(task, s1); st.EveryAgentState[w1] != AgentFinished || st.CompletionSummary[w1] != "done by w1" {
		t.Errorf("stage 1: %v %v, want w1 finished with its summary", st.EveryAgentState, st.CompletionSummary)
	}

	res, err = b.sys.TaskInstruction(mgr, TaskInstruction{Action: ActionFinishStage, TaskID: task, StageID: s1})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(TaskInstructionResult{FinishStage: &FinishStageResult{FinishedStage: s1, NextStage: &s2, TaskID: task}}, res); diff != "" {
		t.Errorf("finish_stage result mismatch (-want +got):\n%s", diff)
	}
	b.waitFor("stage 2 to complete", func() bool { return b.stage(task, s2).EveryAgentState[w2] == AgentFinished })
	b.settle()
	if st := b.stage(task, s1); st.ExecutionState != StateFinished || st.EndedAt.IsZero() {
		t.Errorf("stage 1 is %s, want finished", st.ExecutionState)
	}
	if texts := planningTexts(b, "w2"); len(texts) != 1 || !strings.Contains(texts[0], "write one page") {
		t.Errorf("w2's planning texts %q, want one with its goal", texts)
	}
	if wm := b.agent(w1).WorkingMemory[task]; wm == nil || wm[s1] != nil {
		t.Errorf("w1's working memory of the task %v, want the task without stage 1", wm)
	}

	res, err = b.sys.TaskInstruction(mgr, TaskInstruction{Action: ActionFinishStage, TaskID: task, StageID: s2})
	if err != nil {
		t.Fatal(err)
	}
	if res.FinishStage == nil || res.FinishStage.NextStage != nil {
		t.Errorf("result %+v after the last stage, want next_stage nil", res.FinishStage)
	}
	b.waitFor("the manager to be asked to judge the task", func() bool { return anyContains(notices(b, mgr, task), "no stage is left to run") })
	b.settle()
	if ts := b.task(task); ts.ExecutionState != StateRunning {
		t.Errorf("task is %s after its last stage, want still running until the manager judges it", ts.ExecutionState)
	}
}

func TestRetryStage(t *testing.T) {
	b := newTestbed(t, nil)
	mgr := b.mgr()
	w1, w3 := b.newAgent("w1"), b.newAgent("w3")
	task := b.newTask("retry", w1)
	ids := b.addStages(task,
		StageSpec{StageIntention: "first try", AgentAllocation: map[string]string{w1: "try"}},
		StageSpec{StageIntention: "afterwards", AgentAllocation: map[string]string{w1: "later"}})
	b.waitFor("stage 1 to complete", func() bool { return b.stage(task, ids[0]).EveryAgentState[w1] == AgentFinished })
	b.settle()

	res, err := b.sys.TaskInstruction(mgr, TaskInstruction{Action: ActionRetryStage, TaskID: task, OldStageID: ids[0],
		NewStageIntention: "second try", NewAgentAllocation: map[string]string{w1: "try harder", w3: "help w1"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.RetryStage == nil || res.RetryStage.FailedStage != ids[0] || res.RetryStage.NewStage == "" {
		t.Fatalf("result %+v", res.RetryStage)
	}
	retry := res.RetryStage.NewStage
	b.waitFor("the retry to complete", func() bool {
		st := b.stage(task, retry)
		return st.EveryAgentState[w1] == AgentFinished && st.EveryAgentState[w3] == AgentFinished
	})
	b.settle()

	ts := b.task(task)
	type row struct{ ID, State, RetryOf string }
	var got []row
	for _, st := range ts.StageList {
		got = append(got, row{st.StageID, st.ExecutionState, st.RetryOf})
	}
	want := []row{{ids[0], StateFailed, ""}, {retry, StateRunning, ids[0]}, {ids[1], StateInit, ""}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stages mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{mgr, b.op(), w1, w3}, ts.TaskGroup); diff != "" {
		t.Errorf("task_group mismatch (-want +got):\n%s", diff)
	}
	if _, ok := b.agent(w3).WorkingMemory[task]; !ok {
		t.Errorf("w3's working memory lacks the task")
	}
	for name, goal := range map[string]string{"w1": "try harder", "w3": "help w1"} {
		if texts := planningTexts(b, name); !anyContains(texts, "second try") || !anyContains(texts, goal) {
			t.Errorf("%s's planning texts %q lack the retry and its goal %q", name, texts, goal)
		}
	}
	if left := b.steps(w1, func(s StepState) bool { return s.StageID == ids[0] }); len(left) != 0 {
		t.Errorf("w1 still has %d steps of the failed stage", len(left))
	}
}

func TestEndTask(t *testing.T) {
	tests := []struct {
		name, action, state, summary, wantState, wantStage string
	}{
		{"finish_task", ActionFinishTask, "", " all done ", StateFinished, StateFinished},
		// The manager may end a task as failed, with a summary (spec §3.9).
		{"finish_task failed", ActionFinishTask, StateFailed, "cannot be done: no source answers", StateFailed, StateFailed},
		// Without a summary it says who cancelled (cancel_reason_test.go).
		{"cancel_task", ActionCancelTask, "", "not needed", StateFailed, StateFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newTestbed(t, nil)
			mgr, op := b.mgr(), b.op()
			w1, w2 := b.newAgent("w1"), b.newAgent("w2")
			task := b.newTask("end me", w1, w2)
			stage := b.addStages(task, StageSpec{StageIntention: "work", AgentAllocation: map[string]string{w1: "a", w2: "b"}})[0]
			b.waitFor("the stage to complete", func() bool { return anyContains(notices(b, mgr, task), "completion summaries") })
			b.settle()
			// Steps of the base task are kept.
			keep := b.inject(w1, b.sys.BaseTaskID(), b.sys.BaseStageID(), false, spec(SkillThink, "base work"))[0]
			b.waitFor("the base step", func() bool { return b.stepDone(w1, keep) })

			res, err := b.sys.TaskInstruction(mgr, TaskInstruction{Action: tt.action, TaskID: task, Summary: tt.summary, ExecutionState: tt.state})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(TaskInstructionResult{EndTask: &EndTaskResult{ExecutionState: tt.wantState, TaskID: task}}, res); diff != "" {
				t.Errorf("result mismatch (-want +got):\n%s", diff)
			}
			b.settle()
			ts := b.task(task)
			if ts.ExecutionState != tt.wantState || ts.EndedAt.IsZero() || ts.TaskSummary != strings.TrimSpace(tt.summary) {
				t.Errorf("task %s ended %v summary %q, want %s with %q", ts.ExecutionState, ts.EndedAt, ts.TaskSummary, tt.wantState, tt.summary)
			}
			if st := b.stage(task, stage); st.ExecutionState != tt.wantStage {
				t.Errorf("running stage ended %s, want %s", st.ExecutionState, tt.wantStage)
			}
			for _, id := range []string{mgr, op, w1, w2} {
				a := b.agent(id)
				if left := b.steps(id, func(s StepState) bool { return s.TaskID == task }); len(left) != 0 {
					t.Errorf("%s still has %d steps of the task", a.Name, len(left))
				}
				if _, ok := a.WorkingMemory[task]; ok {
					t.Errorf("%s's working memory still has the task", a.Name)
				}
			}
			if _, ok := b.step(w1, keep); !ok {
				t.Errorf("w1's base-task step was removed")
			}
		})
	}
}

func TestAddTask(t *testing.T) {
	b := newTestbed(t, nil)
	mgr, op := b.mgr(), b.op()
	peer, err := b.sys.CreateAgent(AgentConfig{Template: "manager", Name: "peer"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		actor       string
		manager     string
		wantManager string
		wantStart   bool // the manager gets a start_task planning step
	}{
		{"by the operator", op, "", mgr, true},
		{"by the operator for another manager", op, peer, peer, true},
		{"by the manager itself", mgr, "", mgr, false},
		{"by a manager for another", mgr, peer, peer, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := b.sys.TaskInstruction(tt.actor, TaskInstruction{Action: ActionAddTask, TaskName: tt.name, TaskIntention: "do " + tt.name, Manager: tt.manager})
			if err != nil {
				t.Fatal(err)
			}
			id := res.AddTask.TaskID
			if res.AddTask.TaskManager != tt.wantManager {
				t.Errorf("task_manager = %v, want %s", res.AddTask.TaskManager, tt.wantManager)
			}
			ts := b.task(id)
			if diff := cmp.Diff([]string{tt.wantManager, op}, ts.TaskGroup); diff != "" {
				t.Errorf("task_group mismatch (-want +got):\n%s", diff)
			}
			if ts.ExecutionState != StateInit || ts.Operator != op || ts.Base {
				t.Errorf("task %+v, want init, operator %s", ts, op)
			}
			for _, m := range ts.TaskGroup {
				if _, ok := b.agent(m).WorkingMemory[id]; !ok {
					t.Errorf("member %s's working memory lacks the task", m)
				}
			}
			b.settle()
			plans := b.steps(tt.wantManager, func(s StepState) bool { return s.TaskID == id && s.Executor == SkillPlanning })
			if got := len(plans) == 1; got != tt.wantStart {
				t.Fatalf("manager's start_task planning steps = %d, want %v", len(plans), tt.wantStart)
			}
			if tt.wantStart && (plans[0].StageID != NoRelative || !strings.Contains(plans[0].TextContent, "do "+tt.name)) {
				t.Errorf("start_task step %+v, want one outside stages with the intention", plans[0])
			}
		})
	}
}

func TestRetryOfAnEarlierEndedStage(t *testing.T) {
	b := newTestbed(t, nil)
	mgr := b.mgr()
	w := b.newAgent("w")
	task := b.newTask("retry late", w)
	ids := b.addStages(task,
		StageSpec{StageIntention: "first", AgentAllocation: map[string]string{w: "one"}},
		StageSpec{StageIntention: "second", AgentAllocation: map[string]string{w: "two"}})
	for _, id := range ids {
		b.waitFor("the stage to complete", func() bool { return b.stage(task, id).EveryAgentState[w] == AgentFinished })
		if _, err := b.sys.TaskInstruction(mgr, TaskInstruction{Action: ActionFinishStage, TaskID: task, StageID: id}); err != nil {
			t.Fatal(err)
		}
	}
	b.settle()
	// Only the running stage or the last ended one may be retried (as
	// retry_stage's own error says); stage 1 is neither.
	_, err := b.sys.TaskInstruction(mgr, TaskInstruction{Action: ActionRetryStage, TaskID: task, OldStageID: ids[0],
		NewStageIntention: "first again", NewAgentAllocation: map[string]string{w: "one again"}})
	if err == nil {
		st := b.task(task).StageList
		t.Errorf("retry_stage accepts a stage that is neither running nor the last ended one (its error text says only those may be retried): stage %s (finished) became %s and its retry runs after stage %s, which already ran",
			ids[0], st[0].ExecutionState, ids[1])
	}
	isErr(t, err, ErrInvalid, "old_stage_id")
}
