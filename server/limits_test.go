package server_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

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
	if s != 0 || e != 0 || sse != 0 {
		c.t.Errorf("held after everything closed: %d sessions, %d event streams, %d SSE streams; want none", s, e, sse)
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
