package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// askWorld is a MAS of two operators, ann and bea, and an LLM agent w that
// works in tasks of each. In ann's task w has memorised secretNote and
// failed a step with secretFailure (its shared info and w's step list hold
// it); the task has a stage whose intention is secretStage. Ann has two
// other tasks, one of them shared with bea.
type askWorld struct {
	b                 *testbed
	ann, bea, w       string
	annTask, annStage string
	annOther, beaTask string
	annShared         string
	asks              int
}

const (
	secretNote    = "NOTE-learnt-in-ann's-task"
	secretFailure = "FAILURE-in-ann's-task"
	secretStage   = "STAGE-of-ann's-task"
)

func newAskWorld(t *testing.T) *askWorld {
	b := newTestbed(t, nil)
	w := &askWorld{b: b, ann: b.operator("ann"), bea: b.operator("bea"), w: b.newAgent("w")}
	addTask := func(op, name string) string {
		id, err := b.sys.AddTask(op, AddTaskRequest{TaskName: name, TaskIntention: "intention of " + name})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.sys.AgentInstruction(op, AgentInstruction{Action: ActionAddTaskParticipant, TaskID: id, Agents: StringList{w.w}}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	w.annTask, w.annOther, w.beaTask = addTask(w.ann, "ann's"), addTask(w.ann, "ann's other"), addTask(w.bea, "bea's")
	w.annShared = addTask(w.ann, "ann's shared")
	if _, err := b.sys.ShareTask(w.ann, w.annShared, w.bea); err != nil {
		t.Fatal(err)
	}
	res, err := b.sys.TaskInstruction(w.ann, TaskInstruction{Action: ActionAddStage, TaskID: w.annTask,
		Stages: []StageSpec{{StageIntention: secretStage, AgentAllocation: map[string]string{w.w: "goal"}}}})
	if err != nil {
		t.Fatal(err)
	}
	w.annStage = res.AddStage.StageIDs[0]
	b.sc.onText("remember", func(context.Context, *ExecInput) *Output {
		return &Output{Memory: []MemoryOp{{Add: secretNote}}}
	})
	b.sc.onText("fail", func(context.Context, *ExecInput) *Output { return &Output{Err: errors.New(secretFailure)} })
	ids := b.inject(w.w, w.annTask, NoRelative, false, spec(SkillThink, "remember"), spec(SkillThink, "fail"))
	b.waitFor("w's steps in ann's task", func() bool { return b.stepDone(w.w, ids[0]) && b.stepDone(w.w, ids[1]) })
	b.settle()
	ts := b.task(w.annTask)
	if !strings.Contains(jsonOf(t, ts.SharedInfoPool), secretFailure) || !strings.Contains(jsonOf(t, b.agent(w.w).PersistentMemory), secretNote) {
		t.Fatalf("the world is not set up: shared info %+v, memory %v", ts.SharedInfoPool, b.agent(w.w).PersistentMemory)
	}
	return w
}

// ask has w run an ask_info step in taskID and returns the step, and the
// answer as viewer reads it in the task's conversation ("" if there is
// none).
func (w *askWorld) ask(taskID, viewer string, q AskInfoQuery) (StepState, string) {
	w.b.t.Helper()
	w.asks++
	text := fmt.Sprintf("ask %d", w.asks)
	w.b.sc.onText(text, func(context.Context, *ExecInput) *Output { return &Output{AskInfo: &q} })
	id := w.b.inject(w.w, taskID, NoRelative, false, spec(SkillAskInfo, text))[0]
	w.b.waitFor(text, func() bool { return w.b.stepDone(w.w, id) })
	w.b.settle()
	st, _ := w.b.step(w.w, id)
	ts, err := w.b.sys.TaskFor(viewer, taskID)
	if err != nil {
		w.b.t.Fatal(err)
	}
	for _, m := range ts.SharedConversationPool {
		if m.MessageID == derivedID(id, "ask_answer") {
			return st, m.Message
		}
	}
	return st, ""
}

// TestAskInfoStepAnswersTheTaskOwnersView: an agent's ask_info step in
// bea's task answers what bea may see, not what the agent may: its answer
// becomes a message of bea's task, which bea reads. It is not shown what
// the agent learnt or did in ann's task, nor ann's task itself, which is
// refused as bea's own ask_info would refuse it. In the base task, which
// every operator reads, and in a task ann shares with bea, the answer is
// what each operator who reads the task may see.
func TestAskInfoStepAnswersTheTaskOwnersView(t *testing.T) {
	w := newAskWorld(t)
	secrets := []string{secretNote, secretFailure, secretStage}
	leaks := func(what, text string) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s shows %q:\n%s", what, s, text)
			}
		}
	}

	for _, where := range []struct{ name, task, viewer string }{
		{"bea's task", w.beaTask, w.bea},
		{"the base task", w.b.sys.BaseTaskID(), w.bea},
		{"ann's task shared with bea", w.annShared, w.bea},
	} {
		st, answer := w.ask(where.task, where.viewer, AskInfoQuery{Type: QueryAgent, AgentID: StringList{w.w}})
		if st.ExecutionState != StateFinished || !strings.Contains(answer, "Result of ask_info query agent") {
			t.Errorf("ask_info agent in %s: step %s (%v), answer %q; want an answer", where.name, st.ExecutionState, st.ExecuteResult["error"], answer)
		}
		leaks("ask_info agent in "+where.name, answer)
		leaks("w's steps as bea sees them", jsonOf(t, mustAgent(t, w.b.sys, w.bea, w.w)))

		st, answer = w.ask(where.task, where.viewer, AskInfoQuery{Type: QueryManagedTaskAndStageInfo})
		leaks("ask_info managed_task_and_stage_info in "+where.name, answer)
		st, answer = w.ask(where.task, where.viewer, AskInfoQuery{Type: QueryAssignedTaskAndStageInfo})
		if !strings.Contains(answer, "Result of ask_info query") {
			t.Errorf("ask_info assigned_task_and_stage_info in %s: step %s (%v), answer %q; want an answer", where.name, st.ExecutionState, st.ExecuteResult["error"], answer)
		}
		leaks("ask_info assigned_task_and_stage_info in "+where.name, answer)

		for _, q := range []AskInfoQuery{
			{Type: QueryTaskInfo, TaskID: w.annTask},
			{Type: QueryStageInfo, TaskID: w.annTask, StageID: w.annStage},
			{Type: QueryTaskAgents, TaskID: w.annTask},
			{Type: QueryStageAgents, TaskID: w.annTask, StageID: w.annStage},
		} {
			st, answer := w.ask(where.task, where.viewer, q)
			errText, _ := st.ExecuteResult["error"].(string)
			if st.ExecutionState != StateFailed || answer != "" ||
				!strings.Contains(errText, fmt.Sprintf("task_id %q: no such task visible to operator", w.annTask)) {
				t.Errorf("ask_info %s of ann's task in %s: step %s with error %q and answer %q; want it refused", q.Type, where.name, st.ExecutionState, errText, answer)
			}
			leaks(fmt.Sprintf("ask_info %s of ann's task in %s", q.Type, where.name), errText+answer)
		}
	}
	ts, err := w.b.sys.TaskFor(w.bea, w.beaTask)
	if err != nil {
		t.Fatal(err)
	}
	leaks("bea's task", jsonOf(t, ts))
}

