package engine

// The testbed of the internal tests: a started System whose skills are
// scripted ExecutorFuncs (the engine's own seam, no LLM), plus helpers to
// build tasks and stages, inject steps and wait for asynchronous effects.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/mas-mcp/mas-mcp/prompts"
)

// cmpEmpty treats nil and empty slices and maps as equal.
var cmpEmpty = cmpopts.EquateEmpty()

var (
	textsOnce sync.Once
	textsSet  *prompts.Set
	textsErr  error
)

// loadTexts returns the English prompt set, loaded once per test binary
// (it is immutable and safe for concurrent use).
func loadTexts(t testing.TB) *prompts.Set {
	t.Helper()
	textsOnce.Do(func() { textsSet, textsErr = prompts.Load("en", "") })
	if textsErr != nil {
		t.Fatalf("prompts.Load: %v", textsErr)
	}
	return textsSet
}

// templatesOf converts the prompt set's agent templates as skills.Templates
// does (package skills imports engine, so it cannot be used here).
func templatesOf(set *prompts.Set) []AgentConfig {
	var out []AgentConfig
	for _, t := range set.Templates() {
		out = append(out, AgentConfig{
			Template: t.Name, Name: t.Name, Role: t.Role, Profile: t.Profile,
			Skills: t.Skills, Tools: t.Tools,
		})
	}
	return out
}

// handler is a scripted executor.
type handler func(ctx context.Context, in *ExecInput) *Output

// execCall records one executor invocation.
type execCall struct {
	Agent   string // the agent's name
	Skill   string
	StepID  string
	TaskID  string
	StageID string
	Text    string
}

// script routes every skill step to a handler: first one registered for
// the step's exact text_content, then one for (agent name, skill), then one
// for the skill; otherwise a default that succeeds (reflection finds the
// goal met, summary completes, everything else does nothing).
type script struct {
	mu      sync.Mutex
	byText  map[string]handler
	byAgent map[string]handler
	bySkill map[string]handler
	calls   []execCall
}

func newScript() *script {
	return &script{byText: map[string]handler{}, byAgent: map[string]handler{}, bySkill: map[string]handler{}}
}

func (sc *script) onText(text string, h handler) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.byText[text] = h
}

func (sc *script) onAgent(name, skill string, h handler) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.byAgent[name+"/"+skill] = h
}

func (sc *script) onSkill(skill string, h handler) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.bySkill[skill] = h
}

func (sc *script) executor(skill string) Executor {
	return ExecutorFunc(func(ctx context.Context, in *ExecInput) *Output {
		sc.mu.Lock()
		sc.calls = append(sc.calls, execCall{
			Agent: in.Agent.Name, Skill: skill, StepID: in.Step.StepID,
			TaskID: in.Step.TaskID, StageID: in.Step.StageID, Text: in.Step.TextContent,
		})
		h := sc.byText[in.Step.TextContent]
		if h == nil {
			h = sc.byAgent[in.Agent.Name+"/"+skill]
		}
		if h == nil {
			h = sc.bySkill[skill]
		}
		sc.mu.Unlock()
		if h != nil {
			return h(ctx, in)
		}
		switch skill {
		case SkillReflection:
			return &Output{AddSteps: []StepSpec{}}
		case SkillSummary:
			done := "done by " + in.Agent.Name
			return &Output{Completion: &done}
		}
		return &Output{}
	})
}

// count is the number of executor calls so far.
func (sc *script) count() int {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return len(sc.calls)
}

// since returns the calls after the first n.
func (sc *script) since(n int) []execCall {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return slices.Clone(sc.calls[n:])
}

// callsOf returns the calls of one agent (by name), optionally of one skill.
func (sc *script) callsOf(agent, skill string) []execCall {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	var out []execCall
	for _, c := range sc.calls {
		if c.Agent == agent && (skill == "" || c.Skill == skill) {
			out = append(out, c)
		}
	}
	return out
}

// testbed is a started System with scripted skills.
type testbed struct {
	t   testing.TB
	sys *System
	sc  *script
	sub *Subscription
}

// newTestbed starts a System; mod may change its Config first.
func newTestbed(t testing.TB, mod func(*Config)) *testbed {
	t.Helper()
	set := loadTexts(t)
	sc := newScript()
	execs := map[string]Executor{}
	for _, n := range SkillNames {
		execs[n] = sc.executor(n)
	}
	cfg := Config{
		Texts:       set,
		Skills:      execs,
		SkillGuides: set.SkillGuides(),
		Templates:   templatesOf(set),
	}
	if mod != nil {
		mod(&cfg)
	}
	sys, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	b := &testbed{t: t, sys: sys, sc: sc, sub: sys.Subscribe(1 << 14)}
	if err := sys.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		b.sub.Close()
		_ = sys.Close()
	})
	return b
}

