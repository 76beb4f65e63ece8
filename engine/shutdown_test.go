package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

// cancelCheckingStore is a MemoryStore that counts writes made with a
// context already cancelled (a real store would refuse them).
type cancelCheckingStore struct {
	*MemoryStore
	cancelled atomic.Int32
}

func (s *cancelCheckingStore) check(ctx context.Context) {
	if ctx.Err() != nil {
		s.cancelled.Add(1)
	}
}

func (s *cancelCheckingStore) PutTask(ctx context.Context, t *TaskState) error {
	s.check(ctx)
	return s.MemoryStore.PutTask(ctx, t)
}

func (s *cancelCheckingStore) PutAgent(ctx context.Context, a *AgentState) error {
	s.check(ctx)
	return s.MemoryStore.PutAgent(ctx, a)
}

func (s *cancelCheckingStore) PutMessage(ctx context.Context, m *Message) error {
	s.check(ctx)
	return s.MemoryStore.PutMessage(ctx, m)
}

// TestCloseFlushesInterruptedSteps: the writes Close causes (a running step
// interrupted, its usage recorded) reach the store with a live context, and
// the step is stored as running, so a restart runs it again.
func TestCloseFlushesInterruptedSteps(t *testing.T) {
	st := &cancelCheckingStore{MemoryStore: NewMemoryStore()}
	b := newTestbed(t, func(c *Config) { c.Store = st })
	alice := b.newAgent("alice")
	b.join(b.sys.BaseTaskID(), alice)
	running := make(chan struct{})
	b.sc.onText("slow", func(ctx context.Context, _ *ExecInput) *Output {
		close(running)
		<-ctx.Done()
		return &Output{Err: ctx.Err(), Usage: Usage{Calls: 1, PromptTokens: 7}}
	})
	id := b.inject(alice, b.sys.BaseTaskID(), b.sys.BaseStageID(), false, spec(SkillThink, "slow"))[0]
	<-running
	if err := b.sys.Close(); err != nil {
		t.Fatal(err)
	}
	if n := st.cancelled.Load(); n != 0 {
		t.Errorf("%d store writes were made with a cancelled context during Close", n)
	}
	a, ok := st.Agent(alice)
	if !ok {
		t.Fatal("alice is not in the store")
	}
	for _, s := range a.AgentStep.StepList {
		if s.StepID == id {
			if s.ExecutionState != StateRunning || s.Usage.PromptTokens != 7 {
				t.Errorf("stored step: state %s, usage %+v; want running with the call's usage", s.ExecutionState, s.Usage)
			}
			return
		}
	}
	t.Errorf("the interrupted step %s is not in alice's stored steps", id)
}

// TestCloseStartsNoFurtherStep: once Close begins, no agent takes another
// step. A loop that saw the MAS's context cancelled before its agent was
// stopped used to pop its next steps, fail them at once and store them all
// as running, so the next start re-ran them out of order (the manager
// added its stages before creating the agents they name).
func TestCloseStartsNoFurtherStep(t *testing.T) {
	st := NewMemoryStore()
	b := newTestbed(t, func(c *Config) { c.Store = st })
	const agents, after = 24, 4
	var running sync.WaitGroup
	var closing atomic.Bool
	var late atomic.Int32
	b.sc.onText("slow", func(ctx context.Context, _ *ExecInput) *Output {
		running.Done()
		<-ctx.Done()
		return &Output{Err: ctx.Err()}
	})
	b.sc.onText("next", func(ctx context.Context, _ *ExecInput) *Output {
		if closing.Load() {
			late.Add(1)
		}
		return &Output{}
	})
	var ids []string
	for i := range agents {
		id := b.newAgent(fmt.Sprint("worker", i))
		b.join(b.sys.BaseTaskID(), id)
		specs := []StepSpec{spec(SkillThink, "slow")}
		for range after {
			specs = append(specs, spec(SkillThink, "next"))
		}
		running.Add(1)
		b.inject(id, b.sys.BaseTaskID(), b.sys.BaseStageID(), false, specs...)
		ids = append(ids, id)
	}
	running.Wait()
	closing.Store(true)
	if err := b.sys.Close(); err != nil {
		t.Fatal(err)
	}
	if n := late.Load(); n != 0 {
		t.Errorf("%d steps started after Close began", n)
	}
	for _, id := range ids {
		a, _ := st.Agent(id)
		var run []string
		for _, s := range a.AgentStep.StepList {
			if s.ExecutionState == StateRunning {
				run = append(run, s.TextContent)
			}
		}
		if !slices.Equal(run, []string{"slow"}) {
			t.Errorf("%s: stored running steps %q, want only the one that was running", a.Name, run)
		}
	}
}

// TestRestoreKeepsOrderOfInterruptedSteps: steps a store holds as running
// run again first, in the order they ran, then the todo list.
func TestRestoreKeepsOrderOfInterruptedSteps(t *testing.T) {
	st := NewMemoryStore()
	var cfg Config
	b := newTestbed(t, func(c *Config) { c.Store = st; cfg = *c })
	alice := b.newAgent("alice")
	b.join(b.sys.BaseTaskID(), alice)
	held := make(chan struct{})
	b.sc.onText("a", func(ctx context.Context, _ *ExecInput) *Output {
		close(held)
		<-ctx.Done()
		return &Output{Err: ctx.Err()}
	})
	b.inject(alice, b.sys.BaseTaskID(), b.sys.BaseStageID(), false,
		spec(SkillThink, "a"), spec(SkillThink, "b"), spec(SkillThink, "c"), spec(SkillThink, "d"))
	<-held
	b.sub.Close()
	if err := b.sys.Close(); err != nil {
		t.Fatal(err)
	}
	img, err := st.Image()
	if err != nil {
		t.Fatal(err)
	}
	// As an older mas-mcp could leave it: "a" and "b" both running, the
	// todo list without them.
	for i := range img.Agents {
		as := &img.Agents[i].AgentStep
		if img.Agents[i].AgentID != alice {
			continue
		}
		var todo []string
		for j := range as.StepList {
			switch as.StepList[j].TextContent {
			case "a", "b":
				as.StepList[j].ExecutionState = StateRunning
			case "c", "d":
				todo = append(todo, as.StepList[j].StepID)
			}
		}
		as.TodoList = todo
	}

	sc := newScript()
	cfg.Skills = map[string]Executor{}
	for _, n := range SkillNames {
		cfg.Skills[n] = sc.executor(n)
	}
	b2 := restartFrom(t, cfg, img, sc)
	b2.waitFor("alice's four steps", func() bool { return len(sc.callsOf("alice", SkillThink)) == 4 })
	var order []string
	for _, c := range sc.callsOf("alice", SkillThink) {
		order = append(order, c.Text)
	}
	if want := []string{"a", "b", "c", "d"}; !slices.Equal(order, want) {
		t.Errorf("steps ran in the order %q, want %q", order, want)
	}
}
