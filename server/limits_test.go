package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/internal/teststack"
	"github.com/mas-mcp/mas-mcp/server"
)

// Caps over HTTP (issue 13, "bounded everything"): each is reached here
// with small limits; the refused request gets the documented status with
// Retry-After and a message naming the limit; what was held is released
// when the client closes it or it expires.

// capsEnv is an env with two token operators (ann, bea), the given limits,
// and its HTTP handler served by an httptest server. done receives the
// path of each request once its handler returned.
type capsEnv struct {
	*env
	ann, bea string
	url      string
	hc       *http.Client
	done     chan string
}

func newCapsEnv(t *testing.T, adjust func(*server.Config)) *capsEnv {
	t.Helper()
	c := &capsEnv{done: make(chan string, 64)}
	tok := tokenOperators(t, &c.ann, &c.bea)
	c.env = newEnvWith(t, envOptions{Config: func(cfg *server.Config) {
		tok.Config(cfg)
		adjust(cfg)
	}})
	h := c.srv.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		c.done <- r.Method + " " + r.URL.Path
	}))
	t.Cleanup(ts.Close)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c.url, c.hc = ts.URL, &http.Client{Transport: tr}
	return c
}

// reply is a finished HTTP exchange.
type reply struct {
	status int
	header http.Header
	body   string
}

// do sends a request with the operator's bearer token and reads the whole
// answer (not for streams).
func (c *capsEnv) do(method, path, token, body string, header ...string) reply {
	c.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, c.url+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	<-c.done
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// refused checks a refusal: status, a Retry-After, and the words.
func refused(t *testing.T, what string, r reply, status int, words ...string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("%s: status %d, want %d; body %s", what, r.status, status, r.body)
	}
	if r.header.Get("Retry-After") == "" {
		t.Errorf("%s: no Retry-After", what)
	}
	for _, w := range words {
		if !strings.Contains(r.body, w) {
			t.Errorf("%s: body %q does not mention %q", what, r.body, w)
		}
	}
}

const initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"caps","version":"1"}}}`

// openSession initializes a stateful MCP session over HTTP.
func (c *capsEnv) openSession(token string) reply {
	c.t.Helper()
	return c.do(http.MethodPost, "/mcp", token, initializeBody,
		"Content-Type", "application/json", "Accept", "application/json, text/event-stream", "Mcp-Protocol-Version", "2025-11-25")
}

// session opens a session that must be admitted and returns its ID.
func (c *capsEnv) session(token string) string {
	c.t.Helper()
	r := c.openSession(token)
	id := r.header.Get("Mcp-Session-Id")
	if r.status != http.StatusOK || id == "" {
		c.t.Fatalf("initialize: status %d, session %q; body %s", r.status, id, r.body)
	}
	return id
}

// closeSession deletes a session and waits until the SDK has closed it.
func (c *capsEnv) closeSession(token, id string) {
	c.t.Helper()
	ss := c.serverSession(id)
	if r := c.do(http.MethodDelete, "/mcp", token, "", "Mcp-Session-Id", id); r.status >= 300 {
		c.t.Fatalf("DELETE session: status %d: %s", r.status, r.body)
	}
	_ = ss.Wait()
}

func (c *capsEnv) serverSession(id string) interface{ Wait() error } {
	c.t.Helper()
	for ss := range c.srv.MCP().Sessions() {
		if ss.ID() == id {
			return ss
		}
	}
	c.t.Fatalf("no server session %s", id)
	return nil
}

// baseline checks the server holds nothing for clients any more.
func (c *capsEnv) baseline() {
	c.t.Helper()
	s, e, sse, _, _ := c.srv.Held()
	long, _ := c.srv.LongRequests("")
	if s != 0 || e != 0 || sse != 0 || long != 0 {
		c.t.Errorf("held after everything closed: %d sessions, %d event streams, %d SSE streams, %d long-lived requests; want none", s, e, sse, long)
	}
}

func TestSessionCaps(t *testing.T) {
	c := newCapsEnv(t, func(cfg *server.Config) {
		cfg.Limits.Sessions, cfg.Limits.SessionsPerOperator = 3, 2
	})
	a1, a2 := c.session(tokenAnn), c.session(tokenAnn)
	refused(t, "ann's third session", c.openSession(tokenAnn), http.StatusTooManyRequests, "operator "+c.ann, "limits.sessions_per_operator")
	b1 := c.session(tokenBea)
	refused(t, "a fourth session", c.openSession(tokenBea), http.StatusServiceUnavailable, "limits.sessions")

	// Sessions already open keep working at the cap.
	ping := c.do(http.MethodPost, "/mcp", tokenAnn, `{"jsonrpc":"2.0","id":2,"method":"ping"}`,
		"Content-Type", "application/json", "Accept", "application/json, text/event-stream",
		"Mcp-Session-Id", a2, "Mcp-Protocol-Version", "2025-11-25")
	if ping.status != http.StatusOK {
		t.Errorf("ping on an open session at the cap: status %d: %s", ping.status, ping.body)
	}

	// A closed session frees its place.
	c.closeSession(tokenAnn, a1)
	b2 := c.session(tokenBea)
	c.closeSession(tokenAnn, a2)
	c.closeSession(tokenBea, b1)
	c.closeSession(tokenBea, b2)
	c.baseline()
}

// TestSessionIdleExpiry: an idle session is closed after the session
// timeout and no longer counts.
func TestSessionIdleExpiry(t *testing.T) {
	c := newCapsEnv(t, func(cfg *server.Config) {
		cfg.Limits.SessionsPerOperator = 1
		cfg.HTTP.SessionTimeout = 50 * time.Millisecond
	})
	id := c.session(tokenAnn)
	ss := c.serverSession(id)
	refused(t, "ann's second session", c.openSession(tokenAnn), http.StatusTooManyRequests, "limits.sessions_per_operator")
	_ = ss.Wait() // the SDK closes it once idle
	c.baseline()
	c.closeSession(tokenAnn, c.session(tokenAnn))
}

// openStream opens a GET stream (/api/events, /sse) with a token. Admitted
// (200), stop closes it and waits until its handler returned; refused, stop
// is nil and the refusal is read whole.
func (c *capsEnv) openStream(path, token string) (stop func(), r reply) {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.hc.Do(req)
	if err != nil {
		cancel()
		c.t.Fatalf("GET %s: %v", path, err)
	}
	return c.held(resp, cancel)
}

// held is what a long-lived request's response gives: admitted (200), a
// stop that closes it and waits until its handler returned; refused, no
// stop and the refusal read whole.
func (c *capsEnv) held(resp *http.Response, cancel context.CancelFunc) (stop func(), r reply) {
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		<-c.done
		return nil, reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			resp.Body.Close()
			<-c.done // the handler returned: its place is free
		})
	}
	c.t.Cleanup(stop)
	return stop, reply{status: resp.StatusCode, header: resp.Header}
}

func TestStreamCaps(t *testing.T) {
	for _, tc := range []struct {
		path     string
		opKey    string
		totalKey string
		limits   func(*server.Limits)
	}{
		{"/api/events", "limits.event_streams_per_operator", "limits.event_streams", func(l *server.Limits) { l.EventStreams, l.EventStreamsPerOperator = 3, 2 }},
		{"/sse", "limits.sse_streams_per_operator", "limits.sse_streams", func(l *server.Limits) { l.SSEStreams, l.SSEStreamsPerOperator = 3, 2 }},
	} {
		t.Run(strings.Trim(tc.path, "/"), func(t *testing.T) {
			c := newCapsEnv(t, func(cfg *server.Config) { tc.limits(&cfg.Limits) })
			a1, _ := c.openStream(tc.path, tokenAnn)
			a2, _ := c.openStream(tc.path, tokenAnn)
			_, r := c.openStream(tc.path, tokenAnn)
			refused(t, "ann's third stream", r, http.StatusTooManyRequests, "operator "+c.ann, tc.opKey)
			b1, _ := c.openStream(tc.path, tokenBea)
			_, r = c.openStream(tc.path, tokenBea)
			refused(t, "a fourth stream", r, http.StatusServiceUnavailable, tc.totalKey)
			a1()
			b2, _ := c.openStream(tc.path, tokenBea)
			for _, stop := range []func(){a2, b1, b2} {
				stop()
			}
			c.baseline()
		})
	}
}

// TestBodyTimeout: a body that stops arriving ends the request after
// the body timeout (the handler reads an error; the connection is closed);
// a long answer after a body that arrived is not cut.
func TestBodyTimeout(t *testing.T) {
	c := newCapsEnv(t, func(cfg *server.Config) { cfg.Limits.BodyTimeout = 100 * time.Millisecond })
	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequest(http.MethodPost, c.url+"/api/send_message", pr)
	req.ContentLength = 1000
	req.Header.Set("Authorization", "Bearer "+tokenAnn)
	req.Header.Set("Content-Type", "application/json")
	go func() { _, _ = pw.Write([]byte(`{"task_id": "`)) }() // then nothing more
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatalf("a stalled body: %v, want an answer", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "limits.body_timeout") {
		t.Errorf("a stalled body: status %d, body %s; want 400 naming limits.body_timeout", resp.StatusCode, b)
	}
	<-c.done

	// wait_for_updates answers after a second, ten times the body timeout.
	p := c.httpPeer(c.url, tokenAnn, "2025-11-25")
	var out server.WaitOut
	p.call("wait_for_updates", map[string]any{"timeout_seconds": 1, "task_id": c.stack.Sys.BaseTaskID()}, &out)
	if diff := cmp.Diff(true, out.TimedOut); diff != "" {
		t.Errorf("wait_for_updates after the body arrived: timed_out (-want +got):\n%s", diff)
	}
}