// waitFor waits until cond holds, re-checking on every engine event (and
// every 20 ms, in case events were dropped). The 20 s bound catches hangs;
// it is not a performance assertion. Not for synctest bubbles.
func (b *testbed) waitFor(what string, cond func() bool) {
	b.t.Helper()
	deadline := time.After(20 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-b.sub.C:
		case <-tick.C:
		case <-deadline:
			b.t.Fatalf("timed out waiting for %s\n%s", what, b.dump())
		}
	}
}

// settled reports whether no LLM agent has a step running or a runnable
// step, and no event was published while that was checked.
func (b *testbed) settled() bool {
	seq := b.sys.EventSeq()
	if b.sys.ReportsOnTheirWay() > 0 {
		return false
	}
	for _, a := range b.sys.allAgents() {
		a.mu.Lock()
		// An agent that finished a step shows "working" until its loop
		// looks for the next one and stores what it finds (idle, waiting).
		busy := a.kind == KindLLM && (a.running != "" || a.st.WorkingState == WorkingWorking ||
			(len(a.st.AgentStep.TodoList) > 0 && len(a.st.StepLock) == 0))
		a.mu.Unlock()
		if busy {
			return false
		}
	}
	return b.sys.ReportsOnTheirWay() == 0 && b.sys.EventSeq() == seq
}

// settle waits until the MAS has nothing left to run.
func (b *testbed) settle() {
	b.t.Helper()
	b.waitFor("the MAS to settle", b.settled)
}

func (b *testbed) dump() string {
	var s strings.Builder
	for _, a := range b.sys.Agents() {
		fmt.Fprintf(&s, "agent %s (%.8s) %s lock=%v todo=%d\n", a.Name, a.AgentID, a.WorkingState, a.StepLock, len(a.AgentStep.TodoList))
		for _, st := range a.AgentStep.StepList {
			fmt.Fprintf(&s, "  %.8s %-22s %-8s task=%.8s stage=%.8s %q err=%v\n", st.StepID, st.Executor, st.ExecutionState,
				st.TaskID, st.StageID, oneLine(st.StepIntention), st.ExecuteResult["error"])
		}
	}
	return s.String()
}

// agentNamed returns the ID of the agent with that name ("" if none).
func (b *testbed) agentNamed(name string) string {
	for _, a := range b.sys.AgentBriefs() {
		if a.Name == name {
			return a.AgentID
		}
	}
	return ""
}

func (b *testbed) op() string { return b.sys.OperatorID() }

func (b *testbed) mgr() string { return b.sys.ManagerID() }

// newAgent creates an LLM agent from the researcher template.
func (b *testbed) newAgent(name string) string {
	b.t.Helper()
	id, err := b.sys.CreateAgent(AgentConfig{Template: "researcher", Name: name})
	if err != nil {
		b.t.Fatalf("CreateAgent %s: %v", name, err)
	}
	return id
}

// operator adds an operator (a HumanAgent) to the MAS.
func (b *testbed) operator(name string) string {
	b.t.Helper()
	id, err := b.sys.AddOperator(name)
	if err != nil {
		b.t.Fatalf("AddOperator %s: %v", name, err)
	}
	return id
}

// join adds agents to a task group through the operator.
func (b *testbed) join(taskID string, agents ...string) {
	b.t.Helper()
	if _, err := b.sys.AgentInstruction(b.op(), AgentInstruction{
		Action: ActionAddTaskParticipant, TaskID: taskID, Agents: agents,
	}); err != nil {
		b.t.Fatalf("add_task_participant: %v", err)
	}
}

// newTask hands a task to the MAS manager through the operator and adds
// members to its group.
func (b *testbed) newTask(name string, members ...string) string {
	b.t.Helper()
	id, err := b.sys.AddTask(b.op(), AddTaskRequest{TaskName: name, TaskIntention: "intention of " + name})
	if err != nil {
		b.t.Fatalf("AddTask: %v", err)
	}
	if len(members) > 0 {
		b.join(id, members...)
	}
	return id
}

// addStages adds stages through the operator and returns their IDs.
func (b *testbed) addStages(taskID string, stages ...StageSpec) []string {
	b.t.Helper()
	res, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionAddStage, TaskID: taskID, Stages: stages})
	if err != nil {
		b.t.Fatalf("add_stage: %v", err)
	}
	return res.AddStage.StageIDs
}

