package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestNewConfigErrors(t *testing.T) {
	set := loadTexts(t)
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no texts", Config{}, "Texts is required"},
		{"negative wait timeout", Config{Texts: set, WaitTimeout: -1}, "must not be negative"},
		{"negative step budget", Config{Texts: set, StageStepBudget: -1}, "must not be negative"},
		{"template without a name", Config{Texts: set, Templates: []AgentConfig{{Name: "x"}}}, "Templates[0]"},
	}
	for _, tt := range tests {
		if _, err := New(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: New error %v, want one containing %q", tt.name, err, tt.want)
		}
	}
	s, err := New(Config{Texts: set})
	if err != nil {
		t.Fatal(err)
	}
	c := s.cfg
	if c.WaitTimeout <= 0 || c.StageStepBudget != 60 || c.StageReflectionBudget != 6 || c.SummaryAttempts != 2 || c.ManagerTemplate != "manager" || c.Now == nil || c.Logger == nil {
		t.Errorf("defaults not applied: %+v", c)
	}
	// No manager template: Start fails and says so.
	if err := s.Start(); err == nil || !strings.Contains(err.Error(), `template "manager"`) {
		t.Errorf("Start without templates: %v", err)
	}
	_ = s.Close()

	b := newTestbed(t, nil)
	if err := b.sys.Start(); err == nil {
		t.Errorf("a second Start succeeded")
	}
}

func TestRouteRefusals(t *testing.T) {
	b := newTestbed(t, func(c *Config) {
		delete(c.Skills, SkillQuickThink)
	})
	w := b.newAgent("w") // a researcher: no task_manager
	b.join(b.sys.BaseTaskID(), w)
	b.sc.onText("nil output", func(context.Context, *ExecInput) *Output { return nil })
	tests := []struct {
		name string
		sp   StepSpec
		want string
	}{
		{"unknown skill", StepSpec{Type: StepSkill, Executor: "fly"}, `executor "fly": no such skill`},
		{"skill the agent lacks", StepSpec{Type: StepSkill, Executor: SkillTaskManager}, `executor "task_manager": agent ` + w + " lacks this skill"},
		{"no executor registered", StepSpec{Type: StepSkill, Executor: SkillQuickThink}, "no executor is registered"},
		{"tool outside the agent's tools", StepSpec{Type: StepTool, Executor: "search"}, `executor "search": tool is not in agent`},
		{"bad type", StepSpec{Type: "magic", Executor: SkillThink}, `type "magic"`},
		{"nil output", spec(SkillThink, "nil output"), "executor returned no output"},
	}
	var specs []StepSpec
	for _, tt := range tests {
		specs = append(specs, tt.sp)
	}
	ids := b.inject(w, b.sys.BaseTaskID(), b.sys.BaseStageID(), false, specs...)
	b.waitFor("the refused steps", func() bool { return b.stepDone(w, ids[len(ids)-1]) })
	for i, tt := range tests {
		st, _ := b.step(w, ids[i])
		msg, _ := st.ExecuteResult["error"].(string)
		if st.ExecutionState != StateFailed || !strings.Contains(msg, tt.want) {
			t.Errorf("%s: step %s with error %q, want failed with %q", tt.name, st.ExecutionState, msg, tt.want)
		}
	}

	// A tool step of an agent that has the tool, but no tool executor.
	tb := newTestbed(t, func(c *Config) { c.Tools = toolCatalog{"search": "web"} })
	id, err := tb.sys.CreateAgent(AgentConfig{Name: "tooled", Role: "r", Tools: []string{"search"}})
	if err != nil {
		t.Fatal(err)
	}
	tb.join(tb.sys.BaseTaskID(), id)
	step := tb.inject(id, tb.sys.BaseTaskID(), tb.sys.BaseStageID(), false, StepSpec{Type: StepTool, Executor: "search"})[0]
	tb.waitFor("the tool step", func() bool { return tb.stepDone(id, step) })
	if st, _ := tb.step(id, step); !strings.Contains(st.ExecuteResult["error"].(string), "no downstream MCP tool servers are configured") {
		t.Errorf("tool step error %v", st.ExecuteResult["error"])
	}
}

