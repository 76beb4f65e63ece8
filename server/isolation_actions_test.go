package server_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/server"
)

// TestOperatorActionEventsHidden: an operator's actions are HumanAgent
// steps, its own (docs/mcp.md). Ann's manage_task and send_message steps
// are recorded in the base task, which bea sees; their events reach bea
// neither through wait_for_updates nor as logging notifications (nor
// /api/events, which has the same rule): bea does not learn when ann acts,
// nor the IDs of her steps.
func TestOperatorActionEventsHidden(t *testing.T) {
	o := newOperators(t, "2025-11-25")
	sys := o.stack.Sys
	ann, annPeer, bea := o.ann, o.annPeer, o.beaPC
	if err := bea.client.SetLoggingLevel(context.Background(), &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
		t.Fatal(err)
	}
	task := annTaskAtRest(o)
	var w0 server.WaitOut
	bea.call("wait_for_updates", map[string]any{"timeout_seconds": 1}, &w0) // the cursor now

	annPeer.call("manage_task", map[string]any{"action": "pause_task", "task_id": task}, nil)
	annPeer.call("manage_task", map[string]any{"action": "resume_task", "task_id": task}, nil)
	annPeer.call("send_message", map[string]any{"task_id": sys.BaseTaskID(), "receiver": []string{sys.ManagerID()}, "content": "note to self", "need_reply": false}, nil)
	o.stack.WaitFor("rest", func() bool { return atRest(sys) })

	var w server.WaitOut
	bea.call("wait_for_updates", map[string]any{"cursor": w0.Cursor, "max_events": 100000, "timeout_seconds": 1}, &w)
	var leaked []string
	for _, ev := range w.Events {
		if ev.AgentID == ann {
			leaked = append(leaked, fmt.Sprintf("%s step %s (task %s, %s)", ev.Kind, ev.StepID, ev.TaskID, ev.Detail))
		}
	}
	if len(leaked) > 0 {
		t.Errorf("bea's wait_for_updates shows %d events of ann's own steps:\n%s", len(leaked), strings.Join(leaked, "\n"))
	}

	// Logging notifications: bea's own step is logged to her after ann's
	// (one stream, in order), so once it arrived any log of ann's has too.
	bea.call("send_message", map[string]any{"task_id": sys.BaseTaskID(), "receiver": []string{sys.ManagerID()}, "content": "bea marker", "need_reply": false}, nil)
	var logs []*mcp.LoggingMessageParams
	bea.waitUntil("the log of bea's own step", func() bool {
		logs = append(logs, drain(bea.logs)...)
		return slices.ContainsFunc(logs, func(l *mcp.LoggingMessageParams) bool {
			m, _ := l.Data.(map[string]any)
			return m["agent_id"] == o.bea
		})
	})
	for _, l := range logs {
		if m, _ := l.Data.(map[string]any); m["agent_id"] == ann {
			t.Errorf("bea got a logging notification of ann's step: %v", m["message"])
		}
	}
}

// TestOperatorWorkingMemoryHidden: mas://agents/{ann} and ask_info agent,
// as bea reads them, name none of ann's steps: not in her step list, nor in
// her working memory, whose base-task entry lists a step per action.
func TestOperatorWorkingMemoryHidden(t *testing.T) {
	o := newOperators(t, "2025-11-25")
	sys := o.stack.Sys
	task := annTaskAtRest(o)
	o.annPeer.call("manage_task", map[string]any{"action": "pause_task", "task_id": task}, nil)
	a, ok := sys.Agent(o.ann)
	if !ok || len(a.AgentStep.StepList) == 0 {
		t.Fatalf("ann has no steps: the probe is vacuous")
	}
	var doc map[string]any
	o.beaPC.read("mas://agents/"+o.ann, &doc)
	var info server.AskInfoOut
	o.beaPC.call("ask_info", map[string]any{"type": "agent", "agent_id": o.ann}, &info)
	for _, st := range a.AgentStep.StepList {
		if s := jsonString(doc); strings.Contains(s, st.StepID) {
			t.Errorf("bea's mas://agents/{ann} names ann's step %s (%q): working_memory %v", st.StepID, st.StepIntention, doc["working_memory"])
		}
		if s := jsonString(info.Data) + info.Markdown; strings.Contains(s, st.StepID) {
			t.Errorf("bea's ask_info agent of ann names ann's step %s (%q)", st.StepID, st.StepIntention)
		}
	}
}
