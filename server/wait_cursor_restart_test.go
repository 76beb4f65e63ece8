package server_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
	"github.com/mas-mcp/mas-mcp/server"
)

// restartServer restarts the env's MAS from its store (as a new process
// would) and serves it with a new server; e.srv is the new one.
func (e *env) restartServer() {
	e.t.Helper()
	e.stack.Restart()
	srv, err := server.New(server.Config{System: e.stack.Sys, Logger: e.stack.Log, Trail: e.stack.Trail})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = srv.Close() })
	e.srv = srv
}

// TestWaitCursorFromBeforeARestartIsNeverTakenAsNew: an operator (an LLM
// host following wait_for_updates) holds the cursor of its last call; the
// server restarts while it is away, and the new process logs more of the
// operator's events than the old cursor counted — among them an agent's
// new question to the operator. The old cursor must never be taken as one
// of the new process's (which would silently skip the new process's events
// before it, the question among them): it is refused with the documented
// message ("cursors do not survive a restart", docs/errors.md), or
// answered with lost: true.
func TestWaitCursorFromBeforeARestartIsNeverTakenAsNew(t *testing.T) {
	e := newEnvWith(t, envOptions{ProtocolVersion: "2025-11-25"})
	op := e.stack.Sys.OperatorID()
	start := e.cursorNow() // the operator's log starts before its task
	f := e.startTask()
	// The operator answers, the task runs to its end; the operator's
	// wait_for_updates loop reads every event up to here.
	e.call("send_message", map[string]any{"task_id": f.TaskID, "receiver": f.Alice, "content": "Markdown, please."}, nil)
	e.stack.WaitFor("the first task to end", func() bool {
		s := e.stack.Task(f.TaskID).ExecutionState
		return s == engine.StateFinished || s == engine.StateFailed
	})
	e.srv.AwaitUpdatesHandled(e.stack.Sys.EventSeq())
	var last server.WaitOut
	e.call("wait_for_updates", map[string]any{"cursor": start, "timeout_seconds": 1, "max_events": 100000}, &last)
	cursor := last.Cursor
	if cursor <= start || len(last.Events) == 0 {
		t.Fatalf("wait_for_updates from %d gave cursor %d and %d events", start, cursor, len(last.Events))
	}
	seen := cursor - start // the operator's events in the first process

	// The server restarts; the operator is away.
	e.restartServer()
	p := e.connect("2025-11-25")
	base := e.cursorNow() // the new process logs the operator's events from here
	var added server.AddTaskOut
	p.call("add_task", map[string]any{"task_name": "second report", "task_intention": "Research a topic and write a report."}, &added)
	var question engine.InboxEntry
	e.stack.WaitFor("alice's question in the second task", func() bool {
		in, _ := e.stack.Sys.Inbox(op)
		for _, m := range in {
			if m.TaskID == added.TaskID && m.Content == scripted.OperatorQuestion && m.AwaitingReply {
				question = m
				return true
			}
		}
		return false
	})
	// The new process goes on until it has logged more of the operator's
	// events than the old cursor counted (the operator messages the
	// manager in the base task, as it may from another client): numbered
	// as the first process did, the new events would reach the old cursor.
	for i := uint64(0); e.cursorNow()-base <= seen+5; i++ {
		if i > 4*(seen+5) {
			t.Fatalf("the new process logged %d of the operator's events after %d messages, want more than %d", e.cursorNow()-base, i, seen+5)
		}
		if _, err := e.stack.Sys.HumanSend(op, engine.HumanMessage{TaskID: e.stack.Sys.BaseTaskID(),
			Receiver: []string{e.stack.Sys.ManagerID()}, Content: "status?"}); err != nil {
			t.Fatal(err)
		}
		e.srv.AwaitUpdatesHandled(e.stack.Sys.EventSeq())
	}

	// The operator comes back with the cursor it held.
	res, err := p.client.CallTool(context.Background(), &mcp.CallToolParams{Name: "wait_for_updates",
		Arguments: map[string]any{"cursor": cursor, "timeout_seconds": 1, "max_events": 100000}})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError {
		if text := resultText(res); !strings.Contains(text, "cursors do not survive a restart") {
			t.Errorf("wait_for_updates with the cursor %d from before the restart refused with %q; want the documented message "+
				"(\"… cursors do not survive a restart …\")", cursor, text)
		}
		return
	}
	var out server.WaitOut
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if !out.Lost {
		first := uint64(0)
		if len(out.Events) > 0 {
			first = out.Events[0].Seq
		}
		t.Errorf("wait_for_updates with the cursor %d from before the restart was taken as the new process's: %d events from seq %d on, lost=false; "+
			"the new process's events from %d on (alice's question %s to the operator among them) are neither given nor reported lost",
			cursor, len(out.Events), first, base, question.MessageID)
	}
}