func TestToolStepsRunOnTheToolExecutor(t *testing.T) {
	var got []ExecInput
	tool := ExecutorFunc(func(_ context.Context, in *ExecInput) *Output {
		got = append(got, *in)
		var called any
		if c := in.Step.InstructionContent; c != nil {
			called = c.ToolName
		}
		return &Output{Result: map[string]any{"called": called}}
	})
	b := newTestbed(t, func(c *Config) {
		c.Tools = toolCatalog{"search": "web"}
		c.Tool = tool
	})
	id, err := b.sys.CreateAgent(AgentConfig{Name: "tooled", Role: "r", Skills: []string{SkillInstructionGeneration}, Tools: []string{"search"}})
	if err != nil {
		t.Fatal(err)
	}
	b.join(b.sys.BaseTaskID(), id)
	b.sc.onAgent("tooled", SkillInstructionGeneration, func(_ context.Context, in *ExecInput) *Output {
		return &Output{ToolInstruction: &ToolInstruction{StepID: in.Step.TargetStepID, Instruction: &ToolCall{ToolName: "lookup"}}}
	})
	ids := b.inject(id, b.sys.BaseTaskID(), b.sys.BaseStageID(), false,
		spec(SkillInstructionGeneration, "prepare"), StepSpec{StepIntention: "call", Type: StepTool, Executor: "search"})
	b.waitFor("the tool step", func() bool { return b.stepDone(id, ids[1]) })
	st, _ := b.step(id, ids[1])
	if st.ExecutionState != StateFinished || st.ExecuteResult["called"] != "lookup" {
		t.Errorf("tool step %s result %v, want finished calling lookup", st.ExecutionState, st.ExecuteResult)
	}
	if len(got) != 1 || got[0].Step.StepID != ids[1] || got[0].View == nil {
		t.Errorf("tool executor inputs %+v", got)
	}
}

func TestExecutorView(t *testing.T) {
	b := newTestbed(t, nil)
	w := b.newAgent("w")
	task := b.newTask("view", w)
	b.join(b.sys.BaseTaskID(), w)
	seen := make(chan ExecInput, 1)
	b.sc.onText("look", func(_ context.Context, in *ExecInput) *Output {
		// The step list is the executor's until it returns (the next
		// step's view reuses its array): kept, it is copied.
		kept := *in
		kept.Agent.AgentStep.StepList = slices.Clone(in.Agent.AgentStep.StepList)
		seen <- kept
		return &Output{}
	})
	base := b.inject(w, b.sys.BaseTaskID(), b.sys.BaseStageID(), false, spec(SkillThink, "base work"))[0]
	b.waitFor("the base step", func() bool { return b.stepDone(w, base) })
	ids := b.inject(w, task, NoRelative, false, spec(SkillThink, "earlier"), spec(SkillThink, "look"), spec(SkillThink, "later"))
	in := <-seen
	var got []string
	for _, s := range in.Agent.AgentStep.StepList {
		got = append(got, s.StepID)
	}
	if diff := cmp.Diff(ids, got); diff != "" {
		t.Errorf("the executor's step list mismatch (-want +got):\n%s", diff)
	}
	if in.Step.StepID != ids[1] || in.Step.ExecutionState != StateRunning || in.Agent.AgentID != w {
		t.Errorf("input step %+v, want the running step", in.Step)
	}
	if ts, ok := in.View.Task(task); !ok || ts.TaskID != task {
		t.Errorf("View.Task(%s) = %v", task, ok)
	}
	if br, ok := in.View.AgentBrief(w); !ok || br.Name != "w" {
		t.Errorf("View.AgentBrief = %+v %v", br, ok)
	}
}

