package engine

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// snapWorld is a settled MAS whose states hold every kind of nested value:
// a finished stage, instructions in the conversation log, step results with
// rejected steps, memory, an operator's recorded message.
type snapWorld struct {
	b                *testbed
	w1, task, stage1 string
}

func newSnapWorld(t *testing.T) *snapWorld {
	b := newTestbed(t, nil)
	w := &snapWorld{b: b, w1: b.newAgent("w1")}
	b.sc.onAgent("w1", SkillPlanning, func(context.Context, *ExecInput) *Output {
		return &Output{
			Result:   map[string]any{"planned": map[string]any{"list": []any{"a", map[string]any{"b": 1}}, "ids": []string{"x"}}},
			AddSteps: []StepSpec{spec(SkillThink, "think"), spec("fly", "rejected")},
			Memory:   []MemoryOp{{Add: "a note"}},
		}
	})
	w.task = b.newTask("snapshots", w.w1)
	w.stage1 = b.addStages(w.task,
		StageSpec{StageIntention: "one", AgentAllocation: map[string]string{w.w1: "goal one"}},
		StageSpec{StageIntention: "two", AgentAllocation: map[string]string{w.w1: "goal two"}})[0]
	b.waitFor("stage one to complete", func() bool { return b.stage(w.task, w.stage1).EveryAgentState[w.w1] == AgentFinished })
	b.settle()
	if _, err := b.sys.HumanSend(b.op(), HumanMessage{TaskID: w.task, Receiver: []string{w.w1}, Content: "note this", NeedReply: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionFinishStage, TaskID: w.task, StageID: w.stage1}); err != nil {
		t.Fatal(err)
	}
	b.settle()
	// Keep one step of the task on w1 with rich results.
	id := b.inject(w.w1, b.sys.BaseTaskID(), b.sys.BaseStageID(), false, spec(SkillPlanning, "rich"))[0]
	b.waitFor("the rich step", func() bool { return b.stepDone(w.w1, id) })
	b.settle()
	return w
}

// mustJSON renders v as indented JSON (a deep copy, diffable line by line).
func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// mutateJSON changes every nested map and slice of a JSON-shaped value.
func mutateJSON(v any) {
	switch x := v.(type) {
	case map[string]any:
		if x == nil {
			return
		}
		for _, e := range x {
			mutateJSON(e)
		}
		x["mutated"] = true
	case []any:
		for i := range x {
			mutateJSON(x[i])
		}
		if len(x) > 0 {
			x[0] = "mutated"
		}
	case []string:
		if len(x) > 0 {
			x[0] = "mutated"
		}
	case *ToolCall:
		if x != nil {
			mutateJSON(x.Arguments)
			x.ToolName = "mutated"
		}
	}
}

