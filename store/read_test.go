package store

import (
	"context"
	"strings"
	"testing"

	"github.com/mas-mcp/mas-mcp/engine"
)

// TestOversizedWriteRefusedAndReadBack: a document over the server's
// message limit is refused, and reading it back gives the version the
// store holds, which the next write builds on.
func TestOversizedWriteRefusedAndReadBack(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	defer s.Close()
	a := engine.AgentState{AgentID: "a1", Name: "alice", AgentStep: engine.AgentStep{AgentID: "a1",
		StepList: []engine.StepState{{StepID: "s1", ExecutionState: engine.StateRunning}}}}
	if err := s.PutAgent(ctx, &a); err != nil {
		t.Fatal(err)
	}
	big := a
	big.AgentStep.StepList = []engine.StepState{{StepID: "s1", ExecutionState: engine.StateFinished,
		ExecuteResult: map[string]any{"summary": strings.Repeat("x", 2<<20)}}}
	if err := s.PutAgent(ctx, &big); err == nil {
		t.Fatal("a 2 MiB document was stored")
	}
	got, err := s.ReadAgent(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if st := got.AgentStep.StepList[0]; st.ExecutionState != engine.StateRunning || st.ExecuteResult != nil {
		t.Fatalf("read back %+v, want the stored version", st)
	}
	got.AgentStep.StepList[0].ExecutionState = engine.StateFailed
	if err := s.PutAgent(ctx, &got); err != nil {
		t.Fatalf("the next write after a refusal: %v", err)
	}
	tk := sampleTask("t1")
	if err := s.PutTask(ctx, &tk); err != nil {
		t.Fatal(err)
	}
	rt, err := s.ReadTask(ctx, "t1")
	if err != nil || rt.TaskName != tk.TaskName || len(rt.SharedConversationPool) != 0 {
		t.Fatalf("ReadTask = %+v, %v: want the task without its conversation", rt, err)
	}
	if _, err := s.ReadAgent(ctx, "nobody"); err == nil {
		t.Error("reading an agent that was never stored succeeded")
	}
}