func TestUsageIsAccounted(t *testing.T) {
	b := newTestbed(t, nil)
	w := b.newAgent("w")
	task := b.newTask("usage", w)
	u := Usage{PromptTokens: 7, CompletionTokens: 3, TotalTokens: 10, Calls: 1}
	b.sc.onText("costly", func(context.Context, *ExecInput) *Output { return &Output{Usage: u} })
	id := b.inject(w, task, NoRelative, false, spec(SkillThink, "costly"))[0]
	b.waitFor("the step", func() bool { return b.stepDone(w, id) })
	b.settle()
	st, _ := b.step(w, id)
	if diff := cmp.Diff(u, st.Usage); diff != "" {
		t.Errorf("step usage mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(u, b.agent(w).Usage); diff != "" {
		t.Errorf("agent usage mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(u, b.task(task).Usage); diff != "" {
		t.Errorf("task usage mismatch (-want +got):\n%s", diff)
	}

	// A step whose task ends while it runs still counts its cost.
	started := make(chan struct{})
	b.sc.onText("cancelled", func(ctx context.Context, _ *ExecInput) *Output {
		close(started)
		<-ctx.Done()
		return &Output{Usage: u}
	})
	b.inject(w, task, NoRelative, false, spec(SkillThink, "cancelled"))
	waitChan(t, started, "the cancelled step")
	if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionCancelTask, TaskID: task}); err != nil {
		t.Fatal(err)
	}
	b.waitFor("both costs", func() bool { return b.task(task).Usage.Calls == 2 && b.agent(w).Usage.Calls == 2 })
}

func TestNeedToolDecision(t *testing.T) {
	b := newTestbed(t, nil)
	w := b.newAgent("w")
	b.join(b.sys.BaseTaskID(), w)
	b.sc.onText("long tail", func(context.Context, *ExecInput) *Output {
		return &Output{NeedToolDecision: &ToolDecisionRequest{ToolName: "search", StepIntention: "decide on search", TextContent: "continue?"}}
	})
	ids := b.inject(w, b.sys.BaseTaskID(), b.sys.BaseStageID(), false, spec(SkillThink, "long tail"), spec(SkillThink, "after"))
	b.waitFor("the steps", func() bool { return b.stepDone(w, ids[1]) })
	var got []string
	for _, c := range b.sc.callsOf("w", "") {
		got = append(got, c.Skill+":"+c.Text)
	}
	want := []string{"think:long tail", "tool_decision:continue?", "think:after"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("executions mismatch (-want +got):\n%s", diff)
	}
	td := b.steps(w, func(s StepState) bool { return s.Executor == SkillToolDecision })
	if len(td) != 1 || td[0].StageID != b.sys.BaseStageID() || td[0].StepIntention != "decide on search" {
		t.Errorf("tool_decision steps %+v, want one in the asking step's stage", td)
	}
}

func TestEveryChangeReachesTheStore(t *testing.T) {
	store := NewMemoryStore()
	b := newTestbed(t, func(c *Config) { c.Store = store })
	w := b.newAgent("w")
	task := b.newTask("stored", w)
	b.addStages(task, StageSpec{StageIntention: "s", AgentAllocation: map[string]string{w: "g"}})
	b.waitFor("the stage to complete", func() bool { return anyContains(notices(b, b.mgr(), task), "completion summaries") })
	b.settle()
	if store.Writes() == 0 {
		t.Fatal("no writes")
	}
	norm := func(v any) any { return jsonNorm(t, v) }
	for _, a := range b.sys.Agents() {
		got, ok := store.Agent(a.AgentID)
		if !ok {
			t.Errorf("agent %s not stored", a.Name)
			continue
		}
		if diff := cmp.Diff(norm(a), norm(got)); diff != "" {
			t.Errorf("stored agent %s mismatch (-live +stored):\n%s", a.Name, diff)
		}
	}
	img, err := store.Image()
	if err != nil {
		t.Fatal(err)
	}
	for _, ts := range b.sys.Tasks() {
		got, ok := store.Task(ts.TaskID)
		if !ok {
			t.Errorf("task %s not stored", ts.TaskName)
			continue
		}
		// The conversation is stored as the messages, not in the task.
		var msgs []Message
		for _, m := range img.Messages {
			if m.TaskID == ts.TaskID {
				msgs = append(msgs, m)
			}
		}
		if diff := cmp.Diff(norm(ts.SharedConversationPool), norm(dedupMessages(msgs))); diff != "" {
			t.Errorf("stored messages of task %s mismatch (-live +stored):\n%s", ts.TaskName, diff)
		}
		ts.SharedConversationPool, got.SharedConversationPool = nil, nil
		ts.UpdatedAt, got.UpdatedAt = time.Time{}, time.Time{}
		if diff := cmp.Diff(norm(ts), norm(got)); diff != "" {
			t.Errorf("stored task %s mismatch (-live +stored):\n%s", ts.TaskName, diff)
		}
	}
	if _, ok := store.Task("t-404"); ok {
		t.Errorf("store has an unknown task")
	}
}

