package server_test

import (
	"context"
	"io"
	"net"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/server"
)

// stallingReader is a client's end of an in-memory connection that reads
// until stall is called; from then on its reads wait until it is closed,
// so the server's writes to the connection block: a client that stopped
// reading its stream.
type stallingReader struct {
	conn net.Conn

	stalled   chan struct{} // closed by stall
	waiting   chan struct{} // closed once a read waits on the stall
	closed    chan struct{} // closed by Close
	stallOnce sync.Once
	waitOnce  sync.Once
	closeOnce sync.Once
}

func (r *stallingReader) stall() { r.stallOnce.Do(func() { close(r.stalled) }) }

func (r *stallingReader) Read(p []byte) (int, error) {
	select {
	case <-r.stalled:
		r.waitOnce.Do(func() { close(r.waiting) })
		<-r.closed
		return 0, io.EOF
	default:
	}
	return r.conn.Read(p)
}

func (r *stallingReader) Close() error {
	r.closeOnce.Do(func() { close(r.closed) })
	return r.conn.Close()
}

// connectStalling connects a client of the default operator over an
// in-memory connection whose reading it can stop (stallingReader).
func (e *env) connectStalling(version string) (*peer, *stallingReader) {
	e.t.Helper()
	c1, c2 := net.Pipe()
	r := &stallingReader{conn: c1, stalled: make(chan struct{}), waiting: make(chan struct{}), closed: make(chan struct{})}
	ss, err := e.srv.MCP().Connect(context.Background(), &mcp.IOTransport{Reader: c2, Writer: c2}, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = ss.Close() })
	e.t.Cleanup(func() { _ = r.Close() })
	return e.dial(&mcp.IOTransport{Reader: r, Writer: c1}, version), r
}

// stallBehindTasks stops the stuck client reading, adds a task of the
// default operator, waits until the client waits on the stall (a read
// under way may still take one message), and adds a second task, whose
// notifications can no longer be written to it.
func stallBehindTasks(t *testing.T, sys *engine.System, reader *stallingReader) {
	t.Helper()
	reader.stall()
	addDefault := func(name string) {
		t.Helper()
		if _, err := sys.AddTask(sys.OperatorID(), engine.AddTaskRequest{TaskName: name, TaskIntention: "Research a topic and write a report."}); err != nil {
			t.Fatal(err)
		}
	}
	addDefault("default's first")
	guard := time.NewTimer(20 * time.Second)
	defer guard.Stop()
	select {
	case <-reader.waiting:
	case <-guard.C:
		t.Fatal("timed out waiting for the stuck client to stop reading")
	}
	addDefault("default's second")
}

// TestStuckClientDelaysOnlyItself: a client that stops reading its stream
// (the default operator's, subscribed and logging) holds back its own
// notifications only. Ann's notifications of her own work still come —
// resources/updated, logging — and wait_for_updates still sees her events.
func TestStuckClientDelaysOnlyItself(t *testing.T) {
	o := newOperatorsWith(t, "2025-11-25", func(c *server.Config) { c.Coalesce = time.Millisecond })
	sys := o.stack.Sys
	ctx := context.Background()
	stuck, reader := o.connectStalling("2025-11-25")
	ann := o.annPeer
	for _, p := range []*peer{stuck, ann} {
		p.subscribe("mas://tasks")
		if err := p.client.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
			t.Fatal(err)
		}
	}

	// The stuck client reads no more.
	stallBehindTasks(t, sys, reader)

	o.srv.AwaitUpdatesHandled(sys.EventSeq())
	cursor := o.srv.EventCursor(o.ann)
	seen := len(ann.noticesOf("mas://tasks"))
	var added server.AddTaskOut
	ann.call("add_task", map[string]any{"task_name": "ann's", "task_intention": "Research a topic and write a report."}, &added)
	ann.waitUntil("ann's notification of her task in mas://tasks", func() bool { return len(ann.noticesOf("mas://tasks")) > seen })
	var logged bool
	ann.waitUntil("a logging notification of a step in ann's task", func() bool {
		for _, l := range drain(ann.logs) {
			if d, _ := l.Data.(map[string]any); d["task_id"] == added.TaskID {
				logged = true
			}
		}
		return logged
	})
	var out server.WaitOut
	ann.call("wait_for_updates", map[string]any{"cursor": cursor, "task_id": added.TaskID, "timeout_seconds": 20}, &out)
	if out.TimedOut || len(out.Events) == 0 {
		t.Errorf("ann's wait_for_updates = %+v, want her task's events", out)
	}
}

// TestStuckClientHoldsNotOthersListChanged: resources/list_changed goes
// to each session from its own queue too. A client that stopped reading,
// connected before ann (go-sdk notifies sessions in that order, and
// waits for each write), does not hold back the list_changed of ann's
// new task.
func TestStuckClientHoldsNotOthersListChanged(t *testing.T) {
	o := &operators{}
	o.env = newEnvWith(t, tokenOperators(t, &o.ann, &o.bea))
	ts := httptest.NewServer(o.srv.Handler())
	t.Cleanup(ts.Close)
	sys := o.stack.Sys
	_, reader := o.connectStalling("2025-11-25")
	stallBehindTasks(t, sys, reader)

	ann := o.httpPeer(ts.URL, tokenAnn, "2025-11-25")
	drain(ann.listChanged)
	ann.call("add_task", map[string]any{"task_name": "ann's", "task_intention": "Research a topic and write a report."}, nil)
	ann.waitUntil("a resources/list_changed for ann's new task", func() bool { return len(drain(ann.listChanged)) > 0 })
}
