package engine_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
)

// inbox returns the texts in the default operator's inbox.
func inbox(t *testing.T, s *teststack.Stack) []string {
	t.Helper()
	in, err := s.Sys.Inbox(s.Sys.OperatorID())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range in {
		out = append(out, e.Content)
	}
	return out
}

// count counts the texts holding sub.
func count(texts []string, sub string) int {
	n := 0
	for _, s := range texts {
		if strings.Contains(s, sub) {
			n++
		}
	}
	return n
}

func ended(s *teststack.Stack, id string) func() bool {
	return func() bool {
		st := s.Task(id).ExecutionState
		return st == engine.StateFinished || st == engine.StateFailed
	}
}

// TestRefusedKeyFailsTheTask: a wrong API key is not retried, fails a
// task its manager cannot start with the cause in plain words, is logged
// at error level once, and reaches the operator's inbox once.
func TestRefusedKeyFailsTheTask(t *testing.T) {
	var calls atomic.Int32
	s := teststack.New(t, teststack.Options{Handler: func(*fakellm.Call) fakellm.Reply {
		calls.Add(1)
		return fakellm.Reply{Status: 401, Content: "Incorrect API key provided: sk-SENT***********4242"}
	}})
	var ids []string
	for _, name := range []string{"first", "second"} {
		id, err := s.Sys.AddTask(s.Sys.OperatorID(), engine.AddTaskRequest{TaskName: name, TaskIntention: "do " + name})
		if err != nil {
			t.Fatal(err)
		}
		s.WaitFor("the task to end", ended(s, id))
		ids = append(ids, id)
	}
	for _, id := range ids {
		task := s.Task(id)
		if task.ExecutionState != engine.StateFailed || !strings.Contains(task.TaskSummary, "the LLM endpoint refused the API key (HTTP 401)") {
			t.Errorf("task %s %q: want failed, naming the refused key", task.ExecutionState, task.TaskSummary)
		}
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d LLM requests, want 2: a refusal is not retried and no further step is tried", n)
	}
	logs := s.Logs.String()
	if n := strings.Count(logs, "LLM endpoint refuses requests"); n != 1 {
		t.Errorf("the refusal was logged %d times, want once per cause", n)
	}
	if !strings.Contains(logs, "level=ERROR msg=\"LLM endpoint refuses requests") {
		t.Error("the refusal is not logged at error level")
	}
	s.WaitFor("the operator's notices", func() bool { return count(inbox(t, s), "has been marked failed") == 2 })
	in := inbox(t, s)
	if n := count(in, "[LLM endpoint refuses requests]"); n != 1 {
		t.Errorf("%d refusal notices in the inbox, want 1:\n%s", n, strings.Join(in, "\n"))
	}
}

// TestOutagePausesWork: the endpoint answers 503 at the start of a task
// and again in its middle, each time until the operator was told; the
// task finishes, no step fails, and the operator saw both ends of both
// outages.
func TestOutagePausesWork(t *testing.T) {
	team := scripted.NewTeam()
	var down atomic.Bool
	var aliceSeen atomic.Bool
	down.Store(true)
	handler := func(c *fakellm.Call) fakellm.Reply {
		if c.AgentName == "alice" && !aliceSeen.Swap(true) {
			down.Store(true) // the second outage, mid-task
		}
		if down.Load() {
			return fakellm.Reply{Status: 503, Content: "overloaded"}
		}
		return team.Handle(c)
	}
	s := teststack.New(t, teststack.Options{Handler: handler, OutageWindow: time.Hour})
	id, err := s.Sys.AddTask(s.Sys.OperatorID(), engine.AddTaskRequest{TaskName: "report", TaskIntention: "Research a topic and write a report."})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		s.WaitFor("the operator to learn of the outage", func() bool { return count(inbox(t, s), "[LLM endpoint unavailable]") == i })
		// Whoever waits shows it.
		waiting := false
		for _, a := range s.Sys.Agents() {
			if a.WorkingState == engine.WorkingWaiting && strings.Contains(a.WaitingFor, "unavailable since") {
				waiting = true
			}
		}
		if !waiting {
			t.Errorf("outage %d: no agent shows that it waits for the endpoint\n%s", i, s.Dump())
		}
		down.Store(false)
		s.WaitFor("the operator to learn the endpoint is back", func() bool { return count(inbox(t, s), "[LLM endpoint available]") == i })
	}
	s.WaitFor("the task to end", ended(s, id))
	task := s.Task(id)
	if task.ExecutionState != engine.StateFinished || task.TaskSummary != scripted.TaskSummary {
		t.Fatalf("task %s %q\n%s", task.ExecutionState, task.TaskSummary, s.Dump())
	}
	for _, si := range task.SharedInfoPool {
		if strings.Contains(si.Content, " failed") {
			t.Errorf("a step failed during the outage: %s", si.Content)
		}
	}
	for _, a := range s.Sys.Agents() {
		if a.WaitingFor != "" {
			t.Errorf("agent %s still shows %q", a.Name, a.WaitingFor)
		}
	}
}