// inject queues steps on an agent directly (append, or next).
func (b *testbed) inject(agentID, taskID, stageID string, next bool, specs ...StepSpec) []string {
	b.t.Helper()
	a, ok := b.sys.agent(agentID)
	if !ok {
		b.t.Fatalf("no agent %s", agentID)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.addStepsLocked(taskID, stageID, specs, next, "")
}

func (b *testbed) agent(id string) AgentState {
	b.t.Helper()
	a, ok := b.sys.Agent(id)
	if !ok {
		b.t.Fatalf("no agent %s", id)
	}
	return a
}

func (b *testbed) task(id string) TaskState {
	b.t.Helper()
	t, ok := b.sys.Task(id)
	if !ok {
		b.t.Fatalf("no task %s", id)
	}
	return t
}

// step returns one step of an agent (zero and false if it is gone).
func (b *testbed) step(agentID, stepID string) (StepState, bool) {
	for _, s := range b.agent(agentID).AgentStep.StepList {
		if s.StepID == stepID {
			return s, true
		}
	}
	return StepState{}, false
}

// steps returns an agent's steps that match.
func (b *testbed) steps(agentID string, match func(StepState) bool) []StepState {
	var out []StepState
	for _, s := range b.agent(agentID).AgentStep.StepList {
		if match(s) {
			out = append(out, s)
		}
	}
	return out
}

// stepDone reports whether a step is finished or failed.
func (b *testbed) stepDone(agentID, stepID string) bool {
	s, ok := b.step(agentID, stepID)
	return ok && (s.ExecutionState == StateFinished || s.ExecutionState == StateFailed)
}

func (b *testbed) stage(taskID, stageID string) StageState {
	b.t.Helper()
	for _, st := range b.task(taskID).StageList {
		if st.StageID == stageID {
			return st
		}
	}
	b.t.Fatalf("no stage %s in task %s", stageID, taskID)
	return StageState{}
}

func spec(executor, text string) StepSpec {
	return StepSpec{StepIntention: "do " + text, Type: StepSkill, Executor: executor, TextContent: text}
}

// looseAgent builds an LLM agent owner that is not registered: no loop runs
// its steps, so its lists stay as the test leaves them.
func looseAgent(s *System, name string, skills ...string) *agent {
	st := AgentState{
		AgentID: newID(), Name: name, Role: "tester", Kind: KindLLM, WorkingState: WorkingIdle,
		WorkingMemory: map[string]map[string][]string{}, PersistentMemory: map[string]string{},
		StepLock: []string{}, Tools: []string{}, Skills: skills,
	}
	st.AgentStep = AgentStep{AgentID: st.AgentID, TodoList: []string{}, StepList: []StepState{}}
	return newAgentOwner(s, st)
}

// bareSystem is a System that is not started: enough for the pure parts
// (plans, memory, steps of loose agents).
func bareSystem(t testing.TB, mod func(*Config)) *System {
	t.Helper()
	cfg := Config{Texts: loadTexts(t)}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// steppingClock returns a clock that advances by d on every reading, so
// timestamps are distinct and ordered.
func steppingClock(d time.Duration) func() time.Time {
	start := time.Date(2025, 6, 13, 10, 30, 0, 0, time.UTC)
	var n atomic.Int64
	return func() time.Time { return start.Add(time.Duration(n.Add(1)) * d) }
}

// jsonNorm returns v as it reads after a JSON round trip, so values can be
// compared whatever Go types hold them (execute_result is stored
// JSON-shaped).
func jsonNorm(t testing.TB, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// isErr checks an error's sentinel and that its text names the field.
func isErr(t testing.TB, err, kind error, field string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v naming %q", kind, field)
	}
	if !errors.Is(err, kind) {
		t.Errorf("error %q: want errors.Is %v", err, kind)
	}
	if !strings.Contains(err.Error(), field) {
		t.Errorf("error %q does not name %q", err, field)
	}
}

// crashImage returns st's image, what a crash of the testbed's System
// would leave of it now, and then closes the System (so that it writes
// nothing more and its goroutines end before another starts from the
// image, restartFrom).
func (b *testbed) crashImage(st *MemoryStore) *Image {
	b.t.Helper()
	img, err := st.Image()
	if err != nil {
		b.t.Fatal(err)
	}
	b.sub.Close()
	_ = b.sys.Close()
	return img
}

// restartFrom starts a new System on cfg (with a fresh MemoryStore) from
// img, as a process restarted after a crash would, scripted by sc.
func restartFrom(t testing.TB, cfg Config, img *Image, sc *script) *testbed {
	t.Helper()
	cfg.Store = NewMemoryStore()
	return startFrom(t, cfg, img, sc)
}

// startFrom is restartFrom on the store cfg names.
func startFrom(t testing.TB, cfg Config, img *Image, sc *script) *testbed {
	t.Helper()
	sys, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := &testbed{t: t, sys: sys, sc: sc, sub: sys.Subscribe(1 << 14)}
	t.Cleanup(func() {
		b.sub.Close()
		_ = sys.Close()
	})
	if err := sys.StartFrom(img); err != nil {
		t.Fatal(err)
	}
	return b
}
