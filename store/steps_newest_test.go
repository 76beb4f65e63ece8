package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/engine"
)

// TestRanNoticesLoadAsTheyEnded: a manager with many
// queued notices (waiting steps, chunked) runs them one after the other,
// as the engine does: each starts (back in the head), ends (stays in the
// head), and once chunkSteps of them ended they go to a new chunk. The
// chunks that held them while they waited still hold their other steps,
// so the head refers to both the old chunk (stale, waiting copy) and the
// new one (ended copy). Load and ReadAgent must rebuild the steps as they
// ended, not as they waited.
func TestRanNoticesLoadAsTheyEnded(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	put := putCopy(t, s)
	a := agentWithSteps(3, 100)
	for i := 3; i < len(a.AgentStep.StepList); i++ {
		a.AgentStep.StepList[i].TextContent = fmt.Sprintf("notice %03d %s", i, strings.Repeat("n", 1000))
	}
	put(a)
	at := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	for n := range chunkSteps {
		i := 3 + n
		st := &a.AgentStep.StepList[i]
		st.ExecutionState, st.StartedAt = engine.StateRunning, at
		a.AgentStep.TodoList = a.AgentStep.TodoList[1:]
		put(a)
		st.ExecutionState, st.FinishedAt = engine.StateFinished, at.Add(time.Second)
		st.ExecuteResult = map[string]any{"done": fmt.Sprint("notice ", i, " processed")}
		put(a)
	}
	_, chunks, loaded, read := stored(t, s)
	t.Logf("chunks after the run: %v", chunks)
	for i := 3; i < 3+chunkSteps; i++ {
		got := loaded.AgentStep.StepList[i]
		if got.ExecutionState != engine.StateFinished {
			t.Errorf("Load: step %s is %q (result %v), want finished: its stale waiting copy won",
				got.StepID, got.ExecutionState, got.ExecuteResult)
		}
	}
	same(t, "read back", read, a)
	same(t, "loaded", loaded, a)
}

// TestChangedStepChunkedAgainLoadsChanged: a chunked ended step the engine
// changes (bounds.go shortens it: a new map) goes back into the head; when
// it is chunked again with later steps, its old chunk (still holding
// others) and its new one both hold it. Load must give the changed step.
func TestChangedStepChunkedAgainLoadsChanged(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	put := putCopy(t, s)
	a := agentWithSteps(16, 0) // chunks a1.0 and a1.1
	put(a)
	a.AgentStep.StepList[0].ExecuteResult = map[string]any{"think": "shortened"}
	put(a) // e0 back in the head
	b := agentWithSteps(16+chunkSteps-1, 0)
	b.AgentStep.StepList = append(a.AgentStep.StepList, b.AgentStep.StepList[16:]...)
	put(b) // e0 and 7 new ended steps: a new chunk
	_, chunks, loaded, _ := stored(t, s)
	t.Logf("chunks: %v", chunks)
	if got := loaded.AgentStep.StepList[0].ExecuteResult["think"]; got != "shortened" {
		t.Errorf("Load: e0's result is %.20q…, want the changed one", got)
	}
	same(t, "loaded", loaded, b)
}

// putCopy puts an agent as the engine's commit does: with a copy of its
// step list each time.
func putCopy(t *testing.T, s *Store) func(engine.AgentState) {
	return func(a engine.AgentState) {
		t.Helper()
		a.AgentStep.StepList = append([]engine.StepState(nil), a.AgentStep.StepList...)
		if err := s.PutAgent(context.Background(), &a); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHeadStepsEncodedOnce: the steps an agent's head keeps are written
// apart from the agent (head_steps); a waiting or ended one is encoded
// once and its encoding used again while it is unchanged, and any change
// (a same-length text edit, a new result map) is written as it is now.
func TestHeadStepsEncodedOnce(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	defer s.Close()
	put := putCopy(t, s)
	a := agentWithSteps(2, 3) // e0, e1 ended, p0…p2 waiting: all in the head
	put(a)
	as := s.stepsOf("a1")
	as.mu.Lock()
	first, ok := as.enc["p1"]
	as.mu.Unlock()
	if !ok {
		t.Fatal("the waiting step's encoding was not kept")
	}
	put(a)
	as.mu.Lock()
	again := as.enc["p1"]
	as.mu.Unlock()
	if &again.b[0] != &first.b[0] {
		t.Error("the unchanged waiting step was encoded again")
	}

	a.AgentStep.StepList[3].TextContent = "abc"
	put(a)
	a.AgentStep.StepList[3].TextContent = "xyz" // the same length
	a.AgentStep.StepList[0].ExecuteResult = map[string]any{"think": "replaced"}
	put(a)
	read, err := s.ReadAgent(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	same(t, "read back", read, a)
	head, _, loaded, _ := stored(t, s)
	if len(head) != len(a.AgentStep.StepList) {
		t.Errorf("%d steps in the head, want %d", len(head), len(a.AgentStep.StepList))
	}
	same(t, "loaded", loaded, a)
}
