package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
)

// onceRefuseAgentStore refuses, once each, the first write of an agent
// document in which a step whose text is listed has ended.
type onceRefuseAgentStore struct {
	*MemoryStore
	mu    sync.Mutex
	texts map[string]bool // text -> refused already
}

func (s *onceRefuseAgentStore) PutAgent(ctx context.Context, a *AgentState) error {
	s.mu.Lock()
	for _, st := range a.AgentStep.StepList {
		if done, ok := s.texts[st.TextContent]; ok && !done && st.ended() {
			s.texts[st.TextContent] = true
			s.mu.Unlock()
			return errStoreDown
		}
	}
	s.mu.Unlock()
	return s.MemoryStore.PutAgent(ctx, a)
}

// TestWithdrawnWritesDoNotBringBackStoredReports: reportStored drops a
// report its task stored from the agent's memory without a write, so the
// agent's stored document keeps it a while. A refused write of the agent,
// withdrawn, takes that document back (restoreLocked) but not its reports:
// those a task stored stay dropped, and the reports stay bounded by the one
// on its way.
func TestWithdrawnWritesDoNotBringBackStoredReports(t *testing.T) {
	const rounds = 4
	st := &onceRefuseAgentStore{MemoryStore: NewMemoryStore(), texts: map[string]bool{}}
	var plan []StepSpec
	for i := range 2 * rounds {
		text := fmt.Sprint("s", i)
		plan = append(plan, spec(SkillThink, text))
		if i%2 == 1 {
			st.texts[text] = false
		}
	}
	b := newTestbed(t, func(c *Config) { c.Store = st })
	alice := b.newAgent("alice")
	b.sc.onAgent("alice", SkillPlanning, func(context.Context, *ExecInput) *Output {
		return &Output{AddSteps: plan}
	})
	id := b.newTask("report", alice)
	b.addStages(id, StageSpec{StageIntention: "collect", AgentAllocation: map[string]string{alice: "collect facts"}})
	b.waitFor("the stage to complete", func() bool { return b.task(id).StageList[0].CompletionSummary[alice] != "" })
	b.settle()
	pool := b.task(id).SharedInfoPool
	var stale []string
	a, _ := b.sys.agent(alice)
	a.mu.Lock()
	mem := slices.Clone(a.st.Reports)
	a.mu.Unlock()
	for _, r := range mem {
		if slices.ContainsFunc(pool, func(si SharedInfo) bool { return si.StepID == r.StepID }) {
			stale = append(stale, r.StepID)
		}
	}
	if len(stale) > 0 {
		t.Errorf("alice's outbox (in memory, written with her next write) keeps %d reports her task stored long ago (after %d withdrawn writes): %v", len(stale), rounds, stale)
	}
}
