package server_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
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

// TestTrailNumbersIgnoreOtherOperators: what ann is shown of a trail —
// the entries' numbers and the cursors — does not depend on what bea's
// work wrote to the trail meanwhile. Bea writes entries (her own actions
// in the base task, which ann may not see, and entries of another task)
// between two of ann's reads: the trail's one counter across every task
// made the gap between ann's entries tell how many. Ann still pages
// through every entry of her own, in order, and bea cannot continue from
// ann's cursor.
func TestTrailNumbersIgnoreOtherOperators(t *testing.T) {
	o := newOperators(t, "2025-11-25")
	sys, tr := o.stack.Sys, o.stack.Trail
	base := sys.BaseTaskID()
	ctx := context.Background()
	action := func(op, mark string) engine.TrailEntry {
		return engine.TrailEntry{Kind: engine.TrailKindOperatorAction, TaskID: base, AgentID: op, StepID: mark, Skill: "send_message",
			Action: &engine.TrailAction{Action: "send_message", Input: engine.Body(mark)}}
	}
	for _, m := range []string{"ann-1", "ann-2", "ann-3"} {
		tr.Append(ctx, action(o.ann, m))
	}
	uri := "mas://tasks/" + base + "/trail?agent=" + o.ann + "&limit=2"
	var first server.TrailDocument
	o.annPeer.read(uri, &first)
	if len(first.Entries) != 2 || first.NextCursor == "" {
		t.Fatalf("ann's first page: %d entries, next cursor %q; want 2 and a cursor", len(first.Entries), first.NextCursor)
	}
	// Bea works: her own actions in the base task, entries of another task.
	for i := range 7 {
		tr.Append(ctx, action(o.bea, fmt.Sprint("bea-", i)))
		tr.Append(ctx, engine.TrailEntry{Kind: engine.TrailKindMessage, TaskID: "bea-task", AgentID: o.bea, StepID: fmt.Sprint("bea-task-", i)})
	}
	for _, m := range []string{"ann-4", "ann-5"} {
		tr.Append(ctx, action(o.ann, m))
	}
	var second server.TrailDocument
	o.annPeer.read(first.NextURI, &second)
	if len(second.Entries) != 2 || second.NextCursor == "" {
		t.Fatalf("ann's second page: %d entries, next cursor %q; want 2 and a cursor", len(second.Entries), second.NextCursor)
	}
	var third server.TrailDocument
	o.annPeer.read(second.NextURI, &third)

	// Every entry of ann's, in order, once.
	var got []string
	shown := slices.Concat(first.Entries, second.Entries, third.Entries)
	for _, x := range shown {
		got = append(got, x.StepID)
	}
	if want := []string{"ann-1", "ann-2", "ann-3", "ann-4", "ann-5"}; !slices.Equal(got, want) {
		t.Errorf("ann pages through %v, want %v", got, want)
	}
	// The numbers shown: the gap between ann-3 and ann-4 (bea wrote 14
	// entries between them) is the gap between ann-1 and ann-2 (nothing).
	if len(shown) == 5 {
		if g12, g34 := shown[1].Seq-shown[0].Seq, shown[3].Seq-shown[2].Seq; g12 != g34 {
			t.Errorf("ann's entries are numbered %d, %d, %d, %d, %d: the gap after ann-3 (%d, not %d) counts bea's entries",
				shown[0].Seq, shown[1].Seq, shown[2].Seq, shown[3].Seq, shown[4].Seq, g34, g12)
		}
	}
	// The cursors: none is a number of the trail's (the global position).
	for _, c := range []string{first.NextCursor, second.NextCursor} {
		if _, err := strconv.ParseUint(c, 10, 64); err == nil {
			t.Errorf("ann's cursor %q is the trail's global position", c)
		}
		if len(c) != len(first.NextCursor) {
			t.Errorf("ann's cursors %q and %q differ in length", first.NextCursor, c)
		}
	}
	// Reading the same page again gives the same cursor: bea's work did
	// not move it.
	var again server.TrailDocument
	o.annPeer.read(uri, &again)
	if again.NextCursor != first.NextCursor {
		t.Errorf("ann's first page's cursor was %q, is %q after bea's work", first.NextCursor, again.NextCursor)
	}
	// A cursor is ann's: bea may read the base task, not with ann's cursor;
	// a made-up one is refused with the documented error.
	for _, c := range []struct {
		p      *peer
		cursor string
	}{{o.beaPC, first.NextCursor}, {o.annPeer, "3"}, {o.annPeer, flipFirst(first.NextCursor)}, {o.annPeer, first.NextCursor[:len(first.NextCursor)-1] + lastBitsSet(first.NextCursor)}} {
		msg := c.p.callErr("get_trail", map[string]any{"task_id": base, "agent": o.ann, "cursor": c.cursor})
		if !strings.Contains(msg, "is not a cursor this trail returned") {
			t.Errorf("get_trail with cursor %q: %q, want the bad cursor's error", c.cursor, msg)
		}
	}
}

