package downstream_test

import (
	"strings"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/downstream"
	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
)

// The operator cancels a task while one of its tool calls hangs in a
// downstream server. The server learns of it (its handler's context is
// cancelled by notifications/cancelled), the worker drops the step and
// goes idle, and the trail keeps the call, failed with the cancellation.
// (Interrupt and cancel_step have TestOperatorStopsARunningToolCall.)
// TestMain's goleak checks that nothing is left running.
func TestCancelTaskCancelsTheDownstreamCall(t *testing.T) {
	f := newFixture(t, false)
	trail := engine.NewMemoryTrail()
	cfg := &downstream.Config{Servers: map[string]downstream.ServerConfig{"fixture": fixtureConfig(t, f)}}
	s := newToolStackWith(t, cfg, []scripted.Call{{Server: "fixture", Tool: "hang", Args: map[string]any{}}}, stackOptions{trail: trail})
	w, task, running := s.hangingCall(t, f)
	if _, err := s.Sys.TaskInstruction(s.Sys.OperatorID(), engine.TaskInstruction{Action: engine.ActionCancelTask, TaskID: task, Summary: "stop"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.cancelled:
	case <-time.After(time.Minute):
		t.Fatal("the downstream server never learned the call was cancelled")
	}
	s.WaitFor("the worker idle without steps of the task", func() bool {
		a, _ := s.Sys.Agent(w)
		for _, st := range a.AgentStep.StepList {
			if st.TaskID == task {
				return false
			}
		}
		return a.WorkingState == engine.WorkingIdle
	})
	s.WaitFor("the call in the trail", func() bool {
		for _, e := range trail.All() {
			if e.StepID == running && e.Kind == engine.TrailKindToolCall && e.Tool != nil && strings.Contains(e.Tool.Error, "context canceled") {
				return true
			}
		}
		return false
	})
}
