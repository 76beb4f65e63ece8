package engine

import (
	"context"
	"sync"
	"testing"
	"time"
)

// stallingStore is a MemoryStore whose next PutAgent of one agent blocks
// until released, as a write to an unreachable NATS server does.
type stallingStore struct {
	*MemoryStore
	mu      sync.Mutex
	agentID string
	stalled chan struct{} // closed when the write blocks
	release chan struct{}
}

func (s *stallingStore) stallNext(agentID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.agentID, s.stalled, s.release = agentID, make(chan struct{}), make(chan struct{})
}

func (s *stallingStore) PutAgent(ctx context.Context, a *AgentState) error {
	s.mu.Lock()
	stall := s.agentID != "" && a.AgentID == s.agentID
	var stalled, release chan struct{}
	if stall {
		s.agentID = ""
		stalled, release = s.stalled, s.release
	}
	s.mu.Unlock()
	if stall {
		close(stalled)
		<-release
	}
	return s.MemoryStore.PutAgent(ctx, a)
}

// TestReadsDoNotWaitOnAStalledWrite: while an agent's change is being
// written to a stalled store (its owner's mutex held), readers get the
// agent as last stored and announced, without the change in progress, and
// do not wait; once the write is through they see the change.
func TestReadsDoNotWaitOnAStalledWrite(t *testing.T) {
	st := &stallingStore{MemoryStore: NewMemoryStore()}
	b := newTestbed(t, func(c *Config) { c.Store = st })
	alice := b.newAgent("alice")
	b.join(b.sys.BaseTaskID(), alice)
	b.settle()
	before, _ := b.sys.Agent(alice) // a reader's copy of the current version

	st.stallNext(alice)
	b.sc.onText("held", func(ctx context.Context, _ *ExecInput) *Output { <-ctx.Done(); return &Output{} })
	injected := make(chan struct{})
	go func() {
		defer close(injected)
		b.inject(alice, b.sys.BaseTaskID(), b.sys.BaseStageID(), false, spec(SkillThink, "held"))
	}()
	<-st.stalled

	type result struct {
		agent  AgentState
		agents int
		briefs int
		tasks  int
	}
	got := make(chan result, 1)
	go func() {
		a, _ := b.sys.Agent(alice)
		got <- result{a, len(b.sys.Agents()), len(b.sys.AgentBriefs()), len(b.sys.Tasks())}
	}()
	var r result
	select {
	case r = <-got:
	case <-time.After(10 * time.Second): // a hang bound, not a timing assertion
		close(st.release)
		t.Fatal("reads waited for a stalled store write")
	}
	if len(r.agent.AgentStep.StepList) != len(before.AgentStep.StepList) {
		t.Errorf("a read during the stalled write shows %d steps, want the %d stored before it",
			len(r.agent.AgentStep.StepList), len(before.AgentStep.StepList))
	}
	if r.agents == 0 || r.briefs == 0 || r.tasks == 0 {
		t.Errorf("reads during the stalled write: %d agents, %d briefs, %d tasks", r.agents, r.briefs, r.tasks)
	}
	close(st.release)
	<-injected
	after, _ := b.sys.Agent(alice)
	if len(after.AgentStep.StepList) != len(before.AgentStep.StepList)+1 {
		t.Errorf("after the write: %d steps, want %d", len(after.AgentStep.StepList), len(before.AgentStep.StepList)+1)
	}
}
