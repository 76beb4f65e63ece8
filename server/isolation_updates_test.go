package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
	"github.com/mas-mcp/mas-mcp/server"
)

// quietTask, in a task's intention, makes the scripted manager plan
// nothing for the task: it creates no agent (an agent's resources and its
// agent_added are everyone's), so all the task's events and resources are
// its owner's alone.
const quietTask = "QUIET-TASK: note it and plan nothing."

// newQuietOperators is newOperatorsWith (notifications folded for 1 ms)
// on a team whose manager plans nothing for a quiet task.
func newQuietOperators(t *testing.T, version string, adjust func(o *operators, c *server.Config)) *operators {
	t.Helper()
	o := &operators{}
	tok := tokenOperators(t, &o.ann, &o.bea)
	o.env = newEnvWith(t, envOptions{
		Config: func(c *server.Config) {
			tok.Config(c)
			c.Coalesce = time.Millisecond
			if adjust != nil {
				adjust(o, c)
			}
		},
		Stack: func(so *teststack.Options) {
			next := so.Handler
			so.Handler = func(c *fakellm.Call) fakellm.Reply {
				if c.AgentName == "manager" && c.Skill == "planning" && strings.Contains(c.Prompt, quietTask) {
					return fakellm.Reply{Content: fakellm.Block("planned_step", "[]")}
				}
				return next(c)
			}
		},
	})
	ts := httptest.NewServer(o.srv.Handler())
	t.Cleanup(ts.Close)
	o.url = ts.URL
	o.annPeer = o.httpPeer(o.url, tokenAnn, version)
	o.beaPC = o.httpPeer(o.url, tokenBea, version)
	return o
}

// addQuiet has p add a quiet task and waits until the manager has planned
// it (nothing) and the MAS is at rest, and the server took in its events.
func (o *operators) addQuiet(p *peer, name string) string {
	o.t.Helper()
	var added server.AddTaskOut
	p.call("add_task", map[string]any{"task_name": name, "task_intention": quietTask}, &added)
	sys := o.stack.Sys
	o.stack.WaitFor(name+" planned, and rest", func() bool {
		m, _ := sys.Agent(sys.ManagerID())
		return atRest(sys) && slices.ContainsFunc(m.AgentStep.StepList, func(s engine.StepState) bool {
			return s.TaskID == added.TaskID && s.ExecutionState == engine.StateFinished
		})
	})
	o.srv.AwaitUpdatesHandled(sys.EventSeq())
	return added.TaskID
}

// numbered checks that evs are numbered one after another from after+1,
// and returns the last number (after when there is none).
func numbered(t *testing.T, who string, after uint64, evs []engine.Event) uint64 {
	t.Helper()
	for i, ev := range evs {
		if want := after + uint64(i) + 1; ev.Seq != want {
			t.Errorf("%s's event %d (%s, task %q, agent %q) has seq %d, want %d: her numbers must count only the events she is given",
				who, i, ev.Kind, ev.TaskID, ev.AgentID, ev.Seq, want)
		}
	}
	return after + uint64(len(evs))
}

