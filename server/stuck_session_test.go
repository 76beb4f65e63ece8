package server_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/server"
)

// smallWrites is a listener whose connections have a small send buffer,
// so that the server's writes to a client that stopped reading block soon.
type smallWrites struct{ net.Listener }

func (l smallWrites) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

// serveSmallWrites serves e's server's HTTP handler over connections
// with a small send buffer (smallWrites).
func serveSmallWrites(t *testing.T, e *env) *httptest.Server {
	ts := httptest.NewUnstartedServer(e.srv.Handler())
	ts.Listener = smallWrites{ts.Listener}
	ts.Start()
	t.Cleanup(ts.Close)
	return ts
}

// smallReads is a client whose connections have a small receive buffer.
func smallReads(t *testing.T) *http.Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(4096)
		}
		return c, err
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// rawSession is a stateful streamable HTTP session opened by hand, over
// connections with a small receive buffer, whose standalone stream the
// test may stop reading.
type rawSession struct {
	t     *testing.T
	url   string
	token string
	hc    *http.Client
	id    string
}

func openRawSession(t *testing.T, url, token string) *rawSession {
	t.Helper()
	r := &rawSession{t: t, url: url, token: token, hc: smallReads(t)}
	r.post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"stuck","version":"1"}}}`)
	r.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	r.post(`{"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"info"}}`)
	t.Cleanup(func() {
		if resp, err := r.hc.Do(r.request(http.MethodDelete, "")); err == nil {
			_ = resp.Body.Close()
		}
	})
	return r
}

func (r *rawSession) request(method, body string) *http.Request {
	r.t.Helper()
	req, err := http.NewRequest(method, r.url+"/mcp", strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+r.token)
	if r.id != "" {
		req.Header.Set("Mcp-Session-Id", r.id)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	return req
}

// post sends one message and reads its whole answer.
func (r *rawSession) post(body string) {
	r.t.Helper()
	req := r.request(http.MethodPost, body)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := r.hc.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		r.t.Fatalf("%s: %s: %s", body, resp.Status, answer)
	}
	if r.id == "" {
		r.id = resp.Header.Get("Mcp-Session-Id")
	}
}

// listen opens the session's standalone stream and returns it unread.
func (r *rawSession) listen() *http.Response {
	r.t.Helper()
	req := r.request(http.MethodGet, "")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := r.hc.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		r.t.Fatalf("GET stream: %s", resp.Status)
	}
	return resp
}

// TestStuckSessionIsCut: a client that keeps its stream open but stops
// reading it (bea's, over a real TCP connection whose buffers fill) is cut
// once its oldest notification has waited limits.stuck_session_timeout:
// the connection is closed, that is logged once, its queue in the outbox
// is dropped (its goroutine returns), and Server.Close returns. Ann's
// session gets its notifications meanwhile and after.
func TestStuckSessionIsCut(t *testing.T) {
	var ann, bea string
	e := newEnvWith(t, stuckOptions(t, &ann, &bea))
	ts := serveSmallWrites(t, e)

	annPeer := e.httpPeer(ts.URL, tokenAnn, "2025-11-25")
	if err := annPeer.client.SetLoggingLevel(context.Background(), &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	annGets := func(note string) {
		t.Helper()
		if n := e.srv.NotifyLog(ann, note); n != 1 {
			t.Fatalf("ann has %d sessions, want 1", n)
		}
		annPeer.waitUntil("ann's notification "+note, func() bool {
			for _, l := range drain(annPeer.logs) {
				if l.Data == note {
					return true
				}
			}
			return false
		})
	}

	stuck := openRawSession(t, ts.URL, tokenBea)
	stream := stuck.listen()
	t.Cleanup(func() { _ = stream.Body.Close() })
	big := strings.Repeat("x", 128<<10)
	for range 16 {
		if n := e.srv.NotifyLog(bea, big); n != 1 {
			t.Fatalf("bea has %d sessions, want 1", n)
		}
	}
	annGets("while bea is stuck")

	awaitCut(t, e, stream, cutLine, e.srv.QueuesEmptied())
	annGets("after bea was cut")

	logs := closeAfterCut(t, e)
	cutNamesBea(t, logs, bea)
}

// stuckOptions configures two operators, ann and bea, with bearer tokens
// (tokenOperators), and limits.stuck_session_timeout of a second, then
// applies adjust.
func stuckOptions(t *testing.T, ann, bea *string, adjust ...func(*server.Config)) envOptions {
	tok := tokenOperators(t, ann, bea)
	return envOptions{Config: func(c *server.Config) {
		tok.Config(c)
		c.Limits.StuckSession = time.Second
		for _, f := range adjust {
			f(c)
		}
	}}
}

// cutNamesBea checks that the log of bea's stream cut names her and the
// limit's key, and does not hold her token.
func cutNamesBea(t *testing.T, logs, bea string) {
	t.Helper()
	for _, want := range []string{"operator=" + bea, "key=limits.stuck_session_timeout"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the cut's log line does not name %s", want)
		}
	}
	if strings.Contains(logs, tokenBea) {
		t.Error("the log holds bea's token")
	}
}

