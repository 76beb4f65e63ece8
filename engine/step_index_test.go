package engine

import (
	"fmt"
	"math/rand/v2"
	"reflect"
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

// sameMap reports whether m is still the map was (not made again).
func sameMap[K comparable, V any](m, was map[K]V) bool {
	return reflect.ValueOf(m).UnsafePointer() == reflect.ValueOf(was).UnsafePointer()
}

// listWithDuplicate is a restored agent of n steps whose list holds step
// "s0" twice, first ended, then queued again (a damaged document's).
func listWithDuplicate(t *testing.T, n int) *agent {
	t.Helper()
	a := looseAgent(bareSystem(t, nil), "dup")
	list := make([]StepState, 0, n+1)
	for i := range n {
		list = append(list, StepState{StepID: fmt.Sprint("s", i), TaskID: "t", StageID: "g", ExecutionState: StateFinished})
	}
	list = append(list, StepState{StepID: "s0", TaskID: "t", StageID: "g", ExecutionState: StateInit})
	a.st.AgentStep.StepList = list
	a.st.AgentStep.TodoList = []string{"s0"}
	return a
}

// TestDuplicateStepIDKeepsTheIndex: of an ID a damaged document lists
// twice, the first step is found, as the walk the index replaced found it,
// and the index is not made again at every lookup.
func TestDuplicateStepIDKeepsTheIndex(t *testing.T) {
	a := listWithDuplicate(t, 700)
	a.mu.Lock()
	defer a.mu.Unlock()
	if got := a.stepPosLocked("s0"); got != 0 {
		t.Errorf("step s0 (at 0 and 700) found at %d; want 0, the first", got)
	}
	index := a.stepIndex
	for _, i := range []int{350, 699, 1} {
		if got := a.stepPosLocked(fmt.Sprint("s", i)); got != i {
			t.Fatalf("s%d found at %d", i, got)
		}
	}
	if !sameMap(a.stepIndex, index) {
		t.Error("the index was made again by lookups in a list that did not change")
	}
}

// TestDuplicateReceivedIDKeepsTheIndex: a received ID a damaged document
// lists twice is kept once, and the index of received IDs is not made
// again at every message.
func TestDuplicateReceivedIDKeepsTheIndex(t *testing.T) {
	a := looseAgent(bareSystem(t, nil), "dup")
	for i := range 600 {
		a.st.Received = append(a.st.Received, fmt.Sprint("m", i))
	}
	a.st.Received = append(a.st.Received, "m0")
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.seenLocked("m1") {
		t.Fatal("m1 not seen")
	}
	index := a.received
	if !a.seenLocked("m300") || a.seenLocked("new") {
		t.Fatal("m300 not seen, or a new ID seen")
	}
	if !sameMap(a.received, index) {
		t.Error("the index of received IDs was made again at a message")
	}
	if n := len(a.st.Received); n != 601 {
		t.Errorf("%d received IDs; want the 600 distinct ones and the new one", n)
	}
}

// TestStepsQueuedNextKeepTheIndex: steps queued before the next one (a
// reply to a waiter, a released wait's process_message, add_next_step)
// and steps removed bring the index up to date from where they were, not
// by making a map of a manager's 700 steps again at the next lookup.
func TestStepsQueuedNextKeepTheIndex(t *testing.T) {
	a := looseAgent(bareSystem(t, nil), "x")
	a.mu.Lock()
	defer a.mu.Unlock()
	sp := []StepSpec{{StepIntention: "p", Type: StepSkill, Executor: SkillThink}}
	for i := range 700 {
		a.addStepsLocked("t", fmt.Sprint("g", i%7), sp, false, fmt.Sprint("init", i))
	}
	for i := range a.st.AgentStep.StepList[:698] {
		a.st.AgentStep.StepList[i].ExecutionState = StateFinished
	}
	a.st.AgentStep.TodoList = a.st.AgentStep.TodoList[698:]
	a.stepPosLocked(a.st.AgentStep.TodoList[0])
	index := a.stepIndex
	a.addStepsLocked("t", "g0", sp, true, "reply")
	next := a.st.AgentStep.TodoList[0]
	if got := a.stepPosLocked(next); got != 698 {
		t.Fatalf("the step queued next is found at %d; want 698", got)
	}
	a.removeStepsLocked(func(st *StepState) bool { return st.StageID == "g3" })
	for i := range a.st.AgentStep.StepList {
		if got := a.stepPosLocked(a.st.AgentStep.StepList[i].StepID); got != i {
			t.Fatalf("step %d found at %d after a removal", i, got)
		}
	}
	if !sameMap(a.stepIndex, index) {
		t.Error("the index was made again after steps were queued next or removed")
	}
}