func TestStringListJSON(t *testing.T) {
	tests := []struct {
		in      string
		want    StringList
		wantErr bool
	}{
		{`"a"`, StringList{"a"}, false},
		{`["a","b"]`, StringList{"a", "b"}, false},
		{`[]`, StringList{}, false},
		{`5`, nil, true},
		{`[1]`, nil, true},
	}
	for _, tt := range tests {
		var got StringList
		err := json.Unmarshal([]byte(tt.in), &got)
		if (err != nil) != tt.wantErr {
			t.Errorf("%s: error %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if diff := cmp.Diff(tt.want, got); !tt.wantErr && diff != "" {
			t.Errorf("%s mismatch (-want +got):\n%s", tt.in, diff)
		}
	}
}

func TestStringListNull(t *testing.T) {
	var q AskInfoQuery
	if err := json.Unmarshal([]byte(`{"type":"agent","agent_id":null}`), &q); err != nil {
		t.Fatal(err)
	}
	if len(q.AgentID) != 0 {
		t.Errorf("StringList.UnmarshalJSON turns null into %q (a list with one empty ID), so agent_id/receiver/agents: null is reported as an unknown ID \"\" instead of an empty field", []string(q.AgentID))
	}
}

// heldMessageStore holds back one message's write until release is closed.
type heldMessageStore struct {
	*MemoryStore
	hold    func(*Message) bool
	held    chan struct{} // closed once the message is held
	release chan struct{}
	once    sync.Once
}

func (s *heldMessageStore) PutMessage(ctx context.Context, m *Message) error {
	if s.hold(m) {
		s.once.Do(func() { close(s.held) })
		<-s.release
	}
	return s.MemoryStore.PutMessage(ctx, m)
}

// TestGuardWaitsForTheStagesStart: the task tells a stage's agents to start
// one at a time, so a peer's message of the stage may reach an agent before
// its own start_stage. The progress guard must not push that agent to
// reflect and summarise a stage it has not started (it would submit its
// completion before reading its goal, and the stage could end with its part
// never done): it waits for the start, and the agent then plans and
// completes its part.
func TestGuardWaitsForTheStagesStart(t *testing.T) {
	var late string
	st := &heldMessageStore{MemoryStore: NewMemoryStore(), held: make(chan struct{}), release: make(chan struct{})}
	st.hold = func(m *Message) bool {
		return m.Instruction != nil && m.Instruction.StartStage != nil && len(m.Receiver) == 1 && m.Receiver[0] == late
	}
	b := newTestbed(t, func(c *Config) { c.Store = st })
	x, y := b.newAgent("x"), b.newAgent("y")
	// The instructions go out in the order of the agents' IDs: the later
	// one's is held, the earlier one starts and writes to it.
	early := min(x, y)
	late = max(x, y)
	earlyName := map[string]string{x: "x", y: "y"}[early]
	task := b.newTask("report", x, y)
	b.sc.onAgent(earlyName, SkillPlanning, func(context.Context, *ExecInput) *Output {
		return &Output{AddSteps: []StepSpec{spec(SkillSendMessage, "tell the other")}}
	})
	b.sc.onText("tell the other", func(_ context.Context, in *ExecInput) *Output {
		return &Output{SendMessage: &OutgoingMessage{Receiver: StringList{late}, Message: "a note on our stage", StageRelative: in.Step.StageID}}
	})
	added := make(chan []string, 1)
	go func() {
		res, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionAddStage, TaskID: task,
			Stages: []StageSpec{{StageIntention: "work", AgentAllocation: map[string]string{x: "part x", y: "part y"}}}})
		if err != nil {
			t.Error(err)
			added <- nil
			return
		}
		added <- res.AddStage.StageIDs
	}()
	<-st.held
	b.waitFor("the note processed by the agent not started", func() bool {
		for _, s := range b.agent(late).AgentStep.StepList {
			if s.TaskID == task && s.Executor == SkillProcessMessage && s.ExecutionState == StateFinished {
				return true
			}
		}
		return false
	})
	b.settle()
	for _, s := range b.agent(late).AgentStep.StepList {
		if s.TaskID == task && (s.Executor == SkillReflection || s.Executor == SkillSummary) {
			t.Errorf("the agent not started in the stage was given a %s step", s.Executor)
		}
	}
	for _, stg := range b.task(task).StageList {
		if _, done := stg.CompletionSummary[late]; done {
			t.Errorf("the agent not started in the stage submitted its completion: %q", stg.CompletionSummary[late])
		}
	}
	close(st.release)
	stages := <-added
	if stages == nil {
		return
	}
	b.waitFor("both completions", func() bool { return len(b.stage(task, stages[0]).CompletionSummary) == 2 })
	var planned bool
	for _, c := range b.sc.since(0) {
		if c.StageID == stages[0] && c.Skill == SkillPlanning && c.Agent == map[string]string{x: "x", y: "y"}[late] {
			planned = true
		}
	}
	if !planned {
		t.Error("the late agent completed its part without planning it")
	}
}

