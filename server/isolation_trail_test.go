package server_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/server"
)

// TestTrailHidesPrivateMessagesInLLMCalls: ann's private message to
// the manager in the base task (a task everyone sees) must not reach bea
// through the base task's trail: not as the message entry (filtered), and
// not inside the manager's LLM call that digested it (its prompt), nor in
// step entries quoting it.
func TestTrailHidesPrivateMessagesInLLMCalls(t *testing.T) {
	o := newOperators(t, "2025-11-25")
	e, ann, annPeer, bea := o.env, o.ann, o.annPeer, o.beaPC
	sys := e.stack.Sys
	const secret = "ANN-PRIVATE-7311 the acquisition target is Initech"
	annPeer.call("send_message", map[string]any{"task_id": sys.BaseTaskID(), "receiver": []string{sys.ManagerID()}, "content": secret, "need_reply": false}, nil)
	e.stack.WaitFor("the manager digested ann's message", func() bool {
		if !atRest(sys) {
			return false
		}
		a, _ := sys.Agent(sys.ManagerID())
		return strings.Contains(jsonString(a), "ANN-PRIVATE-7311") || strings.Contains(jsonString(sys.Tasks()), "ANN-PRIVATE-7311")
	})
	e.stack.WaitFor("rest", func() bool { return atRest(sys) })
	_ = ann

	// Ann sees it in her own trail view: the search below is not vacuous.
	read := func(p *peer) string {
		var b strings.Builder
		cursor := ""
		for i := 0; i < 100; i++ {
			var out struct {
				Entries    []engine.TrailEntry `json:"entries"`
				NextCursor string              `json:"next_cursor"`
			}
			p.call("get_trail", map[string]any{"task_id": sys.BaseTaskID(), "cursor": cursor, "limit": 500}, &out)
			b.WriteString(jsonString(out.Entries))
			if out.NextCursor == "" {
				break
			}
			cursor = out.NextCursor
		}
		return b.String()
	}
	annView := read(annPeer)
	if !strings.Contains(annView, "ANN-PRIVATE-7311") {
		t.Fatalf("ann's own trail view lacks her message: the probe is vacuous")
	}
	beaView := read(bea)
	if i := strings.Index(beaView, "ANN-PRIVATE-7311"); i >= 0 {
		t.Errorf("bea reads ann's private message in the base task's trail: …%s…", beaView[max(0, i-400):min(len(beaView), i+100)])
	}
	var doc server.TrailDocument
	bea.read("mas://tasks/"+sys.BaseTaskID()+"/trail?limit=500", &doc)
	if s := jsonString(doc); strings.Contains(s, "ANN-PRIVATE-7311") {
		t.Errorf("bea reads ann's private message through mas://tasks/{base}/trail, in entries (kind/agent) %v", kindsHolding(doc.Entries, "ANN-PRIVATE-7311"))
	}
}

// kindsHolding lists the trail entry kinds whose JSON holds s.
func kindsHolding(es []engine.TrailEntry, s string) []string {
	var out []string
	for _, e := range es {
		if strings.Contains(jsonString(e), s) {
			out = append(out, e.Kind+"/"+e.AgentID)
		}
	}
	return out
}

// TestPrivateMessageIDsHidden: the ID of ann's private message to the
// manager in the base task does not reach bea (isolation covers IDs): not
// in the manager's agent document (received_messages), nor in
// wait_for_updates' events of the base task. Ann still sees the events of
// her own message.
func TestPrivateMessageIDsHidden(t *testing.T) {
	o := newOperators(t, "2025-11-25")
	e, annPeer, bea := o.env, o.annPeer, o.beaPC
	sys := e.stack.Sys
	// Their cursors from before the message (each operator's own numbering).
	cursors := map[*peer]uint64{annPeer: annPeer.wait(map[string]any{"timeout_seconds": 1}).Cursor, bea: bea.wait(map[string]any{"timeout_seconds": 1}).Cursor}
	var sent server.SendMessageOut
	annPeer.call("send_message", map[string]any{"task_id": sys.BaseTaskID(), "receiver": []string{sys.ManagerID()}, "content": "ANN-PRIVATE-4410", "need_reply": false}, &sent)
	id := sent.Messages[0].MessageID
	e.stack.WaitFor("the manager took ann's message", func() bool {
		a, _ := sys.Agent(sys.ManagerID())
		return atRest(sys) && strings.Contains(jsonString(a.Received), id)
	})
	var agent map[string]any
	bea.read("mas://agents/"+sys.ManagerID(), &agent)
	if strings.Contains(jsonString(agent), id) {
		t.Errorf("bea's mas://agents/{manager} names ann's private message %s (received_messages: %v)", id, agent["received_messages"])
	}
	eventsOf := func(p *peer) []string {
		var w server.WaitOut
		p.call("wait_for_updates", map[string]any{"cursor": cursors[p], "max_events": 100000, "timeout_seconds": 1}, &w)
		var kinds []string
		for _, ev := range w.Events {
			if ev.MessageID == id {
				kinds = append(kinds, fmt.Sprintf("%s (agent %s, task %s, detail %q)", ev.Kind, ev.AgentID, ev.TaskID, ev.Detail))
			}
		}
		return kinds
	}
	if len(eventsOf(annPeer)) == 0 {
		t.Fatalf("ann's wait_for_updates shows no event of her own message %s: the probe is vacuous", id)
	}
	if evs := eventsOf(bea); len(evs) > 0 {
		t.Errorf("bea's wait_for_updates shows events of ann's private message %s: %v", id, evs)
	}
}