// cutLine is what the log says of a stuck session cut.
const cutLine = "its streams are cut"

// awaitCut waits (up to a generous bound) for the cut of a stuck stream
// to be logged (line), then checks that the stream, unread so far, ends
// (the connection was closed), and that released yields: what the stream
// held was given back.
func awaitCut(t *testing.T, e *env, stream *http.Response, line string, released <-chan struct{}) {
	t.Helper()
	if !e.stack.Logs.WaitFor(20*time.Second, nil, func(logs string) bool { return strings.Contains(logs, line) }) {
		t.Fatal("timed out waiting for the stuck stream to be cut")
	}
	awaitEnd(t, stream)
	select {
	case <-released:
	case <-time.After(20 * time.Second):
		t.Fatal("timed out waiting for what the stuck stream held to be given back")
	}
}

// awaitEnd checks that stream, unread so far, ends: its connection was
// closed.
func awaitEnd(t *testing.T, stream *http.Response) {
	t.Helper()
	read := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, stream.Body)
		read <- err
	}()
	select {
	case <-read:
	case <-time.After(20 * time.Second):
		t.Fatal("the stuck stream is still open")
	}
}

// awaitClose checks that Server.Close returns.
func awaitClose(t *testing.T, e *env) {
	t.Helper()
	closed := make(chan struct{})
	go func() {
		_ = e.srv.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("Server.Close does not return")
	}
}

// closeAfterCut checks that Server.Close returns, and that the cut was
// logged once; it returns the log.
func closeAfterCut(t *testing.T, e *env) string {
	t.Helper()
	awaitClose(t, e)
	logs := e.stack.Logs.String()
	if n := strings.Count(logs, cutLine); n != 1 {
		t.Errorf("the cut is logged %d times, want once:\n%s", n, logs)
	}
	return logs
}

// TestStuckSSESessionIsCut: a legacy SSE client that stops reading its
// stream is cut as a streamable HTTP one is (TestStuckSessionIsCut): the
// session's stream is found through the session, which has no ID.
func TestStuckSSESessionIsCut(t *testing.T) {
	e := newEnvWith(t, envOptions{Config: func(c *server.Config) { c.Limits.StuckSession = time.Second }})
	ts := serveSmallWrites(t, e)

	hc := smallReads(t)
	req, err := http.NewRequest(http.MethodGet, ts.URL+"/sse", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	stream, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stream.Body.Close() })
	events := bufio.NewReader(stream.Body)
	// next returns the data of the stream's next event.
	next := func() string {
		t.Helper()
		for {
			line, err := events.ReadString('\n')
			if err != nil {
				t.Fatalf("SSE stream: %v", err)
			}
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				return strings.TrimSpace(data)
			}
		}
	}
	endpoint := next()
	send := func(body, answer string) {
		t.Helper()
		resp, err := hc.Post(ts.URL+endpoint, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode >= 300 {
			t.Fatalf("%s: %s", body, resp.Status)
		}
		// The answer comes on the stream, after what came before it.
		for answer != "" {
			if strings.Contains(next(), answer) {
				break
			}
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"stuck","version":"1"}}}`, `"id":1`)
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, "")
	send(`{"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"info"}}`, `"id":2`)

	// No more reads: the SSE session (and the env's in-memory one, which
	// set no level) are the default operator's.
	big := strings.Repeat("x", 128<<10)
	for range 16 {
		e.srv.NotifyLog(e.stack.Sys.OperatorID(), big)
	}
	awaitCut(t, e, stream, cutLine, e.srv.QueuesEmptied())
	closeAfterCut(t, e)
}

// TestStuckEventStreamIsCut: a web monitor client that keeps its
// /api/events stream open but stops reading it (bea's, over a real TCP
// connection whose buffers fill) is cut once a write to it has waited
// limits.stuck_session_timeout: the connection is closed, its handler
// returns (its place among the event streams, and its subscription to
// the MAS's events, are given back), and that is logged once, naming
// bea and the limit's key. Ann's stream goes on meanwhile and after.
func TestStuckEventStreamIsCut(t *testing.T) {
	var ann, bea string
	m := newMonitorEnvOn(t, stuckOptions(t, &ann, &bea), func(l net.Listener) net.Listener { return smallWrites{l} })
	sys := m.stack.Sys
	addTask := func(op, name string) string {
		t.Helper()
		id, err := sys.AddTask(op, engine.AddTaskRequest{TaskName: name, TaskIntention: "Research a topic and write a report."})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	annEvents := openEvents(t, m.ts.Client(), m.ts.URL, tokenAnn)
	annGets := func(taskID string) {
		t.Helper()
		for {
			if ev := annEvents.next(t, 20*time.Second); ev.Event == string(engine.EventTaskAdded) && strings.Contains(ev.Data, taskID) {
				return
			}
		}
	}

	req, err := http.NewRequest(http.MethodGet, m.ts.URL+"/api/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tokenBea)
	stream, err := smallReads(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stream.Body.Close() })
	if stream.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/events: %s", stream.Status)
	}
	// Bea reads no more; her tasks' events (hundreds of kilobytes) fill
	// the connection's buffers.
	for i := range 10 {
		addTask(bea, fmt.Sprint("bea's ", i))
	}
	annGets(addTask(ann, "ann's while bea is stuck"))

	const cut = "its /api/events stream is cut"
	awaitCut(t, m.env, stream, cut, m.eventsDone)
	if _, events, _, _, _ := m.srv.Held(); events != 1 {
		t.Errorf("%d event streams held after the stuck one was cut, want ann's only", events)
	}
	annGets(addTask(ann, "ann's after bea was cut"))

	logs := m.stack.Logs.String()
	if n := strings.Count(logs, cut); n != 1 {
		t.Errorf("the cut is logged %d times, want once:\n%s", n, logs)
	}
	cutNamesBea(t, logs, bea)
}

