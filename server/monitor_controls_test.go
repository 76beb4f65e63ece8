package server_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/engine"
)

// TestMonitorControls: the page's buttons (POST /api/control and
// /api/answer_approval) pause and resume a task and an agent, refuse what
// cannot be done with a reason, and answer an approval question with a
// decision.
func TestMonitorControls(t *testing.T) {
	m := newMonitorEnv(t, envOptions{})
	sys := m.stack.Sys
	op := sys.OperatorID()
	task, question := m.operatorTask(op)
	alice := m.stack.AgentByName("alice")
	c := m.client()
	ok := func(body map[string]any) {
		t.Helper()
		var res struct {
			Success bool `json:"success"`
		}
		c.json(http.MethodPost, "/api/control", body, http.StatusOK, &res)
		if !res.Success {
			t.Errorf("%v: success false", body)
		}
	}

	ok(map[string]any{"action": "pause_task", "task_id": task})
	if !m.stack.Task(task).Paused {
		t.Error("pause_task: the task is not paused")
	}
	ok(map[string]any{"action": "resume_task", "task_id": task})
	if m.stack.Task(task).Paused {
		t.Error("resume_task: the task is still paused")
	}
	ok(map[string]any{"action": "pause_agent", "agent_id": alice})
	if a, _ := sys.Agent(alice); !a.Paused {
		t.Error("pause_agent: alice is not paused")
	}
	ok(map[string]any{"action": "resume_agent", "agent_id": alice})
	if a, _ := sys.Agent(alice); a.Paused {
		t.Error("resume_agent: alice is still paused")
	}

	c.fails(http.MethodPost, "/api/control", map[string]any{"action": "explode", "task_id": task}, http.StatusBadRequest, "explode", "pause_task")
	c.fails(http.MethodPost, "/api/control", map[string]any{"action": "pause_task"}, http.StatusBadRequest, "task_id")
	c.fails(http.MethodPost, "/api/control", map[string]any{"action": "interrupt", "agent_id": alice, "instruction": "stop"},
		http.StatusBadRequest, "runs no step")
	c.fails(http.MethodPost, "/api/control", map[string]any{"action": "pause_task", "task_id": "nope"}, http.StatusNotFound, "nope")
	// alice's question is not one a tool call waits on.
	c.fails(http.MethodPost, "/api/answer_approval", map[string]any{"message_id": question.MessageID, "approve": true},
		http.StatusBadRequest, "not an approval question")
	c.fails(http.MethodPost, "/api/answer_approval", map[string]any{"message_id": question.MessageID}, http.StatusBadRequest, "approve")

	// A question a tool call waits on (what the risk gate asks).
	answers := make(chan engine.Answer, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		a, err := sys.Ask(ctx, engine.OperatorQuestion{TaskID: task, AgentID: alice, Question: "May alice write the file?", Timeout: time.Minute})
		if err != nil {
			t.Errorf("ask: %v", err)
		}
		answers <- a
	}()
	var approval engine.InboxEntry
	m.stack.WaitFor("the approval question", func() bool {
		in, _ := sys.Inbox(op)
		for _, e := range in {
			if e.Approval && e.AwaitingReply {
				approval = e
				return true
			}
		}
		return false
	})
	var res struct {
		Success bool   `json:"success"`
		Message string `json:"message"`
	}
	c.json(http.MethodPost, "/api/answer_approval", map[string]any{"message_id": approval.MessageID, "approve": false, "note": "not today"}, http.StatusOK, &res)
	a := <-answers
	if a.Decision == nil || a.Decision.Approve || a.Decision.Note != "not today" || res.Message != "denied" {
		t.Errorf("answer %+v (%q), want a denial with the note", a, res.Message)
	}
}
