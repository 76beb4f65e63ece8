package engine

import (
	"slices"
	"strings"
	"testing"
)

// TestBoundSizeFollowsAStepThatMovesBack: the size memo by position
// (agent.endedAt) is trusted whenever the step at a position has the ID
// the memo has there. A step can leave a position and come back to it:
// a step before it is cleaned up (it moves up), then a step is queued
// before it (queueLocked inserts before the next step to run, which a
// paused task's step can hold ahead of ended ones). If boundLocked
// shortened the step meanwhile, its size known at the old position must
// not be taken: the document would be estimated far over its bound while
// well under it, and boundLocked would shorten results of finished steps
// that nothing required shortening.
func TestBoundSizeFollowsAStepThatMovesBack(t *testing.T) {
	const limit = 40_000
	b := newTestbed(t, func(c *Config) { c.MaxDocumentBytes = limit })
	a := &agent{sys: b.sys, st: AgentState{AgentID: "x", Kind: KindLLM}}
	ended := func(id string, n int) StepState {
		return StepState{StepID: id, TaskID: "t", ExecutionState: StateFinished,
			ExecuteResult: map[string]any{"think": strings.Repeat("r", n)}}
	}
	other := func(id, state string, n int) StepState {
		return StepState{StepID: id, TaskID: "t", ExecutionState: state, TextContent: strings.Repeat("q", n)}
	}
	// fresh is the estimate of an agent that sized nothing before.
	fresh := func() int {
		f := &agent{sys: b.sys, st: a.st}
		return f.agentSizeLocked()
	}

	// 1. Under the bound: X (30 KB of result) is sized at position 1.
	a.st.AgentStep.StepList = []StepState{ended("Y", 10), ended("X", 30_000), other("R", StateRunning, 10)}
	a.boundLocked(false)
	if got := len(a.st.AgentStep.StepList[1].ExecuteResult["think"].(string)); got != 30_000 {
		t.Fatalf("X shortened to %d under the bound", got)
	}

	// 2. Y is cleaned up (X moves to 0) and a running step of 10 KB
	// passes the bound: X, the oldest finished step, is shortened.
	a.st.AgentStep.StepList = []StepState{a.st.AgentStep.StepList[1], a.st.AgentStep.StepList[2], other("Q", StateRunning, 10_000)}
	a.boundLocked(false)
	if got := len(a.st.AgentStep.StepList[0].ExecuteResult["think"].(string)); got > 1000 {
		t.Fatalf("X not shortened over the bound (%d)", got)
	}

	// 3. Q is cleaned up and a step Z is queued before X (X is back at
	// position 1); Z runs and ends with a 12 KB result.
	list := slices.DeleteFunc(slices.Clone(a.st.AgentStep.StepList), func(st StepState) bool { return st.StepID == "Q" })
	list = slices.Insert(list, 0, other("Z", StateInit, 10))
	list[0] = ended("Z", 12_000)
	a.st.AgentStep.StepList = list

	if got, want := a.agentSizeLocked(), fresh(); got != want {
		t.Errorf("the document is estimated at %d bytes; sized afresh, %d (X's memo at position 1 is from before it was shortened)", got, want)
	}
	under := fresh()
	if under > limit-limit/4 {
		t.Fatalf("test setup: the document (%d) is not under the bound", under)
	}
	a.boundLocked(false)
	if got := len(a.st.AgentStep.StepList[0].ExecuteResult["think"].(string)); got != 12_000 {
		t.Errorf("Z's result was shortened to %d characters though the document (%d bytes sized afresh) is under its bound of %d", got, under, limit)
	}
}

// TestSnapshotReuseUnderSystemReaders: an agent with a store commits
// step after step (each commit copies its list into a retired snapshot's
// array when no reader is counted) while clients read it through every
// reader the System has (Agent, Agents, AgentFor, AgentBriefs): under the
// race detector no read overlaps a reuse, and every snapshot read is
// whole (its steps' IDs distinct, each queued step in its list).
func TestSnapshotReuseUnderSystemReaders(t *testing.T) {
	st := NewMemoryStore()
	b := newTestbed(t, func(c *Config) { c.Store = st })
	alice := b.newAgent("alice")
	b.join(b.sys.BaseTaskID(), alice)
	const n = 150
	var specs []StepSpec
	for i := range n {
		specs = append(specs, spec(SkillThink, strings.Repeat("s", i%7)))
	}
	ids := b.inject(alice, b.sys.BaseTaskID(), b.sys.BaseStageID(), false, specs...)
	last := ids[len(ids)-1]
	check := func(a AgentState) string {
		seen := map[string]bool{}
		for _, s := range a.AgentStep.StepList {
			if seen[s.StepID] {
				return "step " + s.StepID + " twice"
			}
			seen[s.StepID] = true
		}
		for _, id := range a.AgentStep.TodoList {
			if !seen[id] {
				return "queued step " + id + " not in the list"
			}
		}
		return ""
	}
	done := make(chan struct{})
	bad := make(chan string, 1)
	var readers []chan struct{}
	for r := range 3 {
		stopped := make(chan struct{})
		readers = append(readers, stopped)
		go func() {
			defer close(stopped)
			for {
				select {
				case <-done:
					return
				default:
				}
				var got []AgentState
				switch r {
				case 0:
					a, _ := b.sys.Agent(alice)
					got = append(got, a)
				case 1:
					got = b.sys.Agents()
					_ = b.sys.AgentBriefs()
				case 2:
					a, _ := b.sys.AgentFor(b.op(), alice)
					got = append(got, a)
				}
				for _, a := range got {
					if msg := check(a); msg != "" {
						select {
						case bad <- msg:
						default:
						}
					}
				}
			}
		}()
	}
	b.waitFor("the last step to end", func() bool { return b.stepDone(alice, last) })
	close(done)
	for _, r := range readers {
		<-r
	}
	select {
	case msg := <-bad:
		t.Fatalf("a reader saw a torn snapshot: %s", msg)
	default:
	}
	a, _ := st.Agent(alice)
	if msg := check(a); msg != "" {
		t.Fatalf("stored: %s", msg)
	}
}