// TestViewCostsNoMoreForALongerStage: the executor's view of a step lists
// its stage's steps in an array reused from step to step, so a stage with
// many ended steps costs no more allocations per step than a short one
// (each allocation brings the next collection closer, and the collector
// is where the slowest steps come from). Views taken one after another
// each list their own stage's steps.
func TestViewCostsNoMoreForALongerStage(t *testing.T) {
	b := newTestbed(t, nil)
	w := b.newAgent("w")
	short, long := b.newTask("short", w), b.newTask("long", w)
	run := func(task string, n int) []string {
		var specs []StepSpec
		for i := range n {
			specs = append(specs, spec(SkillThink, fmt.Sprintf("%s %d", task, i)))
		}
		ids := b.inject(w, task, NoRelative, false, specs...)
		b.waitFor("the steps", func() bool { return b.stepDone(w, ids[len(ids)-1]) })
		return ids
	}
	shortIDs, longIDs := run(short, 2), run(long, 200)
	b.settle()
	a, _ := b.sys.agent(w)
	view := func(task string) AgentState {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.viewLocked(&StepState{TaskID: task, StageID: NoRelative})
	}
	allocs := func(task string) float64 { return testing.AllocsPerRun(50, func() { view(task) }) }
	if s, l := allocs(short), allocs(long); l > s {
		t.Errorf("a view allocates %v times for a stage of 200 steps, %v for one of 2: it should not grow with the stage", l, s)
	}
	ids := func(v AgentState) []string {
		var out []string
		for _, st := range v.AgentStep.StepList {
			out = append(out, st.StepID)
		}
		return out
	}
	if got := ids(view(long)); !slices.Equal(got, longIDs) {
		t.Errorf("long stage's view lists %d steps, want its %d", len(got), len(longIDs))
	}
	if got := ids(view(short)); !slices.Equal(got, shortIDs) {
		t.Errorf("short stage's view after the long one lists %v, want %v", got, shortIDs)
	}
}