// TestStuckListenStreamIsCut: a subscriptions/listen stream of protocol
// 2026-07-28 (a stateless request, its stream bound to its session as a
// legacy SSE one is) whose client stops reading it (bea's, over a real
// TCP connection whose buffers fill) is cut once its oldest notification
// has waited limits.stuck_session_timeout: that is logged once, naming bea
// and the key, the connection is closed, and what the stream held is
// given back: its handler returned (its place among the long-lived
// requests), its subscriptions are gone, and its queue in the outbox.
func TestStuckListenStreamIsCut(t *testing.T) {
	var ann, bea string
	e := newEnvWith(t, stuckOptions(t, &ann, &bea, func(c *server.Config) { c.Coalesce = time.Millisecond }))
	ts := serveSmallWrites(t, e)

	mgr := "mas://agents/" + e.stack.Sys.ManagerID()
	uris := []string{"mas://tasks", "mas://agents", mgr, mgr + "/steps", "mas://operators/" + bea + "/inbox"}
	stream, err := smallReads(t).Do(statelessRequest(t, context.Background(), ts.URL, tokenBea, "subscriptions/listen",
		map[string]any{"notifications": map[string]any{"resourceSubscriptions": uris}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stream.Body.Close() })
	if stream.StatusCode != http.StatusOK {
		t.Fatalf("subscriptions/listen: %s", stream.Status)
	}
	for rd := bufio.NewReader(stream.Body); ; {
		line, err := rd.ReadString('\n')
		if strings.Contains(line, "notifications/subscriptions/acknowledged") {
			break
		}
		if err != nil {
			t.Fatalf("subscriptions/listen: the stream ended before its acknowledgement: %v", err)
		}
	}
	if _, n := e.srv.LongRequests(bea); n != 1 || e.srv.SubscribedSessions() != 1 {
		t.Fatalf("bea holds %d long requests, %d sessions are subscribed; want her listen stream's", n, e.srv.SubscribedSessions())
	}
	// The handler has returned once bea holds no long request.
	returned := make(chan struct{})
	go func() {
		e.srv.AwaitLongRequests(bea, 0)
		close(returned)
	}()

	// Bea reads no more; her tasks change the resources again and again
	// (some 12 notifications a task, folded by the 1 ms window: 480 in
	// all, far more than the connection's buffers hold).
	for i := range 40 {
		if _, err := e.stack.Sys.AddTask(bea, engine.AddTaskRequest{TaskName: fmt.Sprint("bea's ", i), TaskIntention: "Research a topic and write a report."}); err != nil {
			t.Fatal(err)
		}
	}
	awaitCut(t, e, stream, cutLine, returned)
	select {
	case <-e.srv.QueuesEmptied():
	case <-time.After(20 * time.Second):
		t.Fatal("timed out waiting for the stuck stream's queue to be dropped")
	}
	if n := e.srv.SubscribedSessions(); n != 0 {
		t.Errorf("%d sessions are subscribed after the listen stream was cut, want none", n)
	}
	cutNamesBea(t, closeAfterCut(t, e), bea)
}

// TestCloseCutsStuckSession: Server.Close does not wait
// limits.stuck_session_timeout (an hour here) for a session whose client
// stopped reading in the middle of a notification: it cuts the streams of
// the sessions whose notifications are being written, and returns.
func TestCloseCutsStuckSession(t *testing.T) {
	var ann, bea string
	e := newEnvWith(t, stuckOptions(t, &ann, &bea, func(c *server.Config) { c.Limits.StuckSession = time.Hour }))
	ts := serveSmallWrites(t, e)

	stuck := openRawSession(t, ts.URL, tokenBea)
	stream := stuck.listen()
	t.Cleanup(func() { _ = stream.Body.Close() })
	if n := e.srv.NotifyLog(bea, strings.Repeat("x", 128<<10)); n != 1 {
		t.Fatalf("bea has %d sessions, want 1", n)
	}
	// Bea reads the notification's start, and no more: the rest is more
	// than the connection's buffers hold, so its write cannot end.
	var head []byte
	for buf := make([]byte, 512); !strings.Contains(string(head), "notifications/message"); {
		n, err := stream.Body.Read(buf)
		if err != nil {
			t.Fatalf("bea's stream ended before her notification: %v", err)
		}
		head = append(head, buf[:n]...)
	}

	awaitClose(t, e)
	awaitEnd(t, stream)
}
