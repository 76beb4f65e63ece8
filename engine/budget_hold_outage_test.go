package engine

import (
	"testing"
)

// TestRefusedBudgetHoldDuringAReportOutage: the step that reaches a task's
// budget has its report on its way to the task, and the store refuses the
// task's writes for a while. The hold (System.hold) must not be kept with
// the report and stored later with nobody paused (every later hold would
// then return at once, Held being set, and the task run past its budget):
// it takes the lock with lockDurable, fails before it changes anything, and
// holds the task at a later step once the store is back.
func TestRefusedBudgetHoldDuringAReportOutage(t *testing.T) {
	st := &refuseTaskStore{MemoryStore: NewMemoryStore()}
	b := newTestbed(t, func(c *Config) { c.Store = st; c.Budgets.AgentTokens = 250 })
	b.sc.onAgent("w", SkillPlanning, plan(spec(SkillThink, "t1"), spec(SkillThink, "t2"), spec(SkillThink, "t3"), spec(SkillThink, "t4"), spec(SkillThink, "t5")))
	b.sc.onSkill(SkillThink, costly)
	w := b.newAgent("w")
	id := b.newTask("budget", w)
	fromW := func(ts *TaskState) int {
		n := 0
		for _, si := range ts.SharedInfoPool {
			if si.AgentID == w {
				n++
			}
		}
		return n
	}
	// The documents holding the report of t3 (planning, t1, t2, t3: four
	// reports of w), the step that reaches the budget, are refused.
	st.refuseWhen(func(ts *TaskState) bool { return ts.TaskID == id && fromW(ts) >= 4 })
	b.addStages(id, StageSpec{StageIntention: "work", AgentAllocation: map[string]string{w: "the goal"}})
	// The fourth think step starts once the third's step path (its meter,
	// the hold) is done: the hold was tried while the store refused.
	b.waitFor("the fourth think step to start", func() bool { return len(b.sc.callsOf("w", SkillThink)) >= 4 })
	if stored, _ := st.Task(id); stored.Budget.Held != "" {
		t.Fatal("the store took the hold: the scenario did not arise")
	}
	st.refuseWhen(nil)
	b.waitFor("the task to be paused for its budget, or its stage to complete", func() bool {
		ts := b.task(id)
		return ts.Paused || ts.StageList[0].CompletionSummary[w] != ""
	})
	settleHeld(b)
	ts := b.task(id)
	if ts.Budget.Held != "" && !ts.Paused {
		t.Errorf("the task is stored held for its budget (%q) but not paused; %d think steps ran (3 reach the budget)",
			ts.Budget.Held, len(b.sc.callsOf("w", SkillThink)))
	}
	if got := len(b.sc.callsOf("w", SkillThink)); got > 4 {
		t.Errorf("%d think steps ran past a budget reached by the third", got)
	}
}