// statelessRequest is a POST /mcp of protocol 2026-07-28 calling method
// (for a tools/call, the tool named in params) with the operator's token.
func (c *capsEnv) statelessRequest(ctx context.Context, token, method string, params map[string]any) *http.Request {
	c.t.Helper()
	return statelessRequest(c.t, ctx, c.url, token, method, params)
}

// statelessRequest is a POST to url's /mcp of protocol 2026-07-28 calling
// method (for a tools/call, the tool named in params) with token.
func statelessRequest(t *testing.T, ctx context.Context, url, token, method string, params map[string]any) *http.Request {
	t.Helper()
	params["_meta"] = map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "caps", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": map[string]any{}}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/mcp", bytes.NewReader(body))
	for k, v := range map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/json",
		"Accept": "application/json, text/event-stream", "Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": method} {
		req.Header.Set(k, v)
	}
	if name, ok := params["name"].(string); ok && method == "tools/call" {
		req.Header.Set("Mcp-Name", name)
	}
	return req
}

// doStateless sends a request of protocol 2026-07-28 and reads its whole
// answer (not for listen streams, nor long polls that are to wait).
func (c *capsEnv) doStateless(token, method string, params map[string]any) reply {
	c.t.Helper()
	resp, err := c.hc.Do(c.statelessRequest(context.Background(), token, method, params))
	if err != nil {
		c.t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	<-c.done
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// openListen opens a subscriptions/listen stream (protocol 2026-07-28) to
// mas://tasks. Admitted, it returns once the server acknowledged the
// subscription, and stop closes the stream and waits until its handler
// returned; refused, stop is nil and the refusal is read whole.
func (c *capsEnv) openListen(token string) (stop func(), r reply) {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := c.hc.Do(c.statelessRequest(ctx, token, "subscriptions/listen",
		map[string]any{"notifications": map[string]any{"resourceSubscriptions": []string{"mas://tasks"}}}))
	if err != nil {
		cancel()
		c.t.Fatalf("subscriptions/listen: %v", err)
	}
	if stop, r = c.held(resp, cancel); stop == nil {
		return nil, r
	}
	for rd := bufio.NewReader(resp.Body); ; {
		line, err := rd.ReadString('\n')
		if strings.Contains(line, "notifications/subscriptions/acknowledged") {
			break
		}
		if err != nil {
			c.t.Fatalf("subscriptions/listen: the stream ended before its acknowledgement: %v", err)
		}
	}
	return stop, reply{status: resp.StatusCode, header: resp.Header}
}

// listen opens a listen stream that must be admitted and returns its stop.
func (c *capsEnv) listen(token string) (stop func()) {
	c.t.Helper()
	stop, r := c.openListen(token)
	if stop == nil {
		c.t.Fatalf("subscriptions/listen: status %d: %s", r.status, r.body)
	}
	return stop
}

// startPoll starts a wait_for_updates long poll (protocol 2026-07-28) of
// 300 s, on the base task (nothing changes it here); stop cancels it (the
// client goes away) and waits until its handler returned.
func (c *capsEnv) startPoll(token string) (stop func()) {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req := c.statelessRequest(ctx, token, "tools/call", map[string]any{"name": "wait_for_updates",
		"arguments": map[string]any{"timeout_seconds": 300, "task_id": c.stack.Sys.BaseTaskID()}})
	ended := make(chan error, 1)
	go func() {
		resp, err := c.hc.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			err = fmt.Errorf("answered with status %d before it was cancelled", resp.StatusCode)
		}
		ended <- err
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-ended; !errors.Is(err, context.Canceled) {
				c.t.Errorf("wait_for_updates: %v", err)
			}
			select {
			case <-c.done: // the handler returned: its place is free
			case <-time.After(20 * time.Second): // a hang, not a performance bound
				_ = c.srv.Close() // ends the wait, so that the test can end
				c.t.Fatal("wait_for_updates: its handler still waits after its client went away")
			}
		})
	}
	c.t.Cleanup(stop)
	return stop
}

