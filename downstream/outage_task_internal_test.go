package downstream

import (
	"strings"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
	"github.com/mas-mcp/mas-mcp/prompts"
)

// A whole MAS (the fake LLM, the engine, the skills) whose worker calls a
// remote MCP server that is down when its step calls it: the outage is
// waited out inside the step, on the pool's real clock, and seen by the
// agent's state and the operator's inbox.

// outageStack is a MAS whose worker makes calls of "srv" (a flakyServer).
type outageStack struct {
	*teststack.Stack
	worker, task string
}

func newOutageStack(t *testing.T, f *flakyServer, sc ServerConfig, calls ...scripted.Call) *outageStack {
	t.Helper()
	sc.URL = f.url
	set, err := prompts.Load("en", "")
	if err != nil {
		t.Fatal(err)
	}
	pool := NewPool(&Config{Servers: map[string]ServerConfig{"srv": sc}}, nil)
	exec, err := NewExecutor(ExecutorConfig{Pool: pool, Texts: set})
	if err != nil {
		t.Fatal(err)
	}
	user := &scripted.ToolUser{Calls: calls}
	st := teststack.New(t, teststack.Options{Handler: user.Handle, Tools: pool, ToolExecutor: exec})
	// Before the stack's leak check (cleanups run last-in first-out).
	t.Cleanup(f.close)
	t.Cleanup(func() { _ = pool.Close() })
	sys, op := st.Sys, st.Sys.OperatorID()
	w, err := sys.CreateAgent(engine.AgentConfig{Template: "researcher", Name: "worker", Tools: []string{"srv"}})
	if err != nil {
		t.Fatal(err)
	}
	task, err := sys.AddTask(op, engine.AddTaskRequest{TaskName: "tools", TaskIntention: "use the tools"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys.AgentInstruction(op, engine.AgentInstruction{Action: engine.ActionAddTaskParticipant, TaskID: task, Agents: []string{w}}); err != nil {
		t.Fatal(err)
	}
	if _, err := sys.TaskInstruction(op, engine.TaskInstruction{Action: engine.ActionAddStage, TaskID: task,
		Stages: []engine.StageSpec{{StageIntention: "use tools", AgentAllocation: map[string]string{w: "make the calls"}}}}); err != nil {
		t.Fatal(err)
	}
	return &outageStack{Stack: st, worker: w, task: task}
}

// waitingForServer reports whether the worker shows it waits for srv.
func (s *outageStack) waitingForServer() bool {
	a, _ := s.Sys.Agent(s.worker)
	return a.WorkingState == engine.WorkingWaiting && a.WaitingOn == engine.ToolOutage && strings.Contains(a.WaitingFor, `"srv"`)
}

// summarised reports whether the worker summarised its stage.
func (s *outageStack) summarised() bool {
	st := s.Task(s.task).StageList
	if len(st) == 0 {
		return false
	}
	_, done := st[0].CompletionSummary[s.worker]
	return done
}

// toolSteps returns the worker's tool steps.
func (s *outageStack) toolSteps() []engine.StepState {
	a, _ := s.Sys.Agent(s.worker)
	var out []engine.StepState
	for _, st := range a.AgentStep.StepList {
		if st.Type == engine.StepTool {
			out = append(out, st)
		}
	}
	return out
}

// notices returns the operator's inbox notices starting with prefix.
func (s *outageStack) notices(prefix string) []string {
	in, err := s.Sys.Inbox(s.Sys.OperatorID())
	if err != nil {
		s.T.Fatal(err)
	}
	var out []string
	for _, e := range in {
		if strings.HasPrefix(e.Content, prefix) {
			out = append(out, e.Content)
		}
	}
	return out
}

// checkNotices checks that the operator got one notice of each prefix,
// naming the server, and none about the LLM endpoint.
func (s *outageStack) checkNotices(t *testing.T, prefixes ...string) {
	t.Helper()
	for _, p := range prefixes {
		if got := s.notices(p); len(got) != 1 || !strings.Contains(got[0], `"srv"`) {
			t.Errorf("the operator got %d notices %q (%q); want one, naming the server", len(got), p, got)
		}
	}
	if got := s.notices("[LLM endpoint"); len(got) > 0 {
		t.Errorf("the operator got LLM endpoint notices about a tool server: %q", got)
	}
}

// TestToolServerDownInATaskIsWaitedOut: the server is down when the
// worker's step calls it; the worker shows it waits for the server, and
// the operator is told the server is down. Once it is back the call is
// made, the step finishes (it never failed: one tool step in all), and
// the operator is told the server is back.
func TestToolServerDownInATaskIsWaitedOut(t *testing.T) {
	f := newFlaky(t, 0)
	s := newOutageStack(t, f, ServerConfig{AutoApprove: []string{"append"}},
		scripted.Call{Server: "srv", Tool: "append", Args: map[string]any{}})
	s.WaitFor("the worker to show it waits for the server, and the operator to be told", func() bool {
		return s.waitingForServer() && len(s.notices("[MCP server unavailable]")) > 0
	})
	s.checkNotices(t, "[MCP server unavailable]")
	inc := f.up()
	s.WaitFor("the worker's summary", s.summarised)
	steps := s.toolSteps()
	if len(steps) != 1 || steps[0].ExecutionState != engine.StateFinished {
		t.Fatalf("tool steps %d, the first %s; want one, finished\n%s", len(steps), steps[0].ExecutionState, s.Dump())
	}
	if n := inc.calls.Load(); n != 1 {
		t.Errorf("the server got %d calls, want 1", n)
	}
	s.checkNotices(t, "[MCP server unavailable]", "[MCP server available]")
	if got := s.notices("[MCP server still unavailable]"); len(got) > 0 {
		t.Errorf("the operator was told the calls gave up: %q", got)
	}
	if a, _ := s.Sys.Agent(s.worker); a.WaitingFor != "" {
		t.Errorf("the worker still shows waiting_for %q", a.WaitingFor)
	}
}

// TestToolServerDownPastItsWindow: the server does not come back within
// its outage window (a second here): the step fails saying so, naming
// the server and the knob; the operator is told the server is down, then
// that the calls gave up; the worker carries on to its summary.
func TestToolServerDownPastItsWindow(t *testing.T) {
	f := newFlaky(t, 0)
	s := newOutageStack(t, f, ServerConfig{OutageWindow: Duration(time.Second)},
		scripted.Call{Server: "srv", Tool: "echo", Args: map[string]any{}})
	s.WaitFor("the worker's summary", s.summarised)
	steps := s.toolSteps()
	if len(steps) != 1 {
		t.Fatalf("tool steps %d; want one\n%s", len(steps), s.Dump())
	}
	e, _ := steps[0].ExecuteResult["error"].(string)
	for _, want := range []string{`mcp server "srv" could not be reached for 1s`, `"outageWindow"`} {
		if steps[0].ExecutionState != engine.StateFailed || !strings.Contains(e, want) {
			t.Errorf("the tool step is %s with error %q; want it failed saying %q", steps[0].ExecutionState, e, want)
		}
	}
	s.checkNotices(t, "[MCP server unavailable]", "[MCP server still unavailable]")
	if got := s.notices("[MCP server available]"); len(got) > 0 {
		t.Errorf("the operator was told the server is back: %q", got)
	}
}

// TestToolServerOutageEndsWithTheTask: the operator cancels the task while
// its worker's call waits for the server: the wait ends with the step, the
// worker no longer shows it waits, and the operator is not told the calls
// gave up.
func TestToolServerOutageEndsWithTheTask(t *testing.T) {
	f := newFlaky(t, 0)
	s := newOutageStack(t, f, ServerConfig{OutageWindow: Duration(time.Hour)},
		scripted.Call{Server: "srv", Tool: "echo", Args: map[string]any{}})
	s.WaitFor("the worker to show it waits for the server", s.waitingForServer)
	if _, err := s.Sys.TaskInstruction(s.Sys.OperatorID(), engine.TaskInstruction{Action: engine.ActionCancelTask, TaskID: s.task}); err != nil {
		t.Fatal(err)
	}
	s.WaitFor("the worker's call to end", func() bool {
		a, _ := s.Sys.Agent(s.worker)
		for _, st := range a.AgentStep.StepList {
			if st.ExecutionState == engine.StateRunning {
				return false
			}
		}
		return a.WaitingFor == ""
	})
	if got := s.notices("[MCP server still unavailable]"); len(got) > 0 {
		t.Errorf("after the task was cancelled the operator was told the calls gave up: %q", got)
	}
}