func TestSnapshotsAreDeepCopies(t *testing.T) {
	agentMutations := []struct {
		name  string
		agent func(w *snapWorld) string
		mut   func(a *AgentState)
	}{
		{"lists and maps", func(w *snapWorld) string { return w.w1 }, func(a *AgentState) {
			a.Skills[0], a.Tools = "mutated", append(a.Tools, "mutated")
			a.AgentStep.StepList[0].StepIntention = "mutated"
			a.StepLock = append(a.StepLock, "mutated")
			a.PersistentMemory["mutated"] = "x"
			a.LLMConfig.Model = "mutated"
			for _, stages := range a.WorkingMemory {
				for s, ids := range stages {
					if len(ids) > 0 {
						ids[0] = "mutated"
					}
					stages[s] = append(ids, "more")
				}
				stages["mutated"] = nil
			}
		}},
		{"todo list", func(w *snapWorld) string { return w.w1 }, func(a *AgentState) {
			a.AgentStep.TodoList = append(a.AgentStep.TodoList[:0], "mutated")
		}},
		{"JSON step results", func(w *snapWorld) string { return w.w1 }, func(a *AgentState) {
			for i := range a.AgentStep.StepList {
				mutateJSON(a.AgentStep.StepList[i].ExecuteResult)
				mutateJSON(a.AgentStep.StepList[i].InstructionContent)
			}
		}},
		{"rejected_steps in a step result", func(w *snapWorld) string { return w.w1 },
			func(a *AgentState) {
				for _, s := range a.AgentStep.StepList {
					switch rej := s.ExecuteResult["rejected_steps"].(type) {
					case []Rejection:
						rej[0].Reason = "mutated"
					default:
						mutateJSON(rej)
					}
				}
			}},
		{"the operator's recorded message", func(w *snapWorld) string { return w.b.op() },
			func(a *AgentState) {
				for _, s := range a.AgentStep.StepList {
					switch m := s.ExecuteResult["send_message"].(type) {
					case Message:
						m.Receiver[0] = "mutated"
					default:
						mutateJSON(m)
					}
				}
			}},
		{"conversation pool", func(w *snapWorld) string { return w.b.op() }, func(a *AgentState) {
			a.HumanConfig.Name = "mutated"
			a.ConversationPool.GlobalMessages = append(a.ConversationPool.GlobalMessages[:0], "mutated")
			for peer, msgs := range a.ConversationPool.ConversationPrivates {
				msgs[0].Content = "mutated"
				a.ConversationPool.ConversationPrivates[peer] = append(msgs, PrivateMessage{})
			}
		}},
	}
	for _, tt := range agentMutations {
		t.Run("agent/"+tt.name, func(t *testing.T) {
			w := newSnapWorld(t)
			id := tt.agent(w)
			// JSON is a true deep copy of what the snapshot holds.
			before := mustJSON(t, w.b.agent(id))
			snap := w.b.agent(id)
			tt.mut(&snap)
			after := mustJSON(t, w.b.agent(id))
			if diff := cmp.Diff(before, after); diff != "" {
				t.Errorf("mutating a snapshot changed the agent (-before +after):\n%s", diff)
			}
		})
	}

	taskMutations := []struct {
		name string
		mut  func(ts *TaskState)
	}{
		{"lists and maps", func(ts *TaskState) {
			ts.TaskGroup[0] = "mutated"
			ts.SharedInfoPool[0].Content = "mutated"
			ts.SharedConversationPool[0].Receiver[0] = "mutated"
			ts.SharedConversationPool[0].Message = "mutated"
			for i := range ts.SharedConversationPool {
				if w := ts.SharedConversationPool[i].Waiting; len(w) > 0 {
					w[0] = "mutated"
				}
			}
			for i := range ts.StageList {
				st := &ts.StageList[i]
				for k := range st.AgentAllocation {
					st.AgentAllocation[k] = "mutated"
					st.EveryAgentState[k] = "mutated"
					st.CompletionSummary[k] = "mutated"
				}
			}
		}},
		{"instructions in the conversation log",
			func(ts *TaskState) {
				for _, m := range ts.SharedConversationPool {
					if in := m.Instruction; in != nil && in.StartStage != nil {
						in.StartStage.Goal = "mutated"
					}
					if in := m.Instruction; in != nil && in.UpdateWorkingMemory != nil {
						in.UpdateWorkingMemory.TaskID = "mutated"
					}
				}
			}},
	}
	for _, tt := range taskMutations {
		t.Run("task/"+tt.name, func(t *testing.T) {
			w := newSnapWorld(t)
			before := mustJSON(t, w.b.task(w.task))
			snap := w.b.task(w.task)
			tt.mut(&snap)
			after := mustJSON(t, w.b.task(w.task))
			if diff := cmp.Diff(before, after); diff != "" {
				t.Errorf("mutating a snapshot changed the task (-before +after):\n%s", diff)
			}
		})
	}
}

func TestQueryDataIsACopy(t *testing.T) {
	b := newTestbed(t, nil)
	t.Run("skills_and_tools", func(t *testing.T) {
		res, err := b.sys.Query(b.mgr(), AskInfoQuery{Type: QuerySkillsAndTools})
		if err != nil {
			t.Fatal(err)
		}
		res.Data.(map[string]any)["skills"].(map[string]string)[SkillPlanning] = "mutated"
		again, _ := b.sys.Query(b.mgr(), AskInfoQuery{Type: QuerySkillsAndTools})
		if again.Data.(map[string]any)["skills"].(map[string]string)[SkillPlanning] == "mutated" {
			t.Error("Query skills_and_tools returns Config.SkillGuides itself: a caller's change alters the MAS")
		}
	})
	t.Run("available_agents_config", func(t *testing.T) {
		res, err := b.sys.Query(b.mgr(), AskInfoQuery{Type: QueryAvailableAgentsConfig})
		if err != nil {
			t.Fatal(err)
		}
		tpls := res.Data.([]AgentConfig)
		i := slices.IndexFunc(tpls, func(c AgentConfig) bool { return c.Template == "researcher" })
		tpls[i].Skills[0] = "mutated"
		id, err := b.sys.CreateAgent(AgentConfig{Template: "researcher", Name: "r"})
		if err != nil {
			t.Fatalf("a caller's change to available_agents_config broke init_new_agent: %v", err)
		}
		if slices.Contains(b.agent(id).Skills, "mutated") {
			t.Error("Templates()/available_agents_config share the templates' Skills slices with the MAS")
		}
	})
}

