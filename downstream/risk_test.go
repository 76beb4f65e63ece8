package downstream_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mas-mcp/mas-mcp/downstream"
	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
)

// TestRiskGate runs risky calls of server-filesystem (write_file declares
// itself destructive) past the operator: approved, refused, unanswered,
// auto-approved, and a read-only tool of a server configured as high risk.
func TestRiskGate(t *testing.T) {
	for _, tc := range []struct {
		name string
		// tool is called on file; write_file writes "risky content".
		tool string
		risk string
		auto []string
		// answer is the operator's reply ("" for none).
		answer string
		// asked says whether the operator must be asked.
		asked bool
		// wantErr, when set, are substrings of the failed step's error.
		wantErr      []string
		wantApproval map[string]any
		wantWritten  bool
	}{{
		name: "approved", tool: "write_file", answer: "yes", asked: true,
		wantApproval: map[string]any{"approved": true, "reply": "yes"}, wantWritten: true,
	}, {
		name: "approved in Chinese", tool: "write_file", answer: "可以，写吧", asked: true,
		wantApproval: map[string]any{"approved": true, "reply": "可以，写吧"}, wantWritten: true,
	}, {
		name: "refused", tool: "write_file", answer: "no, not now", asked: true,
		wantErr:      []string{"the operator refused the call of filesystem.write_file", `"no, not now"`},
		wantApproval: map[string]any{"approved": false, "reply": "no, not now"},
	}, {
		name: "unanswered", tool: "write_file", asked: true,
		wantErr:      []string{"the operator did not approve the call of filesystem.write_file within 300ms", "it was not made"},
		wantApproval: map[string]any{"approved": false, "timed_out": true},
	}, {
		name: "auto-approved", tool: "write_file", auto: []string{"write_file"}, wantWritten: true,
	}, {
		name: "high-risk server, read-only tool", tool: "read_text_file", risk: downstream.RiskHigh, answer: "ok", asked: true,
		wantApproval: map[string]any{"approved": true, "reply": "ok"},
	}, {
		name: "high-risk server, auto-approved tool", tool: "read_text_file", risk: downstream.RiskHigh, auto: []string{"read_text_file"},
	}, {
		name: "low-risk server, read-only tool", tool: "read_text_file",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "out.txt")
			args := map[string]any{"path": file}
			if tc.tool == "write_file" {
				args["content"] = "risky content"
			} else if err := os.WriteFile(file, []byte("already there"), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg := &downstream.Config{Servers: map[string]downstream.ServerConfig{
				"filesystem": {Command: serverBin(t, "mcp-server-filesystem"), Args: []string{dir}, Risk: tc.risk, AutoApprove: tc.auto},
			}}
			// Short when nobody answers; long enough for an answer otherwise.
			confirm := 300 * time.Millisecond
			if tc.answer != "" {
				confirm = 20 * time.Second
			}
			s := newToolStackWith(t, cfg, []scripted.Call{{Server: "filesystem", Tool: tc.tool, Args: args}}, stackOptions{
				executor: func(ec *downstream.ExecutorConfig) { ec.ConfirmTimeout = confirm },
			})
			op := s.Sys.OperatorID()
			w, task := s.startWorker(t, "filesystem")

			if tc.answer != "" {
				q := s.waitQuestion(op, w)
				for _, want := range []string{"filesystem", tc.tool, file} {
					if !strings.Contains(q.Content, want) {
						t.Errorf("the operator's question lacks %q:\n%s", want, q.Content)
					}
				}
				if !q.Waiting || q.ReturnWaitingID == "" || q.TaskID != task {
					t.Errorf("the question does not wait for an answer in the task: %+v", q)
				}
				sent, err := s.Sys.HumanSend(op, engine.HumanMessage{TaskID: task, Receiver: []string{w}, Content: tc.answer})
				if err != nil {
					t.Fatal(err)
				}
				if len(sent) != 1 || sent[0].ReturnWaitingID != q.ReturnWaitingID {
					t.Errorf("the answer carries return_waiting_id %q, want the question's %q", sent[0].ReturnWaitingID, q.ReturnWaitingID)
				}
			}
			s.waitSummary(w, task)

			questions := s.questions(op, w)
			if got := len(questions) > 0; got != tc.asked {
				t.Errorf("operator asked: %v, want %v (%+v)", got, tc.asked, questions)
			}
			steps := s.toolSteps(w)
			if len(steps) != 1 {
				t.Fatalf("tool steps: %d, want 1\n%s", len(steps), s.Dump())
			}
			st := steps[0]
			msg, _ := st.ExecuteResult["error"].(string)
			if tc.wantErr == nil && st.ExecutionState != engine.StateFinished {
				t.Errorf("tool step: %s: %s", st.ExecutionState, msg)
			}
			if tc.wantErr != nil && st.ExecutionState != engine.StateFailed {
				t.Errorf("tool step: %s, want failed", st.ExecutionState)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q lacks %q", msg, want)
				}
			}
			var approval any
			if a, ok := st.ExecuteResult["operator_approval"]; ok {
				approval = a
			}
			var want any
			if tc.wantApproval != nil {
				want = tc.wantApproval
			}
			if diff := cmp.Diff(want, approval); diff != "" {
				t.Errorf("operator_approval mismatch (-want +got):\n%s", diff)
			}

			got, err := os.ReadFile(file)
			switch {
			case tc.tool != "write_file":
				if tc.wantErr == nil && !strings.Contains(jsonString(st.ExecuteResult["mcp_server_result"]), "already there") {
					t.Errorf("read_text_file result = %s", jsonString(st.ExecuteResult["mcp_server_result"]))
				}
			case tc.wantWritten && (err != nil || string(got) != "risky content"):
				t.Errorf("file on disk: %q, %v; want it written", got, err)
			case !tc.wantWritten && err == nil:
				t.Errorf("file on disk: %q; want it not written", got)
			}
		})
	}
}

