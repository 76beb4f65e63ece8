package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/server"
)

// protocolVersions are the client versions the notification tests run
// with: the last one served statefully over HTTP, and the SDK's latest
// (subscriptions/listen).
var protocolVersions = []string{"2025-11-25", "2026-07-28"}

func (p *peer) subscribe(uris ...string) {
	p.t.Helper()
	for _, uri := range uris {
		if err := p.client.Subscribe(context.Background(), &mcp.SubscribeParams{URI: uri}); err != nil {
			p.t.Fatalf("subscribe %s: %v", uri, err)
		}
	}
}

// TestUpdatesWhileTaskRuns: a client subscribed to a task and to the task
// list is notified while the scripted task runs, down to its final state,
// and never about resources it did not subscribe to.
func TestUpdatesWhileTaskRuns(t *testing.T) {
	for _, version := range protocolVersions {
		t.Run(version, func(t *testing.T) {
			e := newEnvWith(t, envOptions{ProtocolVersion: version, Config: func(c *server.Config) { c.Coalesce = 20 * time.Millisecond }})
			e.subscribe("mas://tasks")
			var added server.AddTaskOut
			e.call("add_task", map[string]any{"task_name": "report", "task_intention": "Research a topic and write a report."}, &added)
			e.subscribe(added.ResourceURI)

			var question engine.InboxEntry
			e.stack.WaitFor("alice's question", func() bool {
				entries, _ := e.stack.Sys.Inbox(e.stack.Sys.OperatorID())
				for _, m := range entries {
					if m.AwaitingReply {
						question = m
					}
				}
				return question.MessageID != ""
			})
			e.call("send_message", map[string]any{"task_id": added.TaskID, "receiver": []string{question.SenderID}, "content": "Markdown."}, nil)
			e.stack.WaitFor("the task to finish", func() bool {
				return e.stack.Task(added.TaskID).ExecutionState == engine.StateFinished
			})
			ended := e.stack.Task(added.TaskID).EndedAt
			for _, uri := range []string{added.ResourceURI, "mas://tasks"} {
				e.waitUntil("a notification of "+uri+" after the task ended", func() bool {
					n := e.noticesOf(uri)
					return len(n) > 0 && !n[len(n)-1].Before(ended)
				})
			}
			e.mu.Lock()
			defer e.mu.Unlock()
			for _, n := range e.notices {
				if n.uri != added.ResourceURI && n.uri != "mas://tasks" {
					t.Errorf("notified of %s, which the client did not subscribe to", n.uri)
				}
			}
		})
	}
}

