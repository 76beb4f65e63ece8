package downstream_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mas-mcp/mas-mcp/downstream"
	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
	"github.com/mas-mcp/mas-mcp/prompts"
)

// serverBin is the path of an installed npm MCP server's executable. make
// test installs them from testdata/servers/package-lock.json.
func serverBin(t testing.TB, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", "servers", "node_modules", ".bin", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is not installed: run `make test` (it runs npm ci in downstream/testdata/servers): %v", name, err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node is not installed: %v", err)
	}
	return p
}

// toolStack is a MAS whose agents reach the configured servers.
type toolStack struct {
	*teststack.Stack
	pool *downstream.Pool
	user *scripted.ToolUser
}

func newToolStack(t *testing.T, cfg *downstream.Config, calls []scripted.Call) *toolStack {
	t.Helper()
	return newToolStackWith(t, cfg, calls, stackOptions{})
}

// stackOptions tune a toolStack; zero values mean the defaults.
type stackOptions struct {
	// executor adjusts the executor's configuration (Pool and Texts are
	// set already).
	executor func(*downstream.ExecutorConfig)
	// handler wraps the ToolUser's LLM handler (to act between steps).
	handler func(next func(*fakellm.Call) fakellm.Reply) func(*fakellm.Call) fakellm.Reply
}

func newToolStackWith(t *testing.T, cfg *downstream.Config, calls []scripted.Call, o stackOptions) *toolStack {
	t.Helper()
	user := &scripted.ToolUser{Calls: calls}
	set, err := prompts.Load("en", "")
	if err != nil {
		t.Fatal(err)
	}
	handler := user.Handle
	if o.handler != nil {
		handler = o.handler(user.Handle)
	}
	pool := downstream.NewPool(cfg, nil)
	ec := downstream.ExecutorConfig{Pool: pool, Texts: set}
	if o.executor != nil {
		o.executor(&ec)
	}
	exec, err := downstream.NewExecutor(ec)
	if err != nil {
		t.Fatal(err)
	}
	st := teststack.New(t, teststack.Options{Handler: handler, Tools: pool, ToolExecutor: exec})
	// After the MAS (cleanups run last-in first-out): stop the servers.
	t.Cleanup(func() { _ = pool.Close() })
	return &toolStack{Stack: st, pool: pool, user: user}
}

// runWorker creates a worker with the given tools, gives it a one-stage
// task and waits until it has summarised; it returns the worker's ID.
func (s *toolStack) runWorker(t *testing.T, tools ...string) string {
	t.Helper()
	w, task := s.startWorker(t, tools...)
	s.waitSummary(w, task)
	return w
}

// startWorker creates a worker with the given tools and gives it a
// one-stage task; it returns the worker's and the task's IDs.
func (s *toolStack) startWorker(t *testing.T, tools ...string) (w, task string) {
	t.Helper()
	sys := s.Sys
	w, err := sys.CreateAgent(engine.AgentConfig{Template: "researcher", Name: "worker", Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	op := sys.OperatorID()
	task, err = sys.AddTask(op, engine.AddTaskRequest{TaskName: "tools", TaskIntention: "use the tools"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys.AgentInstruction(op, engine.AgentInstruction{Action: "add_task_participant", TaskID: task, Agents: []string{w}}); err != nil {
		t.Fatal(err)
	}
	if _, err := sys.TaskInstruction(op, engine.TaskInstruction{Action: "add_stage", TaskID: task,
		Stages: []engine.StageSpec{{StageIntention: "use tools", AgentAllocation: map[string]string{w: "make the calls"}}}}); err != nil {
		t.Fatal(err)
	}
	return w, task
}

// waitSummary waits until the worker has summarised its stage of the task.
func (s *toolStack) waitSummary(w, task string) {
	s.T.Helper()
	s.WaitFor("the worker's summary", func() bool {
		st := s.Task(task).StageList[0]
		_, done := st.CompletionSummary[w]
		return done
	})
}

// toolSteps returns the worker's tool steps, in order.
func (s *toolStack) toolSteps(w string) []engine.StepState {
	a, _ := s.Sys.Agent(w)
	var out []engine.StepState
	for _, st := range a.AgentStep.StepList {
		if st.Type == engine.StepTool {
			out = append(out, st)
		}
	}
	return out
}

func TestFilesystemWriteAndReadBack(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "out.txt")
	cfg := &downstream.Config{Servers: map[string]downstream.ServerConfig{
		"filesystem": {Command: serverBin(t, "mcp-server-filesystem"), Args: []string{dir}, Description: "Files under the work directory.",
			// write_file is destructive: without this it would wait for the operator.
			AutoApprove: []string{"write_file"}},
	}}
	s := newToolStack(t, cfg, []scripted.Call{
		{Server: "filesystem", Describe: true},
		{Server: "filesystem", Tool: "write_file", Args: map[string]any{"path": file, "content": "hello from an agent"}},
		{Server: "filesystem", Tool: "read_text_file", Args: map[string]any{"path": file}},
	})
	w := s.runWorker(t, "filesystem")

	got, err := os.ReadFile(file)
	if err != nil || string(got) != "hello from an agent" {
		t.Fatalf("file on disk: %q, %v", got, err)
	}
	steps := s.toolSteps(w)
	if len(steps) != 3 {
		t.Fatalf("tool steps: %d, want 3\n%s", len(steps), s.Dump())
	}
	for i, st := range steps {
		if st.ExecutionState != engine.StateFinished {
			t.Errorf("tool step %d: %s: %v", i, st.ExecutionState, st.ExecuteResult["error"])
		}
	}
	caps, _ := steps[0].ExecuteResult["capabilities_list_description"].(map[string]any)
	if tools, _ := caps["tools"].(map[string]any); tools["write_file"] == nil {
		t.Errorf("capabilities_list_description lacks write_file: %v", caps)
	}
	res := steps[2].ExecuteResult["mcp_server_result"]
	if !strings.Contains(jsonString(res), "hello from an agent") {
		t.Errorf("read_text_file result = %v", res)
	}
	if n := len(s.user.Decisions()); n != 3 {
		t.Errorf("tool_decision steps: %d, want one after each call", n)
	}
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
