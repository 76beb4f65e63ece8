package server_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
	"github.com/mas-mcp/mas-mcp/server"
)

// noticesBefore counts p's notifications of the URIs in of that arrived
// before the first one of marker (all of them when none of marker came).
func (p *peer) noticesBefore(marker string, of ...string) (n int, got []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, no := range p.notices {
		if no.uri == marker {
			break
		}
		if slices.Contains(of, no.uri) {
			n++
			got = append(got, no.uri)
		}
	}
	return n, got
}

// annQuestion waits for alice's question to ann and returns it.
func annQuestion(o *operators) engine.InboxEntry {
	o.t.Helper()
	var q engine.InboxEntry
	o.stack.WaitFor("alice's question to ann", func() bool {
		entries, _ := o.stack.Sys.Inbox(o.ann)
		for _, m := range entries {
			if m.Content == scripted.OperatorQuestion {
				q = m
			}
		}
		return q.MessageID != ""
	})
	return q
}

// TestAgentUpdatesHideOtherOperatorsWork: the agents working on ann's task
// are everyone's, but their steps in it are not: bea, subscribed to
// mas://agents and to each of them, is told nothing while they work on
// ann's task (her view of them shows none of it; the notifications alone
// would tell her when ann's work runs). She is told when they work on hers.
func TestAgentUpdatesHideOtherOperatorsWork(t *testing.T) {
	o := newOperatorsWith(t, "2025-11-25", func(c *server.Config) { c.Coalesce = time.Millisecond })
	sys := o.stack.Sys
	ann, bea := o.annPeer, o.beaPC
	task := annTaskAtRest(o)
	q := annQuestion(o)

	watched := []string{"mas://agents"}
	for _, id := range o.stack.Task(task).TaskGroup {
		if b, ok := sys.AgentBrief(id); ok && b.Kind != engine.KindHuman {
			watched = append(watched, "mas://agents/"+id, "mas://agents/"+id+"/steps")
		}
	}
	if len(watched) < 4 {
		t.Fatalf("ann's task has no LLM agents in its group: %v", o.stack.Task(task).TaskGroup)
	}
	// Notifications of what happened before reach no subscription made
	// after them.
	o.srv.AwaitUpdatesHandled(sys.EventSeq())
	bea.subscribe(watched...)
	bea.subscribe("mas://tasks")

	// Ann answers: her team finishes her task, all of it hidden from bea.
	ann.call("send_message", map[string]any{"task_id": task, "receiver": []string{q.SenderID}, "content": "Markdown."}, nil)
	o.stack.WaitFor("ann's task finished, and rest", func() bool {
		return o.stack.Task(task).ExecutionState == engine.StateFinished && atRest(sys)
	})

	// A change of bea's own (her task, in mas://tasks): it comes after any
	// notification ann's work sent her (one stream, in order). Adding a
	// task publishes the task first, before any agent works on it.
	bea.call("add_task", map[string]any{"task_name": "bea's", "task_intention": "Research a topic and write a report."}, nil)
	bea.waitUntil("bea's notification of mas://tasks", func() bool { return len(bea.noticesOf("mas://tasks")) > 0 })
	if n, got := bea.noticesBefore("mas://tasks", watched...); n > 0 {
		t.Errorf("bea got %d resources/updated of agents while they worked on ann's task only: %v", n, got)
	}

	// Her own task's work reaches her: the manager staffs it.
	manager := "mas://agents/" + o.stack.Task(task).TaskManager
	bea.waitUntil("bea's notification of the manager working on her task", func() bool { return len(bea.noticesOf(manager)) > 0 })
}

// TestPrivateMessageUpdatesHideFromOthers: in a task ann shares with bea,
// ann's message to an agent is private (an operator's messages are seen
// only by the operators among their sender and receivers): bea, subscribed
// to the task's conversation, is not told of it (her conversation does not
// change; the notification alone would tell her when ann writes). She is
// told of the messages she sees.
func TestPrivateMessageUpdatesHideFromOthers(t *testing.T) {
	o := newOperatorsWith(t, "2025-11-25", func(c *server.Config) { c.Coalesce = time.Millisecond })
	sys := o.stack.Sys
	ann, bea := o.annPeer, o.beaPC
	task := annTaskAtRest(o)
	ann.call("manage_task", map[string]any{"action": "share", "task_id": task, "operator": o.bea}, nil)
	o.stack.WaitFor("rest after sharing", func() bool { return atRest(sys) })

	conv := "mas://tasks/" + task + "/conversation"
	o.srv.AwaitUpdatesHandled(sys.EventSeq())
	bea.subscribe(conv, "mas://agents/"+o.bea)
	var before server.ConversationDocument
	bea.read(conv, &before)

	// Ann's note to the task's manager, who notes it: nothing else moves
	// (alice goes on waiting for ann's answer).
	const note = "ann's private note to the manager"
	manager := o.stack.Task(task).TaskManager
	ann.call("send_message", map[string]any{"task_id": task, "receiver": []string{manager}, "content": note, "need_reply": false}, nil)
	o.stack.WaitFor("ann's note delivered, and rest", func() bool {
		return slices.ContainsFunc(o.stack.Task(task).SharedConversationPool, func(m engine.Message) bool { return m.Message == note }) && atRest(sys)
	})

	// A change of bea's own, outside ann's task: it comes after any
	// notification ann's note sent her.
	bea.call("send_message", map[string]any{"task_id": sys.BaseTaskID(), "receiver": []string{sys.ManagerID()}, "content": "bea marker", "need_reply": false}, nil)
	bea.waitUntil("bea's notification of her own agent", func() bool { return len(bea.noticesOf("mas://agents/"+o.bea)) > 0 })
	var after server.ConversationDocument
	bea.read(conv, &after)
	if n, _ := bea.noticesBefore("mas://agents/"+o.bea, conv); n > 0 {
		t.Errorf("bea got %d resources/updated of %s for ann's private message (bea's conversation: %d messages before, %d after)", n, conv, len(before.Messages), len(after.Messages))
	}
	for _, m := range after.Messages {
		if strings.Contains(m.Message, note) {
			t.Errorf("bea reads ann's private note in the shared task's conversation")
		}
	}

	// A message she sees reaches her.
	bea.call("send_message", map[string]any{"task_id": task, "receiver": []string{manager}, "content": "bea's note", "need_reply": false}, nil)
	bea.waitUntil("bea's notification of her own message in the shared task", func() bool { return len(bea.noticesOf(conv)) > 0 })
}
