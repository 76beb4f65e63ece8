package engine

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/mas-mcp/mas-mcp/llm"
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
		return &Output{Err: ctx.Err(), Usage: llm.Usage{Calls: 1, PromptTokens: 7}}
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