// TestUpdatesCoalesce: many changes of one URI within a window give at
// most about one notification per window, and the last change is always
// notified. The bound is derived from the elapsed time, not exact timing.
func TestUpdatesCoalesce(t *testing.T) {
	const window = 200 * time.Millisecond
	var bea string
	e := newEnvWith(t, envOptions{ProtocolVersion: "2025-11-25", Config: func(c *server.Config) {
		c.Coalesce = window
		var err error
		if bea, err = c.System.AddOperator("bea"); err != nil {
			t.Fatal(err)
		}
	}})
	sys := e.stack.Sys
	op, base := sys.OperatorID(), sys.BaseTaskID()
	// The client's operator follows its own inbox (only its own may be
	// subscribed to): bea writes to it.
	conv, inbox := "mas://tasks/"+base+"/conversation", "mas://operators/"+op+"/inbox"
	e.subscribe(conv, inbox)
	send := func(i int) {
		t.Helper()
		// Operator to operator: no LLM agent reacts, only these changes.
		if _, err := sys.HumanSend(bea, engine.HumanMessage{TaskID: base, Receiver: []string{op}, Content: fmt.Sprintf("note %d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	// Warm up until both subscriptions are live, then let the window pass.
	live := func() bool { return len(e.noticesOf(conv)) > 0 && len(e.noticesOf(inbox)) > 0 }
	for bound := time.Now().Add(20 * time.Second); !live(); { // a bound for a hang
		if time.Now().After(bound) {
			t.Fatal("timed out waiting for the subscriptions to be live")
		}
		send(-1)
		e.await(live, window/4)
	}
	// The warm-up's window closes: the changes below start a fresh one
	// (a wall-clock window is what is tested, so its time passes here).
	time.Sleep(3 * window)

	start := time.Now()
	const changes = 60
	var last time.Time
	for i := range changes {
		last = time.Now()
		send(i)
		time.Sleep(10 * time.Millisecond)
	}
	for _, uri := range []string{conv, inbox} {
		e.waitUntil("the last change of "+uri+" to be notified", func() bool {
			n := e.noticesOf(uri)
			return len(n) > 0 && n[len(n)-1].After(last)
		})
	}
	end := time.Now()
	bound := int(end.Sub(start)/window) + 2
	for _, uri := range []string{conv, inbox} {
		var n int
		for _, at := range e.noticesOf(uri) {
			if !at.Before(start) {
				n++
			}
		}
		t.Logf("%s: %d changes in %s gave %d notifications (bound %d)", uri, changes, end.Sub(start).Round(time.Millisecond), n, bound)
		if n > bound || n >= changes {
			t.Errorf("%s: %d notifications for %d changes in %s with a %s window; want at most %d",
				uri, n, changes, end.Sub(start).Round(time.Millisecond), window, bound)
		}
	}
}

// TestListChanged: a new agent or task sends resources/list_changed, and
// its resources are then listed.
func TestListChanged(t *testing.T) {
	for _, version := range protocolVersions {
		t.Run(version, func(t *testing.T) {
			e := newEnvWith(t, envOptions{ProtocolVersion: version})
			listed := func() []string {
				var uris []string
				for r, err := range e.client.Resources(context.Background(), nil) {
					if err != nil {
						t.Fatal(err)
					}
					uris = append(uris, r.URI)
				}
				return uris
			}
			drain(e.listChanged)
			var out instructionOut
			e.call("manage_agent", map[string]any{"action": "init_new_agent", "agent_config": map[string]any{"template": "reviewer", "name": "carol"}}, &out)
			carol := out.Result["agent_id"].(string)
			e.waitUntil("list_changed after init_new_agent", func() bool { return len(drain(e.listChanged)) > 0 })
			if l := listed(); !contains(l, "mas://agents/"+carol) || !contains(l, "mas://agents/"+carol+"/steps") {
				t.Errorf("resources/list lacks carol's resources: %v", l)
			}

			var added server.AddTaskOut
			e.call("add_task", map[string]any{"task_name": "report", "task_intention": "Write a report."}, &added)
			e.waitUntil("list_changed after add_task", func() bool { return len(drain(e.listChanged)) > 0 })
			if l := listed(); !contains(l, added.ResourceURI) || !contains(l, added.ResourceURI+"/conversation") {
				t.Errorf("resources/list lacks the task's resources: %v", l)
			}
		})
	}
}

// wait calls wait_for_updates.
func (p *peer) wait(args map[string]any) server.WaitOut {
	p.t.Helper()
	var out server.WaitOut
	p.call("wait_for_updates", args, &out)
	return out
}

// cursorNow is the env's operator's wait_for_updates cursor once the
// server has taken in every event so far (its own numbering).
func (e *env) cursorNow() uint64 {
	e.t.Helper()
	e.srv.AwaitUpdatesHandled(e.stack.Sys.EventSeq())
	return e.srv.EventCursor(e.stack.Sys.OperatorID())
}

func TestWaitForUpdates(t *testing.T) {
	e := newEnv(t)
	start := e.cursorNow()
	f := e.startTask()
	latest := e.cursorNow()

	t.Run("after cursor", func(t *testing.T) {
		// The server takes events in as they come (on a busy machine a
		// call may see only part of them): follow the cursor to latest.
		var events []engine.Event
		for cursor := start; cursor < latest; {
			out := e.wait(map[string]any{"cursor": cursor, "max_events": 100000})
			if out.Lost || out.TimedOut || len(out.Events) == 0 {
				t.Fatalf("wait from %d = lost %v, timed out %v, %d events", cursor, out.Lost, out.TimedOut, len(out.Events))
			}
			if out.Cursor != out.Events[len(out.Events)-1].Seq {
				t.Errorf("cursor %d, want the last event's seq %d", out.Cursor, out.Events[len(out.Events)-1].Seq)
			}
			events, cursor = append(events, out.Events...), out.Cursor
		}
		for i, ev := range events {
			if ev.Seq != start+uint64(i)+1 {
				t.Fatalf("event %d has seq %d, want %d (every event after the cursor, in order)", i, ev.Seq, start+uint64(i)+1)
			}
		}
		if n := uint64(len(events)); start+n != latest {
			t.Errorf("%d events up to %d, want every one up to %d", n, start+n, latest)
		}
		if events[0].Kind != engine.EventTaskAdded || events[0].TaskID != f.TaskID {
			t.Errorf("first event %+v, want the task's task_added", events[0])
		}
	})
	t.Run("filter task_id", func(t *testing.T) {
		out := e.wait(map[string]any{"cursor": start, "task_id": f.TaskID, "max_events": 100000})
		if len(out.Events) == 0 {
			t.Fatal("no events")
		}
		for _, ev := range out.Events {
			if ev.TaskID != f.TaskID {
				t.Errorf("event %+v is not of task %s", ev, f.TaskID)
			}
		}
	})
	t.Run("filter agent_id", func(t *testing.T) {
		out := e.wait(map[string]any{"cursor": start, "agent_id": f.Alice, "max_events": 100000})
		if len(out.Events) == 0 || out.Events[0].Kind != engine.EventAgentAdded {
			t.Fatalf("events %+v, want alice's, from agent_added", out.Events)
		}
		for _, ev := range out.Events {
			if ev.AgentID != f.Alice {
				t.Errorf("event %+v is not of alice", ev)
			}
		}
	})
	t.Run("max_events pages", func(t *testing.T) {
		first := e.wait(map[string]any{"cursor": start, "max_events": 3})
		if len(first.Events) != 3 || first.Cursor != first.Events[2].Seq {
			t.Fatalf("max_events 3: %d events, cursor %d", len(first.Events), first.Cursor)
		}
		next := e.wait(map[string]any{"cursor": first.Cursor, "max_events": 1})
		if len(next.Events) != 1 || next.Events[0].Seq != first.Cursor+1 {
			t.Errorf("the next page starts at %+v, want seq %d", next.Events, first.Cursor+1)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		for _, cursor := range []uint64{latest, 0} {
			out := e.wait(map[string]any{"cursor": cursor, "timeout_seconds": 1})
			if !out.TimedOut || out.Cursor != latest || len(out.Events) != 0 || out.Lost {
				t.Errorf("cursor %d at rest: %+v, want timed_out with cursor %d", cursor, out, latest)
			}
		}
	})
	t.Run("wakes on a change", func(t *testing.T) {
		done := make(chan server.WaitOut, 1)
		go func() {
			res, err := e.client.CallTool(context.Background(), mcpCall("wait_for_updates", map[string]any{"cursor": latest, "timeout_seconds": 60}))
			var out server.WaitOut
			if err == nil && !res.IsError {
				_ = jsonDecode(res.StructuredContent, &out)
			}
			done <- out
		}()
		// The change may land before the call starts waiting: it is
		// returned either way, as it is after the cursor.
		var created instructionOut
		e.call("manage_agent", map[string]any{"action": "init_new_agent", "agent_config": map[string]any{"template": "reviewer", "name": "carol"}}, &created)
		select {
		case out := <-done:
			if out.TimedOut || len(out.Events) == 0 || out.Events[0].Kind != engine.EventAgentAdded || out.Events[0].AgentID != created.Result["agent_id"] {
				t.Errorf("wait = %+v, want carol's agent_added", out)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("wait_for_updates did not return on a change")
		}
	})
}

func jsonDecode(v, out any) error {
	return json.Unmarshal([]byte(jsonString(v)), out)
}

// TestWaitForUpdatesLost: a cursor older than the event log reports lost.
func TestWaitForUpdatesLost(t *testing.T) {
	e := newEnvWith(t, envOptions{Config: func(c *server.Config) { c.EventLog = 5 }})
	start := e.cursorNow()
	e.startTask()
	out := e.wait(map[string]any{"cursor": start, "max_events": 1000})
	if !out.Lost || len(out.Events) == 0 || len(out.Events) > 2*5 || out.Events[0].Seq <= start+1 {
		t.Errorf("wait from an old cursor = lost %v, %d events from %d; want lost and only the log's last events", out.Lost, len(out.Events), firstSeq(out))
	}
	// The task goes on after the answer: the cursor is the latest at the
	// time of the answer, at least its last event and at most what has
	// happened since.
	if now := e.cursorNow(); len(out.Events) > 0 && (out.Cursor < out.Events[len(out.Events)-1].Seq || out.Cursor > now) {
		t.Errorf("cursor %d, want between the last event returned (%d) and the latest (%d)", out.Cursor, out.Events[len(out.Events)-1].Seq, now)
	}
	again := e.wait(map[string]any{"cursor": out.Cursor, "timeout_seconds": 1})
	if again.Lost {
		t.Errorf("a current cursor reports lost")
	}
}

func firstSeq(out server.WaitOut) uint64 {
	if len(out.Events) == 0 {
		return 0
	}
	return out.Events[0].Seq
}

// TestWaitForUpdatesProgress: while it waits, wait_for_updates sends
// progress notifications to a call that carries a progress token, and only
// to such a call.
func TestWaitForUpdatesProgress(t *testing.T) {
	for _, version := range protocolVersions {
		t.Run(version, func(t *testing.T) {
			e := newEnvWith(t, envOptions{ProtocolVersion: version})
			params := mcpCall("wait_for_updates", map[string]any{"timeout_seconds": 3})
			params.SetProgressToken("wait-1")
			res, err := e.client.CallTool(context.Background(), params)
			if err != nil || res.IsError {
				t.Fatalf("wait_for_updates: %v %v", err, res)
			}
			e.waitUntil("progress notifications", func() bool { return len(e.progress) > 0 })
			var prev float64
			for _, p := range drain(e.progress) {
				if p.ProgressToken != "wait-1" || p.Total != 3 || p.Progress <= prev || p.Progress > 3 || p.Message == "" {
					t.Errorf("progress %+v, want token wait-1, total 3, increasing progress", p)
				}
				prev = p.Progress
			}
			e.call("wait_for_updates", map[string]any{"timeout_seconds": 2}, nil)
			if got := drain(e.progress); len(got) > 0 {
				t.Errorf("a call without a progress token got %d progress notifications", len(got))
			}
		})
	}
}

// TestLoggingNeedsSetLevel: step logs reach a session only once it set a
// level, and only at or above it.
func TestLoggingNeedsSetLevel(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	quiet := e.connect("")
	strict := e.connect("2025-11-25")
	if err := e.client.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	if err := strict.client.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "error"}); err != nil {
		t.Fatal(err)
	}
	f := e.startTask()
	e.waitUntil("step logs", func() bool { return len(e.logs) > 0 })
	for _, l := range drain(e.logs) {
		d, _ := l.Data.(map[string]any)
		if l.Logger != "mas" || (l.Level != "info" && l.Level != "warning") || d["agent_id"] == nil || d["step_id"] == nil || d["state"] == nil ||
			!strings.HasPrefix(fmt.Sprint(d["message"]), "agent ") {
			t.Errorf("log %+v", l)
		}
	}
	if n := len(drain(quiet.logs)); n > 0 {
		t.Errorf("a session that set no level got %d logs", n)
	}
	if n := len(drain(strict.logs)); n > 0 {
		t.Errorf("a session at level error got %d info logs", n)
	}
	// Once it sets a level, the quiet session gets the next steps' logs.
	if err := quiet.client.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
		t.Fatal(err)
	}
	e.call("send_message", map[string]any{"task_id": f.TaskID, "receiver": []string{f.Alice}, "content": "Markdown."}, nil)
	quiet.waitUntil("logs after setLevel", func() bool { return len(quiet.logs) > 0 })
}

// TestWaitForUpdatesUnknownFilter: a filter naming no task or agent can
// never match (IDs are server-made UUIDs); it must be refused, not waited on.
func TestWaitForUpdatesUnknownFilter(t *testing.T) {
	e := newEnv(t)
	for _, field := range []string{"task_id", "agent_id"} {
		txt := e.callErr("wait_for_updates", map[string]any{field: noSuchID, "timeout_seconds": 1})
		if !strings.Contains(txt, field) || !strings.Contains(txt, noSuchID) {
			t.Errorf("error %q does not name %s and the ID", txt, field)
		}
	}
}

// TestWaitForUpdatesCursorAhead: a cursor this server did not give —
// beyond the newest event, or of another process (a client that kept its
// cursor across a restart) — is refused with an error that names the
// cursor and says that cursors do not survive a restart, rather than
// silently waiting for the numbers to catch up or meaning another event.
// The error names no number of the server's (it would tell the newest).
func TestWaitForUpdatesCursorAhead(t *testing.T) {
	e := newEnv(t)
	e.startTask()
	now := e.cursorNow()
	// The same MAS behind another server: a restart as far as cursors go.
	other, err := server.New(server.Config{System: e.stack.Sys, Logger: e.stack.Log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	other.AwaitUpdatesHandled(e.stack.Sys.EventSeq())
	restarted := e.srv.EventCursor(e.stack.Sys.OperatorID()) // this server's; the other server's client passes it
	for name, tc := range map[string]struct {
		srv    *server.Server
		cursor uint64
	}{
		"ahead of the newest":   {e.srv, now + 1},
		"far ahead":             {e.srv, now + 1000},
		"the engine's count":    {e.srv, e.stack.Sys.EventSeq()},
		"of an earlier process": {other, restarted},
	} {
		t.Run(name, func(t *testing.T) {
			p := e.peer
			if tc.srv == other {
				ct, stt := mcp.NewInMemoryTransports()
				ss, err := other.MCP().Connect(context.Background(), stt, nil)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = ss.Close() })
				p = e.dial(ct, "")
			}
			res, err := p.client.CallTool(context.Background(), mcpCall("wait_for_updates", map[string]any{"cursor": tc.cursor, "timeout_seconds": 1}))
			if err != nil {
				t.Fatal(err)
			}
			txt := resultText(res)
			if !res.IsError || !strings.Contains(txt, fmt.Sprint(tc.cursor)) || !strings.Contains(txt, "restart") {
				t.Fatalf("cursor %d: isError %v %q; want a tool error naming the cursor and the restart", tc.cursor, res.IsError, txt)
			}
			if tc.cursor != now && strings.Contains(txt, fmt.Sprint(now)) {
				t.Errorf("the error %q names the newest number %d", txt, now)
			}
		})
	}
}

// TestWaitForUpdatesShutdown: a call waiting when the server closes
// returns at once, and not as a tool error (which a host would show the model
// as its own mistake): either a JSON-RPC error or a timed-out result with the
// cursor to resume from.
func TestWaitForUpdatesShutdown(t *testing.T) {
	e := newEnv(t)
	latest := e.cursorNow()
	type result struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan result, 1)
	params := mcpCall("wait_for_updates", map[string]any{"cursor": latest, "timeout_seconds": 300})
	params.SetProgressToken("shutdown")
	go func() {
		res, err := e.client.CallTool(context.Background(), params)
		done <- result{res, err}
	}()
	// Close while the call waits: its first progress notification (after
	// a second) says it is in its wait.
	e.waitUntil("wait_for_updates to be waiting", func() bool { return len(e.progress) > 0 || len(done) > 0 })
	if len(done) > 0 {
		t.Fatalf("wait_for_updates returned before the server closed: %+v", <-done)
	}
	if err := e.srv.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil {
			return
		}
		var out server.WaitOut
		_ = jsonDecode(r.res.StructuredContent, &out)
		if r.res.IsError || !out.TimedOut || out.Cursor != latest {
			t.Errorf("wait_for_updates during shutdown: isError %v %q, output %+v; want a JSON-RPC error or timed_out with cursor %d",
				r.res.IsError, resultText(r.res), out, latest)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("wait_for_updates did not return when the server closed")
	}
}
