package engine

import (
	"sync/atomic"
	"testing"
)

// TestRefusedMeterChangeIsKept: the store refuses, once, the task's write
// that carries a step's usage alone (the meter's change, with no report on
// its way). The usage must be kept and stored with a later write, not
// withdrawn: a budget that forgets what was spent during an outage lets
// its task run past it.
func TestRefusedMeterChangeIsKept(t *testing.T) {
	st := &refuseTaskStore{MemoryStore: NewMemoryStore()}
	b := newTestbed(t, func(c *Config) { c.Store = st; c.Budgets.AgentTokens = 1_000_000 })
	w := b.newAgent("w")
	id := b.newTask("meter", w)
	settleHeld(b)
	var refused atomic.Int32
	st.refuseWhen(func(ts *TaskState) bool {
		return ts.TaskID == id && ts.Budget.AgentUsed[w] > 0 && refused.CompareAndSwap(0, 1)
	})
	task, _ := b.sys.task(id)
	step := &StepState{TaskID: id, StepID: "s1", AgentID: w}
	b.sys.meter(w, step, &AgentState{}, &Output{Usage: Usage{Calls: 1, PromptTokens: 80, CompletionTokens: 20, TotalTokens: 100}})
	if refused.Load() == 0 {
		t.Fatal("the meter's write was not refused: the scenario did not arise")
	}
	task.mu.lockToRead()
	live := task.st.Budget.AgentUsed[w]
	task.mu.unlockRead()
	if live != 100 {
		t.Fatalf("after the refusal the task counts %d tokens used by w, want 100: the usage was withdrawn", live)
	}
	b.waitFor("the usage to be stored", func() bool {
		stored, _ := st.Task(id)
		return stored.Budget.AgentUsed[w] == 100
	})
}
