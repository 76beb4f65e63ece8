package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestStepIndexFollowsTheList adds steps at the end and before the next
// one, removes some from anywhere and restores the agent, at random, and
// after each change looks up every step the list has, and some it does
// not, through the index (stepPosLocked), against a walk of the list.
func TestStepIndexFollowsTheList(t *testing.T) {
	b := newTestbed(t, nil)
	a := newAgentOwner(b.sys, AgentState{AgentID: "x", Kind: KindLLM, WorkingMemory: map[string]map[string][]string{}})
	a.mu.Lock()
	defer a.mu.Unlock()
	rng := rand.New(rand.NewPCG(13, 2026))
	var gone []string
	check := func(round int, what string) {
		t.Helper()
		list := a.st.AgentStep.StepList
		for i := range list {
			if got := a.stepPosLocked(list[i].StepID); got != i {
				t.Fatalf("round %d (%s): step %s is at %d; the index says %d", round, what, list[i].StepID, i, got)
			}
		}
		for _, id := range gone {
			if got := a.stepPosLocked(id); got >= 0 {
				t.Fatalf("round %d (%s): removed step %s found at %d", round, what, id, got)
			}
		}
	}
	spec := func(k int) []StepSpec {
		s := make([]StepSpec, k)
		for i := range s {
			s[i] = StepSpec{StepIntention: "think", Type: StepSkill, Executor: SkillThink}
		}
		return s
	}
	for round := range 400 {
		var what string
		switch r := rng.IntN(10); {
		case r < 4:
			what = "added at the end"
			a.addStepsLocked("t", fmt.Sprint("s", rng.IntN(3)), spec(1+rng.IntN(3)), false, fmt.Sprint("o", round))
		case r < 6:
			what = "added before the next"
			a.addStepsLocked("t", fmt.Sprint("s", rng.IntN(3)), spec(1+rng.IntN(3)), true, fmt.Sprint("o", round))
		case r < 8:
			what = "removed, then as many added"
			stage := fmt.Sprint("s", rng.IntN(3))
			n := len(a.st.AgentStep.StepList)
			for _, st := range a.st.AgentStep.StepList {
				if st.StageID == stage {
					gone = append(gone, st.StepID)
				}
			}
			removed := a.removeStepsLocked(func(st *StepState) bool { return st.StageID == stage })
			if removed > 0 {
				// No origin: nothing is looked up before they are added.
				a.addStepsLocked("t", stage, spec(removed), false, "")
			}
			if got := len(a.st.AgentStep.StepList); got != n {
				t.Fatalf("round %d: %d steps after removing and adding %d; want %d", round, got, removed, n)
			}
		case r < 9:
			what = "a step ended"
			if todo := a.st.AgentStep.TodoList; len(todo) > 0 {
				a.finishStepLocked(todo[rng.IntN(len(todo))], StateFinished, map[string]any{"ok": true}, nil)
			}
		default:
			what = "restored"
			got := a.st.clone()
			got.AgentStep.StepList = slices.Clone(got.AgentStep.StepList)
			a.restoreLocked(got)
		}
		check(round, what)
	}
	if len(a.st.AgentStep.StepList) < 10 || len(gone) < 10 {
		t.Fatalf("%d steps, %d removed: the test did not reach what it tests", len(a.st.AgentStep.StepList), len(gone))
	}
}