// awaitLong waits until op holds n long-lived requests of srv, failing
// after a generous bound (for a hang, not a performance assertion).
func awaitLong(t *testing.T, srv *server.Server, op string, n int) {
	t.Helper()
	held := make(chan struct{})
	go func() {
		srv.AwaitLongRequests(op, n)
		close(held)
	}()
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		_, got := srv.LongRequests(op)
		t.Fatalf("timed out waiting for %s to hold %d long-lived requests (holds %d)", op, n, got)
	}
}

// TestLongRequestCaps: the long-lived requests of protocol 2026-07-28
// (stateless, outside the session caps) are capped together per operator
// (429) and in total (503), with Retry-After and the key named: listen
// streams, wait_for_updates long polls and tasks/result waits; short
// requests pass at the cap; a place is free again once its request ends,
// or its client goes away (a long poll of 300 s too).
func TestLongRequestCaps(t *testing.T) {
	c := newCapsEnv(t, func(cfg *server.Config) {
		cfg.Limits.LongRequests, cfg.Limits.LongRequestsPerOperator = 3, 2
	})
	a1 := c.listen(tokenAnn)
	a2 := c.listen(tokenAnn)
	_, r := c.openListen(tokenAnn)
	refused(t, "ann's third listen stream", r, http.StatusTooManyRequests, "operator "+c.ann, "limits.long_requests_per_operator")
	refused(t, "ann's long poll at her share", c.doStateless(tokenAnn, "tools/call", map[string]any{"name": "wait_for_updates",
		"arguments": map[string]any{"timeout_seconds": 1}}), http.StatusTooManyRequests, "limits.long_requests_per_operator")
	refused(t, "ann's tasks/result at her share", c.doStateless(tokenAnn, "tasks/result", map[string]any{"taskId": c.stack.Sys.BaseTaskID()}),
		http.StatusTooManyRequests, "limits.long_requests_per_operator")
	if r := c.doStateless(tokenAnn, "tools/call", map[string]any{"name": "get_inbox", "arguments": map[string]any{}}); r.status != http.StatusOK || !strings.Contains(r.body, `"result"`) {
		t.Errorf("get_inbox at the cap: status %d: %s", r.status, r.body)
	}
	b1 := c.listen(tokenBea)
	_, r = c.openListen(tokenBea)
	refused(t, "a fourth listen stream", r, http.StatusServiceUnavailable, "limits.long_requests")
	a1()
	b2 := c.listen(tokenBea)
	for _, stop := range []func(){a2, b1, b2} {
		stop()
	}
	c.baseline()

	// Long polls hold their place while they wait, and free it when
	// their client goes away, long before their 300 s.
	p1, p2 := c.startPoll(tokenAnn), c.startPoll(tokenAnn)
	awaitLong(t, c.srv, c.ann, 2)
	_, r = c.openListen(tokenAnn)
	refused(t, "ann's listen stream beside two long polls", r, http.StatusTooManyRequests, "limits.long_requests_per_operator")
	p1()
	a3 := c.listen(tokenAnn)
	p2()
	a3()
	c.baseline()
}