// TestEventNumbersIgnoreOtherOperators: wait_for_updates' cursor, the seq
// of the events it returns and /api/events' ids count only the events
// their operator may see. Ann adds a task and works on it while bea waits
// and watches: bea's cursor does not move, her wait does not return, her
// stream stays silent — the engine's count moved by every one of ann's
// events, which said how busy ann was. The agent ann adds is everyone's:
// bea gets its agent_added as her very next number; then her own task's
// events, numbered on. Ann, meanwhile, gets all of her task's events.
func TestEventNumbersIgnoreOtherOperators(t *testing.T) {
	o := newQuietOperators(t, "2025-11-25", nil)
	sys := o.stack.Sys
	ann, bea := o.annPeer, o.beaPC

	stream := openEvents(t, &http.Client{}, o.url, tokenBea)
	hello := stream.next(t, 10*time.Second)
	var h struct {
		Seq uint64 `json:"seq"`
	}
	if hello.Event != "hello" || json.Unmarshal([]byte(hello.Data), &h) != nil {
		t.Fatalf("first event %+v, want hello with bea's seq", hello)
	}
	annStart := ann.wait(map[string]any{"timeout_seconds": 1}).Cursor
	beaStart := bea.wait(map[string]any{"timeout_seconds": 1}).Cursor
	if beaStart != h.Seq {
		t.Errorf("bea's wait_for_updates cursor %d, her /api/events hello seq %d: want one numbering", beaStart, h.Seq)
	}

	// Bea waits from her cursor while ann works.
	done := make(chan server.WaitOut, 1)
	go func() {
		res, err := bea.client.CallTool(context.Background(), mcpCall("wait_for_updates",
			map[string]any{"cursor": beaStart, "timeout_seconds": 120, "max_events": 100000}))
		var out server.WaitOut
		if err == nil && !res.IsError {
			_ = jsonDecode(res.StructuredContent, &out)
		}
		done <- out
	}()
	o.srv.AwaitLongRequests(o.bea, 1)
	before := sys.EventSeq()
	task := o.addQuiet(ann, "ann's quiet plan")
	ann.call("send_message", map[string]any{"task_id": task, "receiver": []string{sys.ManagerID()}, "content": "ann's note", "need_reply": false}, nil)
	ann.call("manage_task", map[string]any{"action": "pause_task", "task_id": task}, nil)
	ann.call("manage_task", map[string]any{"action": "resume_task", "task_id": task}, nil)
	o.stack.WaitFor("rest", func() bool { return atRest(sys) })
	o.srv.AwaitUpdatesHandled(sys.EventSeq())
	if n := sys.EventSeq() - before; n < 5 {
		t.Fatalf("ann's work made %d engine events: the probe is vacuous", n)
	}
	select {
	case w := <-done:
		t.Fatalf("bea's wait_for_updates returned while only ann worked: %+v", w)
	default:
	}
	if now := o.srv.EventCursor(o.bea); now != beaStart {
		t.Errorf("bea's cursor moved from %d to %d while only ann worked (%d engine events)", beaStart, now, sys.EventSeq()-before)
	}
	if w := bea.wait(map[string]any{"cursor": beaStart, "timeout_seconds": 1}); !w.TimedOut || w.Cursor != beaStart || len(w.Events) > 0 {
		t.Errorf("bea's wait from %d after ann's work = %+v, want timed out at the same cursor", beaStart, w)
	}

	// Ann's agent is everyone's: bea's next number.
	var created instructionOut
	ann.call("manage_agent", map[string]any{"action": "init_new_agent", "agent_config": map[string]any{"template": "reviewer", "name": "carol"}}, &created)
	carol, _ := created.Result["agent_id"].(string)
	var w server.WaitOut
	select {
	case w = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("bea's wait_for_updates did not return for carol, an agent everyone sees")
	}
	if len(w.Events) == 0 || w.Events[0].Kind != engine.EventAgentAdded || w.Events[0].AgentID != carol {
		t.Fatalf("bea's wait = %+v, want carol's agent_added first", w)
	}
	cursor := numbered(t, "bea", beaStart, w.Events)
	if w.Cursor != cursor {
		t.Errorf("bea's cursor %d, want her last event's %d", w.Cursor, cursor)
	}

	// Bea's own task: its events, numbered on.
	mine := o.addQuiet(bea, "bea's quiet plan")
	w = bea.wait(map[string]any{"cursor": cursor, "timeout_seconds": 10, "max_events": 100000})
	last := numbered(t, "bea", cursor, w.Events)
	if !slices.ContainsFunc(w.Events, func(ev engine.Event) bool { return ev.Kind == engine.EventTaskAdded && ev.TaskID == mine }) {
		t.Errorf("bea's wait from %d = %+v, want her task's task_added", cursor, w)
	}
	for _, ev := range w.Events {
		if ev.TaskID == task || ev.AgentID == o.ann {
			t.Errorf("bea's wait returned ann's event %s (task %q, agent %q)", ev.Kind, ev.TaskID, ev.AgentID)
		}
	}

	// Her /api/events: the same events with the same numbers, from hello on.
	var got []engine.Event
	for !slices.ContainsFunc(got, func(ev engine.Event) bool { return ev.Seq >= last }) {
		ev := stream.next(t, 20*time.Second)
		var e engine.Event
		if err := json.Unmarshal([]byte(ev.Data), &e); err != nil {
			t.Fatalf("/api/events %s: %q: %v", ev.Event, ev.Data, err)
		}
		if ev.ID != strconv.FormatUint(e.Seq, 10) || ev.Event != string(e.Kind) {
			t.Errorf("/api/events event %+v: id and name must be its seq and kind", ev)
		}
		if e.TaskID == task || e.AgentID == o.ann {
			t.Errorf("bea's /api/events gave ann's event %s (task %q, agent %q)", e.Kind, e.TaskID, e.AgentID)
		}
		got = append(got, e)
	}
	numbered(t, "bea's /api/events", h.Seq, got)
	if len(got) == 0 || got[0].AgentID != carol {
		t.Errorf("bea's /api/events began with %+v, want carol's agent_added", got)
	}

	// Ann gets her own task's events, numbered on her own.
	aw := ann.wait(map[string]any{"cursor": annStart, "timeout_seconds": 10, "max_events": 100000})
	numbered(t, "ann", annStart, aw.Events)
	if !slices.ContainsFunc(aw.Events, func(ev engine.Event) bool { return ev.Kind == engine.EventTaskAdded && ev.TaskID == task }) {
		t.Errorf("ann's wait from %d = %d events, want her task's task_added", annStart, len(aw.Events))
	}
	if slices.ContainsFunc(aw.Events, func(ev engine.Event) bool { return ev.TaskID == mine }) {
		t.Errorf("ann's wait returned events of bea's task")
	}
}

// listDecision is one resources/list_changed the server offered a session
// of op, and whether the session was told.
type listDecision struct {
	op   string
	told bool
}