// questions returns the operator's inbox entries from the worker.
func (s *toolStack) questions(op, w string) []engine.InboxEntry {
	s.T.Helper()
	in, err := s.Sys.Inbox(op)
	if err != nil {
		s.T.Fatal(err)
	}
	var out []engine.InboxEntry
	for _, e := range in {
		if e.SenderID == w {
			out = append(out, e)
		}
	}
	return out
}

// waitQuestion waits for a question of the worker that awaits the
// operator's reply, and returns it.
func (s *toolStack) waitQuestion(op, w string) engine.InboxEntry {
	s.T.Helper()
	var q engine.InboxEntry
	s.WaitFor("the operator's question", func() bool {
		for _, e := range s.questions(op, w) {
			if e.AwaitingReply {
				q = e
				return true
			}
		}
		return false
	})
	return q
}

// TestRiskGateStructuredDecision: the operator answers the approval
// question with a decision (answer_approval): approve with edited
// arguments runs the call with them; deny refuses it with the note.
func TestRiskGateStructuredDecision(t *testing.T) {
	for _, approve := range []bool{true, false} {
		t.Run(map[bool]string{true: "approve with edited arguments", false: "deny"}[approve], func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "out.txt")
			cfg := &downstream.Config{Servers: map[string]downstream.ServerConfig{
				"filesystem": {Command: serverBin(t, "mcp-server-filesystem"), Args: []string{dir}},
			}}
			s := newToolStackWith(t, cfg, []scripted.Call{{Server: "filesystem", Tool: "write_file",
				Args: map[string]any{"path": file, "content": "risky content"}}}, stackOptions{
				executor: func(ec *downstream.ExecutorConfig) { ec.ConfirmTimeout = time.Minute },
			})
			op := s.Sys.OperatorID()
			w, task := s.startWorker(t, "filesystem")
			q := s.waitQuestion(op, w)
			d := engine.Decision{Approve: approve, Note: "checked by hand"}
			if approve {
				d.Arguments = map[string]any{"path": file, "content": "edited content"}
			}
			if err := s.Sys.AnswerApproval(op, q.MessageID, d); err != nil {
				t.Fatal(err)
			}
			s.waitSummary(w, task)
			steps := s.toolSteps(w)
			if len(steps) != 1 {
				t.Fatalf("tool steps: %d, want 1\n%s", len(steps), s.Dump())
			}
			got, _ := os.ReadFile(file)
			if approve {
				if steps[0].ExecutionState != engine.StateFinished || string(got) != "edited content" {
					t.Errorf("step %s, file %q: want the call made with the edited arguments", steps[0].ExecutionState, got)
				}
				return
			}
			msg, _ := steps[0].ExecuteResult["error"].(string)
			if steps[0].ExecutionState != engine.StateFailed || !strings.Contains(msg, "refused") || !strings.Contains(msg, "checked by hand") || len(got) != 0 {
				t.Errorf("step %s %q, file %q: want refused with the note, nothing written", steps[0].ExecutionState, msg, got)
			}
		})
	}
}