// TestPromptArgumentBounded: operator_guide's argument task is free text
// pasted into the prompt; like every tool's free text it is held to
// limits.text_bytes, with an error naming the field.
func TestPromptArgumentBounded(t *testing.T) {
	e := newEnv(t)
	huge := strings.Repeat("x", 1<<20)
	res, err := e.client.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "operator_guide", Arguments: map[string]string{"task": huge}})
	if err == nil {
		n := 0
		for _, m := range res.Messages {
			if tc, ok := m.Content.(*mcp.TextContent); ok {
				n += len(tc.Text)
			}
		}
		t.Fatalf("prompts/get operator_guide with a %d-byte task: a %d-byte prompt, want a refusal naming task and limits.text_bytes", len(huge), n)
	}
	if !strings.Contains(err.Error(), "task") || !strings.Contains(err.Error(), "limits.text_bytes") {
		t.Errorf("the refusal does not name task and limits.text_bytes: %.300s", err)
	}
}

// TestShareOperatorBounded: manage_task share's operator is an ID, checked
// as every ID is: a 100 KB one is refused naming the field and
// limits.name_bytes (not echoed whole), one with a newline is refused for
// its control character.
func TestShareOperatorBounded(t *testing.T) {
	e := newEnv(t)
	base := e.stack.Sys.BaseTaskID()
	long := strings.Repeat("y", 100_000)
	txt := e.callErr("manage_task", map[string]any{"action": "share", "task_id": base, "operator": long})
	if !strings.Contains(txt, "limits.name_bytes") || len(txt) > 1000 {
		t.Errorf("share with a %d-byte operator: %d-byte error %.120s…, want one naming operator and limits.name_bytes", len(long), len(txt), txt)
	}
	txt = e.callErr("manage_task", map[string]any{"action": "share", "task_id": base, "operator": "bea\nINJECTED LINE"})
	if !strings.Contains(txt, "control character") {
		t.Errorf("share with an operator holding a newline: %q, want the control-character refusal", txt)
	}
}

// TestMonitorAPIIDsBounded: the monitor API holds the IDs it takes to
// limits.name_bytes and refuses control and bidirectional-override
// characters in them, as the MCP tools doing the same thing do
// (manage_task, manage_agent, answer_approval): task_id, agent_id and
// step_id of /api/control, message_id of /api/answer_approval and the query
// values of /api/trail are refused with 400 naming the field and the key,
// before the engine sees them (it would echo them whole in a 404).
func TestMonitorAPIIDsBounded(t *testing.T) {
	m := newMonitorEnv(t, envOptions{Config: func(c *server.Config) { c.Limits.NameBytes = server.MinNameBytes }})
	c := m.client()
	long := strings.Repeat("x", 4096)
	for _, tc := range []struct {
		name, method, path string
		body               any
		want               []string
	}{
		{"control task_id too long", http.MethodPost, "/api/control", map[string]any{"action": "pause_task", "task_id": long}, []string{"task_id", "limits.name_bytes"}},
		{"control agent_id too long", http.MethodPost, "/api/control", map[string]any{"action": "pause_agent", "agent_id": long}, []string{"agent_id", "limits.name_bytes"}},
		{"control step_id too long", http.MethodPost, "/api/control", map[string]any{"action": "cancel_step", "agent_id": "a", "step_id": long}, []string{"step_id", "limits.name_bytes"}},
		{"control task_id with a bidi override", http.MethodPost, "/api/control", map[string]any{"action": "pause_task", "task_id": "abc\u202edef"}, []string{"task_id", "control character"}},
		{"control reason too long", http.MethodPost, "/api/control", map[string]any{"action": "interrupt", "agent_id": "a", "reason": strings.Repeat("r", 40000)}, []string{"reason", "limits.text_bytes"}},
		{"answer_approval message_id too long", http.MethodPost, "/api/answer_approval", map[string]any{"message_id": long, "approve": true}, []string{"message_id", "limits.name_bytes"}},
		{"answer_approval message_id with a newline", http.MethodPost, "/api/answer_approval", map[string]any{"message_id": "m\nFORGED", "approve": true}, []string{"message_id", "control character"}},
		{"trail task_id too long", http.MethodGet, "/api/trail?task_id=" + long, nil, []string{"task_id", "limits.name_bytes"}},
		{"trail agent too long", http.MethodGet, "/api/trail?task_id=t&agent=" + long, nil, []string{"agent", "limits.name_bytes"}},
		{"trail step with a bidi override", http.MethodGet, "/api/trail?task_id=t&step=a%E2%80%AEb", nil, []string{"step", "control character"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := c.do(tc.method, tc.path, tc.body)
			var f apiFailure
			_ = json.Unmarshal(r.body, &f)
			ok := r.status == http.StatusBadRequest && len(f.Message) < 1000
			for _, w := range tc.want {
				ok = ok && strings.Contains(f.Message, w)
			}
			if !ok {
				t.Errorf("status %d, message %.120q (%d bytes); want 400 naming %q", r.status, f.Message, len(f.Message), tc.want)
			}
		})
	}
}

