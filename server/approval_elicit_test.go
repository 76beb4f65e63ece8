package server_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/downstream"
	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
	"github.com/mas-mcp/mas-mcp/prompts"
	"github.com/mas-mcp/mas-mcp/server"
)

// TestApprovalByElicitation: the risk gate's question also goes to the
// operator's own MCP client as an elicitation form; the answer of the
// client's elicitation handler decides (approve runs the call, deny
// refuses it with the note), and the inbox's copy stops awaiting a reply.
func TestApprovalByElicitation(t *testing.T) {
	bin, err := filepath.Abs(filepath.Join("..", "downstream", "testdata", "servers", "node_modules", ".bin", "mcp-server-filesystem"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("mcp-server-filesystem is not installed (make deps): %v", err)
	}
	for _, approve := range []bool{true, false} {
		t.Run(map[bool]string{true: "approve", false: "deny"}[approve], func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "out.txt")
			user := &scripted.ToolUser{Calls: []scripted.Call{{Server: "filesystem", Tool: "write_file",
				Args: map[string]any{"path": file, "content": "risky content"}}}}
			set, err := prompts.Load("en", "")
			if err != nil {
				t.Fatal(err)
			}
			pool := downstream.NewPool(&downstream.Config{Servers: map[string]downstream.ServerConfig{
				"filesystem": {Command: bin, Args: []string{dir}},
			}}, nil)
			st := teststack.New(t, teststack.Options{Handler: user.Handle, Tools: pool,
				ToolExecutor: func() engine.Executor {
					e, err := downstream.NewExecutor(downstream.ExecutorConfig{Pool: pool, Texts: set, ConfirmTimeout: time.Minute})
					if err != nil {
						t.Fatal(err)
					}
					return e
				}()})
			t.Cleanup(func() { _ = pool.Close() })
			srv, err := server.New(server.Config{System: st.Sys, Logger: st.Log})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = srv.Close() })
			pool.SetOperatorElicit(srv.ElicitOperator)

			asked := make(chan string, 1)
			ct, stt := mcp.NewInMemoryTransports()
			ss, err := srv.MCP().Connect(context.Background(), stt, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = ss.Close() })
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, &mcp.ClientOptions{
				ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
					asked <- req.Params.Message
					return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": approve, "note": "by elicitation"}}, nil
				},
				// 2026-07-28 lets servers send no requests: a host of
				// that version answers in the inbox only.
			}).Connect(context.Background(), ct, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cs.Close() })

			sys := st.Sys
			op := sys.OperatorID()
			w, err := sys.CreateAgent(engine.AgentConfig{Template: "researcher", Name: "worker", Tools: []string{"filesystem"}})
			if err != nil {
				t.Fatal(err)
			}
			task, err := sys.AddTask(op, engine.AddTaskRequest{TaskName: "tools", TaskIntention: "use the tools"})
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
			select {
			case msg := <-asked:
				if !strings.Contains(msg, "write_file") || !strings.Contains(msg, file) {
					t.Errorf("the elicitation's message lacks the call: %s", msg)
				}
			case <-time.After(time.Minute):
				t.Fatalf("the operator's client was never asked\n%s", st.Dump())
			}
			var step engine.StepState
			st.WaitFor("the tool step to end", func() bool {
				a, _ := sys.Agent(w)
				for _, s := range a.AgentStep.StepList {
					if s.Type == engine.StepTool && (s.ExecutionState == engine.StateFinished || s.ExecutionState == engine.StateFailed) {
						step = s
						return true
					}
				}
				return false
			})
			got, _ := os.ReadFile(file)
			msg, _ := step.ExecuteResult["error"].(string)
			if approve && (step.ExecutionState != engine.StateFinished || string(got) != "risky content") {
				t.Errorf("step %s %q, file %q: want the call made", step.ExecutionState, msg, got)
			}
			if !approve && (step.ExecutionState != engine.StateFailed || !strings.Contains(msg, "by elicitation") || len(got) != 0) {
				t.Errorf("step %s %q, file %q: want refused with the note, nothing written", step.ExecutionState, msg, got)
			}
			in, _ := sys.Inbox(op)
			for _, e := range in {
				if e.Approval && e.AwaitingReply {
					t.Errorf("the inbox's copy of the question still awaits a reply: %s", e.Content)
				}
			}
		})
	}
}
