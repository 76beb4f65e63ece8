package engine_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
)

// endpoint is an LLM endpoint that is down until it is brought back, with
// a probe that says so.
type endpoint struct {
	down   atomic.Bool
	probes atomic.Int32 // probes that found it answering
	team   *scripted.Team
}

func newEndpoint() *endpoint {
	e := &endpoint{team: scripted.NewTeam()}
	e.down.Store(true)
	return e
}

func (e *endpoint) handle(c *fakellm.Call) fakellm.Reply {
	if e.down.Load() {
		return fakellm.Reply{Status: 503, Content: "overloaded"}
	}
	return e.team.Handle(c)
}

func (e *endpoint) probe(context.Context) error {
	if e.down.Load() {
		return errors.New("503 overloaded")
	}
	e.probes.Add(1)
	return nil
}

// options is a stack whose calls give up on the endpoint quickly and whose
// probe asks often.
func (e *endpoint) options() teststack.Options {
	return teststack.Options{Handler: e.handle, OutageWindow: 100 * time.Millisecond, ProbeLLM: e.probe, ProbeInterval: 5 * time.Millisecond}
}

// pausedForOutage waits until the task is paused for the outage and its
// operator was told.
func pausedForOutage(t *testing.T, s *teststack.Stack, id string) {
	t.Helper()
	s.WaitFor("the task to be paused for the outage", func() bool {
		task := s.Task(id)
		return task.Paused && task.PausedFor == "llm_outage" && count(inbox(t, s), "[Task paused: LLM endpoint unavailable]") == 1
	})
	for _, a := range s.Sys.Agents() {
		for _, st := range a.AgentStep.StepList {
			if st.TaskID == id && st.ExecutionState == engine.StateFailed {
				t.Errorf("agent %s's step %s (%s) failed during the outage: %v", a.Name, st.StepID, st.Executor, st.ExecuteResult)
			}
		}
	}
}

// TestOutageLongerThanTheWindowPausesTheTask: outages pause, not destroy.
// A step whose LLM call waited out the whole outage window is kept to run
// again and its task is paused, its operator told; the pause survives a
// restart, and the task resumes by itself when the endpoint answers again
// and finishes as if nothing had happened.
func TestOutageLongerThanTheWindowPausesTheTask(t *testing.T) {
	e := newEndpoint()
	s := teststack.New(t, e.options())
	id, err := s.Sys.AddTask(s.Sys.OperatorID(), engine.AddTaskRequest{TaskName: "report", TaskIntention: "Research a topic and write a report."})
	if err != nil {
		t.Fatal(err)
	}
	pausedForOutage(t, s, id)
	// Told the calls wait, the operator is told they stopped waiting (a
	// slow machine can spend the 100 ms window in the quick retries,
	// before any call waits: then neither is said).
	if in := inbox(t, s); count(in, "[LLM endpoint unavailable]") > 0 && count(in, "[LLM endpoint still unavailable]") == 0 {
		t.Errorf("the operator was not told the calls stopped waiting:\n%s", strings.Join(in, "\n"))
	}
	s.Restart()
	e.down.Store(false)
	s.WaitFor("the task to end", ended(s, id))
	task := s.Task(id)
	if task.ExecutionState != engine.StateFinished || task.TaskSummary != scripted.TaskSummary {
		t.Fatalf("task %s %q, want finished with the scripted summary\n%s", task.ExecutionState, task.TaskSummary, s.Dump())
	}
	if task.Paused || task.PausedFor != "" {
		t.Errorf("task still reads paused=%v for %q", task.Paused, task.PausedFor)
	}
	s.WaitFor("the operator to learn the task resumed", func() bool {
		return count(inbox(t, s), "[Task resumed: LLM endpoint available]") == 1
	})
}

// TestOperatorPauseOutlastsTheOutage: an operator who pauses a task the
// MAS paused for an outage makes the pause its own: the endpoint's probe
// stops (nothing is paused for the outage), and the task stays paused
// until the operator resumes it.
func TestOperatorPauseOutlastsTheOutage(t *testing.T) {
	e := newEndpoint()
	s := teststack.New(t, e.options())
	op := s.Sys.OperatorID()
	id, err := s.Sys.AddTask(op, engine.AddTaskRequest{TaskName: "report", TaskIntention: "Research a topic and write a report."})
	if err != nil {
		t.Fatal(err)
	}
	pausedForOutage(t, s, id)
	if _, err := s.Sys.TaskInstruction(op, engine.TaskInstruction{Action: engine.ActionPauseTask, TaskID: id}); err != nil {
		t.Fatal(err)
	}
	if task := s.Task(id); !task.Paused || task.PausedFor != "" {
		t.Fatalf("after the operator's pause: paused=%v for %q, want paused for no reason of the MAS", task.Paused, task.PausedFor)
	}
	// Nothing is paused for the outage any more: the probe stops, and the
	// endpoint's return does not resume the task.
	s.WaitFor("the probe to stop", func() bool { return strings.Contains(s.Logs.String(), "LLM endpoint probe stops") })
	e.down.Store(false)
	if task := s.Task(id); !task.Paused {
		t.Fatalf("the endpoint's return resumed a task its operator paused\n%s", s.Dump())
	}
	if _, err := s.Sys.TaskInstruction(op, engine.TaskInstruction{Action: engine.ActionResumeTask, TaskID: id}); err != nil {
		t.Fatal(err)
	}
	s.WaitFor("the task to end", ended(s, id))
	if task := s.Task(id); task.ExecutionState != engine.StateFinished {
		t.Fatalf("task %s %q\n%s", task.ExecutionState, task.TaskSummary, s.Dump())
	}
	if n := count(inbox(t, s), "[Task resumed: LLM endpoint available]"); n != 0 {
		t.Errorf("%d notices say the endpoint resumed the task; the operator did", n)
	}
}

// TestOutageHoldsTheBaseTask: the base task cannot be paused, but its steps
// are not failed by an outage longer than the window either: they are held
// (an operator's message to an agent outside tasks among them), the
// operator told, and they run once the endpoint answers again.
func TestOutageHoldsTheBaseTask(t *testing.T) {
	e := newEndpoint()
	s := teststack.New(t, e.options())
	op, base := s.Sys.OperatorID(), s.Sys.BaseTaskID()
	mgr := s.Sys.ManagerID()
	if _, err := s.Sys.HumanSend(op, engine.HumanMessage{TaskID: base, Receiver: []string{mgr}, Content: "What can you do?"}); err != nil {
		t.Fatal(err)
	}
	s.WaitFor("the base task to be held", func() bool {
		return count(inbox(t, s), "[Base task held: LLM endpoint unavailable]") == 1
	})
	digested := func(state string) int {
		n := 0
		for _, a := range s.Sys.Agents() {
			for _, st := range a.AgentStep.StepList {
				if a.AgentID == mgr && st.TaskID == base && st.Executor == engine.SkillProcessMessage && st.ExecutionState == state {
					n++
				}
			}
		}
		return n
	}
	if n := digested(engine.StateFailed); n != 0 {
		t.Fatalf("%d of the manager's process_message steps failed in the outage\n%s", n, s.Dump())
	}
	e.down.Store(false)
	s.WaitFor("the operator's message digested", func() bool { return digested(engine.StateFinished) == 1 })
	if n := digested(engine.StateFailed); n != 0 {
		t.Errorf("%d of the manager's process_message steps failed\n%s", n, s.Dump())
	}
}