// TestEventStreamHeadHoldsNothing: HEAD /api/events (the mux serves it
// with GET's handler) gets the stream's headers and returns at once: it
// holds no stream, so limits.event_streams(_per_operator) do not count it
// — an operator at its cap gets it, and the streams held stay as they were.
func TestEventStreamHeadHoldsNothing(t *testing.T) {
	m := newMonitorEnv(t, envOptions{Config: func(c *server.Config) { c.Limits.EventStreamsPerOperator = 1 }})
	m.client().events() // the operator's one stream
	if _, n, _, _, _ := m.srv.Held(); n != 1 {
		t.Fatalf("event streams held: %d, want 1", n)
	}
	r := m.client().do(http.MethodHead, "/api/events", nil)
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("HEAD /api/events: status %d, Content-Type %q; want 200, text/event-stream", r.status, r.header.Get("Content-Type"))
	}
	select {
	case <-m.eventsDone: // its handler returned
	case <-time.After(30 * time.Second):
		t.Fatal("HEAD /api/events: its handler still runs 30s after the answer (an endless stream, uncounted)")
	}
	if _, n, _, _, _ := m.srv.Held(); n != 1 {
		t.Errorf("event streams held after HEAD: %d, want 1", n)
	}
}

// TestIdleConnectionsClosed: ServeHTTP closes a keep-alive connection
// that waits limits.idle_timeout for its next request — whatever its one
// request was, even an unauthenticated, refused one — so that nobody can
// hold any number of connections open without a token.
func TestIdleConnectionsClosed(t *testing.T) {
	st := teststack.New(t, teststack.Options{})
	srv, err := server.New(server.Config{System: st.Sys, Logger: st.Log,
		HTTP:   server.HTTPConfig{Addr: "127.0.0.1:0"},
		Limits: server.Limits{IdleTimeout: 300 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	served := make(chan error, 1)
	go func() { served <- srv.ServeHTTP(ctx, func(a string) { addrc <- a }) }()
	t.Cleanup(func() { cancel(); <-served })

	conn, err := net.Dial("tcp", <-addrc)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Unauthenticated and refused: a Host not on the allowlist.
	if _, err := io.WriteString(conn, "GET /favicon.svg HTTP/1.1\r\nHost: evil.example\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || resp.Close {
		t.Fatalf("status %d, close %v: want a 403 on a kept-alive connection", resp.StatusCode, resp.Close)
	}
	// The server closes it: the read returns EOF. The deadline only
	// bounds a hang.
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("reading the idle connection: %v; want EOF (closed by the server after limits.idle_timeout, 300ms)", err)
	}
}
