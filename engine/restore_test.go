package engine_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
)

// restartTest runs the scripted team's task, restarting the MAS (from its
// store, as after a crash: the step in flight stays running) when the
// LLM calls numbered in at arrive, while those calls hang. It returns the
// stack once the task has ended.
func restartTest(t *testing.T, at ...int) (*teststack.Stack, engine.TaskState) {
	t.Helper()
	team := scripted.NewTeam()
	var calls atomic.Int32
	restartNow := make(chan struct{}, len(at))
	handler := func(c *fakellm.Call) fakellm.Reply {
		n := int(calls.Add(1))
		if slices.Contains(at, n) {
			restartNow <- struct{}{}
			// Hang until the restart cancels this request.
			return fakellm.Reply{Content: "too late", Delay: time.Minute}
		}
		return team.Handle(c)
	}
	s := teststack.New(t, teststack.Options{Handler: handler})
	id, err := s.Sys.AddTask(s.Sys.OperatorID(), engine.AddTaskRequest{TaskName: "report", TaskIntention: "Research a topic and write a report."})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ended := func() bool {
		mu.Lock()
		defer mu.Unlock()
		st := s.Task(id).ExecutionState
		return st == engine.StateFinished || st == engine.StateFailed
	}
	for range at {
		select {
		case <-restartNow:
		case <-time.After(30 * time.Second):
			t.Fatalf("the task never reached the LLM call to restart at\n%s", s.Dump())
		}
		mu.Lock()
		s.Restart()
		mu.Unlock()
	}
	s.WaitFor("the task to end after the restarts", ended)
	if n := strings.Count(s.Logs.String(), "mas restored"); n != len(at) {
		t.Fatalf("%d restores logged, want %d", n, len(at))
	}
	return s, s.Task(id)
}

// checkOnce asserts that the restarts left no effect twice: each agent was
// created once, each question and answer logged once per stage, and each
// stage and completion summary exists once.
func checkOnce(t *testing.T, s *teststack.Stack, task engine.TaskState) {
	t.Helper()
	if task.ExecutionState != engine.StateFinished || task.TaskSummary != scripted.TaskSummary {
		t.Fatalf("task %s %q\n%s", task.ExecutionState, task.TaskSummary, s.Dump())
	}
	names := map[string]int{}
	for _, b := range s.Sys.AgentBriefs() {
		names[b.Name]++
	}
	for _, n := range []string{"alice", "bob", "manager", "operator"} {
		if names[n] != 1 {
			t.Errorf("%d agents named %s, want 1 (%v)", names[n], n, names)
		}
	}
	if len(task.StageList) != 2 {
		t.Fatalf("stages: %d, want 2", len(task.StageList))
	}
	seen := map[string]int{}
	for _, m := range task.SharedConversationPool {
		seen[m.MessageID]++
		if seen[m.MessageID] > 1 {
			t.Errorf("message %s logged twice", m.MessageID)
		}
	}
	for _, st := range task.StageList {
		if st.ExecutionState != engine.StateFinished || len(st.CompletionSummary) != 2 {
			t.Errorf("stage %s: %s, completions %v", st.StageID, st.ExecutionState, st.CompletionSummary)
		}
		for _, prefix := range []string{"QUESTION from alice", "QUESTION from bob", "ANSWER from alice", "ANSWER from bob"} {
			n := 0
			for _, m := range task.SharedConversationPool {
				if m.StageRelative == st.StageID && strings.HasPrefix(m.Message, prefix) {
					n++
				}
			}
			if n != 1 {
				t.Errorf("stage %s: %d messages %q, want 1", st.StageID, n, prefix)
			}
		}
	}
	for _, a := range s.Sys.Agents() {
		if len(a.StepLock) != 0 {
			t.Errorf("%s: step lock left engaged", a.Name)
		}
	}
}

// TestRestartDuringLLMCalls restarts the MAS while LLM calls are in flight
// (the manager's staffing, a worker's think, a message exchange): the
// interrupted steps run again and every effect appears once.
func TestRestartDuringLLMCalls(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   []int
	}{
		{"manager planning", []int{1}},
		{"while staffing", []int{4}},
		{"in stage one", []int{14}},
		{"three times", []int{6, 17, 30}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, task := restartTest(t, tc.at...)
			checkOnce(t, s, task)
		})
	}
}

// TestRestartEveryCall restarts after each of many LLM calls in turn, to
// catch a step whose re-run doubles an effect at any point of the flow.
func TestRestartEveryCall(t *testing.T) {
	if testing.Short() {
		t.Skip("long: restarts at every call of a whole task")
	}
	for n := 2; n <= 40; n += 3 {
		t.Run(fmt.Sprint("call", n), func(t *testing.T) {
			s, task := restartTest(t, n)
			checkOnce(t, s, task)
		})
	}
}