// flipFirst changes a cursor's first character (every bit of it is the
// cursor's, unlike the last one's).
func flipFirst(c string) string {
	if strings.HasPrefix(c, "A") {
		return "B" + c[1:]
	}
	return "A" + c[1:]
}

// TestTrailPagesIgnoreOtherOperators: a page of the trail holds as many
// entries as the reader may see, up to the limit, and next_cursor is
// given only when another one of them follows: a page short by the
// entries left out, or an empty last page, told how many entries (or that
// some) of other operators lay in between.
func TestTrailPagesIgnoreOtherOperators(t *testing.T) {
	o := newOperators(t, "2025-11-25")
	sys, tr := o.stack.Sys, o.stack.Trail
	base := sys.BaseTaskID()
	ctx := context.Background()
	action := func(op, mark string) {
		tr.Append(ctx, engine.TrailEntry{Kind: engine.TrailKindOperatorAction, TaskID: base, AgentID: op, StepID: mark, Skill: "send_message",
			Action: &engine.TrailAction{Action: "send_message", Input: engine.Body(mark)}})
	}
	action(o.ann, "ann-1")
	action(o.ann, "ann-2")
	action(o.ann, "ann-3")
	for i := range 3 {
		action(o.bea, fmt.Sprint("bea-", i))
	}
	action(o.ann, "ann-4")
	action(o.bea, "bea-last")

	uri := "mas://tasks/" + base + "/trail?kind=" + engine.TrailKindOperatorAction + "&limit=2"
	var marks, pages []string
	for range 100 {
		var doc server.TrailDocument
		o.annPeer.read(uri, &doc)
		var page []string
		for _, x := range doc.Entries {
			page = append(page, x.StepID)
			if strings.HasPrefix(x.StepID, "ann-") {
				marks = append(marks, x.StepID)
			}
		}
		pages = append(pages, fmt.Sprint(page))
		if doc.NextCursor == "" {
			if len(doc.Entries) == 0 && len(pages) > 1 {
				t.Errorf("ann's last page is empty (pages %v): the cursor before it told that entries she may not see follow", pages)
			}
			break
		}
		if len(doc.Entries) != 2 {
			t.Errorf("ann's page %d holds %d entries, not the limit 2, and a next cursor (pages %v): it tells how many she may not see", len(pages), len(doc.Entries), pages)
		}
		uri = doc.NextURI
	}
	if want := []string{"ann-1", "ann-2", "ann-3", "ann-4"}; !slices.Equal(marks, want) {
		t.Errorf("ann pages through %v (pages %v), want %v", marks, pages, want)
	}
}

// lastBitsSet is a cursor's last character with the bits that carry no
// data set: the same bytes to a lax decoder, not the cursor given.
func lastBitsSet(c string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	return string(alphabet[strings.IndexByte(alphabet, c[len(c)-1])|0xf])
}