// listDecisions records the server's list_changed decisions.
func listDecisions(o *operators) chan listDecision {
	c := make(chan listDecision, 4096)
	o.srv.OnListChanged(func(op string, told bool) { offer(c, listDecision{op, told}) })
	o.t.Cleanup(func() { o.srv.OnListChanged(nil) })
	return c
}

// decided waits for the list_changed decisions of a change for the
// operators in want (each has one session that takes them here: an older
// protocol's, or the 2026-07-28 stream that asked): until each one wanted
// told was told, and each other was offered one. It returns who was told.
// A decision that tells nobody may come late from the change before (go-sdk
// folds changes into one notification only within its 10 ms window): it
// does not end a wait for a told.
func decided(t *testing.T, c chan listDecision, want map[string]bool) map[string]bool {
	t.Helper()
	told, offered := map[string]bool{}, map[string]bool{}
	done := func() bool {
		for op, w := range want {
			if !offered[op] || (w && !told[op]) {
				return false
			}
		}
		return true
	}
	timeout := time.After(20 * time.Second)
	for !done() {
		select {
		case d := <-c:
			if _, ok := want[d.op]; ok {
				offered[d.op] = true
				told[d.op] = told[d.op] || d.told
			}
		case <-timeout:
			t.Fatalf("list_changed decisions within 20s: told %v of %v offered, want %v", told, offered, want)
		}
	}
	return told
}

// TestListChangedOnlyForOwnList: notifications/resources/list_changed goes
// to a session only when its own resources/list changed. Ann's new task
// changes only her list: ann is told, bea is not (her list is the same;
// the notification alone would tell her when ann adds a task). Bea's own
// task tells bea and not ann; an agent (everyone's) tells both; a task
// shared with bea tells bea, whose list gains it, and not ann, whose list
// does not change. Over an older protocol (the session's shared stream)
// and 2026-07-28 (the subscriptions/listen stream that asked).
func TestListChangedOnlyForOwnList(t *testing.T) {
	for _, version := range protocolVersions {
		t.Run(version, func(t *testing.T) {
			o := newQuietOperators(t, version, nil)
			ann, bea := o.annPeer, o.beaPC
			decisions := listDecisions(o)
			check := func(what string, annTold, beaTold bool) {
				t.Helper()
				want := map[string]bool{o.ann: annTold, o.bea: beaTold}
				got := decided(t, decisions, want)
				for op, name := range map[string]string{o.ann: "ann", o.bea: "bea"} {
					if got[op] != want[op] {
						t.Errorf("%s: %s told of it: %v, want %v", what, name, got[op], want[op])
					}
				}
				for op, p := range map[string]*peer{o.ann: ann, o.bea: bea} {
					if want[op] {
						p.waitUntil(what+": the list_changed", func() bool { return len(drain(p.listChanged)) > 0 })
					}
				}
				<-o.srv.QueuesEmptied()
			}

			annTask := o.addQuiet(ann, "ann's quiet plan")
			check("ann's task", true, false)
			o.addQuiet(bea, "bea's quiet plan")
			check("bea's task", false, true)
			ann.call("manage_agent", map[string]any{"action": "init_new_agent", "agent_config": map[string]any{"template": "reviewer", "name": "carol"}}, nil)
			check("ann's agent (everyone's)", true, true)
			ann.call("manage_task", map[string]any{"action": "share", "task_id": annTask, "operator": o.bea}, nil)
			check("ann's task shared with bea", false, true)

			// What bea lists agrees: ann's task once shared, never before.
			var uris []string
			for r, err := range bea.client.Resources(context.Background(), nil) {
				if err != nil {
					t.Fatal(err)
				}
				uris = append(uris, r.URI)
			}
			if !slices.Contains(uris, "mas://tasks/"+annTask) {
				t.Errorf("bea's resources/list after the share lacks ann's task")
			}
			if n := len(drain(bea.listChanged)); n > 0 {
				t.Errorf("bea got %d more list_changed than her list's changes", n)
			}
		})
	}
}

// TestListChangedForAdmins: an admin sees every task, so another
// operator's new task changes an admin's list: the admin is told.
func TestListChangedForAdmins(t *testing.T) {
	o := newQuietOperators(t, "2025-11-25", func(o *operators, c *server.Config) { c.HTTP.Admins = []string{o.bea} })
	decisions := listDecisions(o)
	task := o.addQuiet(o.annPeer, "ann's quiet plan")
	if got := decided(t, decisions, map[string]bool{o.ann: true, o.bea: true}); !got[o.ann] || !got[o.bea] {
		t.Errorf("ann's task: told %v, want ann and bea (an admin)", got)
	}
	o.beaPC.waitUntil("the admin's list_changed", func() bool { return len(drain(o.beaPC.listChanged)) > 0 })
	var uris []string
	for r, err := range o.beaPC.client.Resources(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		uris = append(uris, r.URI)
	}
	if !slices.Contains(uris, "mas://tasks/"+task) {
		t.Errorf("the admin's resources/list (%d resources) lacks ann's task", len(uris))
	}
}