// TestAskInfoStepAcrossOneOperatorsTasks: within one operator an agent's
// ask_info reaches the operator's other tasks: in ann's other task it sees
// ann's task, its stage, and what it learnt and did there.
func TestAskInfoStepAcrossOneOperatorsTasks(t *testing.T) {
	w := newAskWorld(t)
	for _, tc := range []struct {
		q    AskInfoQuery
		want []string
	}{
		{AskInfoQuery{Type: QueryAgent, AgentID: StringList{w.w}}, []string{secretNote, secretFailure}},
		{AskInfoQuery{Type: QueryTaskInfo, TaskID: w.annTask}, []string{secretStage, secretFailure}},
		{AskInfoQuery{Type: QueryStageInfo, TaskID: w.annTask, StageID: w.annStage}, []string{secretStage}},
		{AskInfoQuery{Type: QueryStageAgents, TaskID: w.annTask, StageID: w.annStage}, []string{w.w}},
		{AskInfoQuery{Type: QueryAssignedTaskAndStageInfo}, []string{w.annTask, secretStage}},
	} {
		st, answer := w.ask(w.annOther, w.ann, tc.q)
		if st.ExecutionState != StateFinished {
			t.Errorf("ask_info %s in ann's other task: step %s (%v)", tc.q.Type, st.ExecutionState, st.ExecuteResult["error"])
		}
		for _, s := range tc.want {
			if !strings.Contains(answer, s) {
				t.Errorf("ask_info %s in ann's other task: the answer lacks %q:\n%s", tc.q.Type, s, answer)
			}
		}
	}
}