func TestReadsDoNotWaitForExecutors(t *testing.T) {
	b := newTestbed(t, nil)
	w := b.newAgent("w")
	task := b.newTask("slow", w)
	started, release := make(chan struct{}), make(chan struct{})
	b.sc.onText("slow", func(ctx context.Context, _ *ExecInput) *Output {
		close(started)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return &Output{}
	})
	id := b.inject(w, task, NoRelative, false, spec(SkillThink, "slow"))[0]
	waitChan(t, started, "the slow step to start")

	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, q := range []AskInfoQuery{
			{Type: QueryAgent, AgentID: StringList{w}}, {Type: QueryTaskInfo, TaskID: task},
			{Type: QueryAllAgents}, {Type: QueryAssignedTaskAndStageInfo},
		} {
			if _, err := b.sys.Query(w, q); err != nil {
				t.Errorf("Query %s: %v", q.Type, err)
			}
		}
		b.sys.Agents()
		b.sys.Tasks()
		b.sys.AgentBriefs()
		b.sys.Task(task)
		if _, err := b.sys.Inbox(b.op()); err != nil {
			t.Errorf("Inbox: %v", err)
		}
		a, _ := b.sys.Agent(w)
		if a.WorkingState != WorkingWorking {
			t.Errorf("w is %s while its step runs, want working", a.WorkingState)
		}
		if i := slices.IndexFunc(a.AgentStep.StepList, func(s StepState) bool { return s.StepID == id }); i < 0 || a.AgentStep.StepList[i].ExecutionState != StateRunning {
			t.Errorf("the slow step is not running: %+v", a.AgentStep.StepList)
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("reads blocked while an executor was running")
	}
	close(release)
	b.waitFor("the slow step", func() bool { return b.stepDone(w, id) })
}

// TestExecutorViewIsTheStepsOwn: an executor sees its step's stage's steps
// and its step's task's working memory, not the agent's other tasks (a
// manager with a hundred tasks in flight copied all of them for every
// step) nor the received message IDs (the engine's bookkeeping); the
// agent's own state keeps all of it.
func TestExecutorViewIsTheStepsOwn(t *testing.T) {
	b := newTestbed(t, nil)
	w1 := b.newAgent("w1")
	views := make(chan AgentState, 16)
	b.sc.onAgent("w1", SkillPlanning, func(_ context.Context, in *ExecInput) *Output {
		views <- in.Agent
		return &Output{}
	})
	one, two := b.newTask("one", w1), b.newTask("two", w1)
	stageOne := b.addStages(one, StageSpec{StageIntention: "s1", AgentAllocation: map[string]string{w1: "g1"}})[0]
	got := <-views
	b.addStages(two, StageSpec{StageIntention: "s2", AgentAllocation: map[string]string{w1: "g2"}})
	b.settle()
	if _, ok := got.WorkingMemory[one]; !ok || len(got.WorkingMemory) != 1 {
		t.Errorf("the view's working memory has tasks %v, want only %s", slices.Collect(maps.Keys(got.WorkingMemory)), one)
	}
	for _, st := range got.AgentStep.StepList {
		if st.TaskID != one || st.StageID != stageOne {
			t.Errorf("the view holds step %s of task %s stage %s, not of the step's stage", st.StepID, st.TaskID, st.StageID)
		}
	}
	if len(got.Received) != 0 {
		t.Errorf("the view lists received message IDs %v", got.Received)
	}
	a := b.agent(w1)
	if _, ok := a.WorkingMemory[two]; !ok || len(a.Received) == 0 {
		t.Errorf("the agent lost its own state: working memory %v, received %v", a.WorkingMemory, a.Received)
	}
}
