package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/server"
)

// TestSubscribeOtherOperatorsResourcesRefused: bea may not read ann's inbox
// nor ann's steps (mas://agents/{ann}/steps), so she may not subscribe to
// them either (their resources/updated notifications would tell her when
// agents write to ann, or ann acts). Ann may subscribe to her own.
func TestSubscribeOtherOperatorsResourcesRefused(t *testing.T) {
	o := newOperators(t, "2025-11-25")
	ann, annPeer, bea := o.ann, o.annPeer, o.beaPC
	inbox, steps := "mas://operators/"+ann+"/inbox", "mas://agents/"+ann+"/steps"
	annPeer.subscribe(inbox, steps)
	for _, uri := range []string{inbox, steps} {
		err := bea.client.Subscribe(context.Background(), &mcp.SubscribeParams{URI: uri})
		if err != nil {
			if !strings.Contains(err.Error(), "only by that operator") {
				t.Errorf("bea's subscription to %s is refused with %q, want the rule named", uri, err)
			}
			continue
		}
		t.Errorf("bea subscribed to ann's %s", uri)
		var added server.AddTaskOut
		annPeer.call("add_task", map[string]any{"task_name": "r", "task_intention": "Research a topic and write a report."}, &added)
		if bea.await(func() bool { return len(bea.noticesOf(uri)) > 0 }, 20*time.Second) {
			t.Errorf("bea was notified %d time(s) of changes to ann's %s", len(bea.noticesOf(uri)), uri)
		}
	}
}

// TestListenSubscriptionChecksOperator: over protocol 2026-07-28
// (subscriptions/listen) the subscribe handler checks the subscription as
// the caller's operator: ann may subscribe to her own task and is notified
// of it; bea may not subscribe to it.
func TestListenSubscriptionChecksOperator(t *testing.T) {
	o := newOperators(t, "2026-07-28")
	ann, bea := o.annPeer, o.beaPC
	var added server.AddTaskOut
	ann.call("add_task", map[string]any{"task_name": "r", "task_intention": "Research a topic and write a report."}, &added)
	uri := added.ResourceURI
	if err := ann.client.Subscribe(context.Background(), &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatalf("ann subscribes to her own task: %v", err)
	}
	// Over 2026-07-28 the client subscribes on its subscriptions/listen
	// stream: a refusal ends that stream, and Subscribe need not report it.
	errB := bea.client.Subscribe(context.Background(), &mcp.SubscribeParams{URI: uri})
	t.Logf("bea's subscription: %v", errB)
	// The scripted team works on ann's task until its question to ann; each
	// change is notified to every subscriber of the task at once, so bea
	// would have been told by the time ann was.
	if !ann.await(func() bool { return len(ann.noticesOf(uri)) > 0 }, 20*time.Second) {
		t.Errorf("ann, subscribed over 2026-07-28 to her own task, got no resources/updated")
	}
	if n := len(bea.noticesOf(uri)); n > 0 {
		t.Errorf("bea got %d resources/updated of ann's task", n)
	}
}

// TestTaskListUpdatesHideOtherOperatorsTasks: a change of a task is
// notified (resources/updated of mas://tasks) only to the operators who see
// the task: bea, subscribed to mas://tasks, is not told when ann's task
// changes (her mas://tasks does not change; the notification alone would
// tell her when ann works), and is told when her own task appears.
func TestTaskListUpdatesHideOtherOperatorsTasks(t *testing.T) {
	o := newOperatorsWith(t, "2025-11-25", func(c *server.Config) { c.Coalesce = time.Millisecond })
	sys := o.stack.Sys
	ann, bea := o.annPeer, o.beaPC
	task := annTaskAtRest(o)
	ann.subscribe("mas://tasks")
	bea.subscribe("mas://tasks", "mas://agents/"+o.bea)
	var before []server.TaskBrief
	bea.read("mas://tasks", &before)

	ann.call("manage_task", map[string]any{"action": "pause_task", "task_id": task}, nil)
	ann.waitUntil("ann's notification of mas://tasks", func() bool { return len(ann.noticesOf("mas://tasks")) > 0 })
	// A change of bea's own: its notification comes after any that went to
	// bea for ann's pause (one stream, in order).
	bea.call("send_message", map[string]any{"task_id": sys.BaseTaskID(), "receiver": []string{sys.ManagerID()}, "content": "bea marker", "need_reply": false}, nil)
	bea.waitUntil("bea's notification of her own agent", func() bool { return len(bea.noticesOf("mas://agents/"+o.bea)) > 0 })

	var after []server.TaskBrief
	bea.read("mas://tasks", &after)
	bea.mu.Lock()
	var early int
	for _, n := range bea.notices {
		if n.uri == "mas://agents/"+o.bea {
			break
		}
		if n.uri == "mas://tasks" {
			early++
		}
	}
	bea.mu.Unlock()
	if early > 0 {
		t.Errorf("bea got %d resources/updated of mas://tasks when ann paused her task (bea's mas://tasks: %d tasks before, %d after, none of them ann's)", early, len(before), len(after))
	}

	// Her own task's changes reach her.
	bea.call("add_task", map[string]any{"task_name": "bea's", "task_intention": "Research a topic and write a report."}, nil)
	bea.waitUntil("bea's notification of mas://tasks for her own task", func() bool { return len(bea.noticesOf("mas://tasks")) > 0 })
}
