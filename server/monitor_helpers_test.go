package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
	"github.com/mas-mcp/mas-mcp/server"
)

// monitorEnv is an env whose server's HTTP handler (the monitor API and
// page beside /mcp) is served by an httptest server. eventsDone receives a
// value each time an /api/events handler returns.
type monitorEnv struct {
	*env
	ts         *httptest.Server
	eventsDone chan struct{}
}

func newMonitorEnv(t *testing.T, o envOptions) *monitorEnv {
	t.Helper()
	return newMonitorEnvOn(t, o, nil)
}

// newMonitorEnvOn is newMonitorEnv whose httptest server listens on
// listen's listener (made from its own), if listen is not nil.
func newMonitorEnvOn(t *testing.T, o envOptions, listen func(net.Listener) net.Listener) *monitorEnv {
	t.Helper()
	m := &monitorEnv{env: newEnvWith(t, o), eventsDone: make(chan struct{}, 16)}
	h := m.srv.Handler()
	m.ts = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		if r.URL.Path == "/api/events" {
			m.eventsDone <- struct{}{}
		}
	}))
	if listen != nil {
		m.ts.Listener = listen(m.ts.Listener)
	}
	m.ts.Start()
	t.Cleanup(m.ts.Close)
	return m
}

// tokenOperators configures two operators, ann and bea, each with a bearer
// token (the server then requires authentication), and stores their IDs.
func tokenOperators(t *testing.T, ann, bea *string) envOptions {
	return envOptions{Config: func(c *server.Config) {
		var err error
		if *ann, err = c.System.AddOperator("ann"); err != nil {
			t.Fatal(err)
		}
		if *bea, err = c.System.AddOperator("bea"); err != nil {
			t.Fatal(err)
		}
		c.HTTP.Tokens = map[string]string{tokenAnn: *ann, tokenBea: *bea}
	}}
}

// apiClient calls the monitor API as a browser page or a program would:
// with a cookie jar (bound sessions), and a bearer token if set.
type apiClient struct {
	t      *testing.T
	base   string
	hc     *http.Client
	token  string
	header http.Header // added to every request
}

func (m *monitorEnv) client() *apiClient {
	jar, err := cookiejar.New(nil)
	if err != nil {
		m.t.Fatal(err)
	}
	tr := &http.Transport{}
	m.t.Cleanup(tr.CloseIdleConnections)
	return &apiClient{t: m.t, base: m.ts.URL, hc: &http.Client{Jar: jar, Transport: tr, Timeout: 30 * time.Second}, header: http.Header{}}
}

// apiResponse is a finished API call.
type apiResponse struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request; body is JSON-encoded unless it is a string or nil.
func (c *apiClient) do(method, path string, body any) apiResponse {
	c.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(enc)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return apiResponse{status: resp.StatusCode, header: resp.Header, body: b}
}

// json calls the API, wants status and decodes the answer into out.
func (c *apiClient) json(method, path string, body any, status int, out any) apiResponse {
	c.t.Helper()
	r := c.do(method, path, body)
	if r.status != status {
		c.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); out != nil && ct != "application/json" {
		c.t.Errorf("%s %s: Content-Type %q, want application/json", method, path, ct)
	}
	if out != nil {
		if err := json.Unmarshal(r.body, out); err != nil {
			c.t.Fatalf("%s %s: answer %s: %v", method, path, r.body, err)
		}
	}
	return r
}

// apiFailure is the API's error answer (spec §7.4.1's shape).
type apiFailure struct {
	Success *bool  `json:"success"`
	Message string `json:"message"`
}

// fails calls the API and wants an error answer of status whose message
// contains every one of words; it returns the message.
func (c *apiClient) fails(method, path string, body any, status int, words ...string) string {
	c.t.Helper()
	var f apiFailure
	c.json(method, path, body, status, &f)
	if f.Success == nil || *f.Success {
		c.t.Errorf("%s %s: success %v, want false", method, path, f.Success)
	}
	for _, w := range words {
		if !strings.Contains(f.Message, w) {
			c.t.Errorf("%s %s %s: message %q does not mention %q", method, path, jsonString(body), f.Message, w)
		}
	}
	return f.Message
}

// whoami is GET /api/whoami's answer.
type whoami struct {
	HumanAgentID   string `json:"human_agent_id"`
	Name           string `json:"name"`
	TokensRequired bool   `json:"tokens_required"`
}

// sendAnswer is POST /api/send_message's answer.
type sendAnswer struct {
	Success    bool     `json:"success"`
	Message    string   `json:"message"`
	MessageIDs []string `json:"message_ids"`
}

// sseEvent is one server-sent event.
type sseEvent struct {
	ID, Event, Data string
}

// eventStream is an open GET /api/events.
type eventStream struct {
	resp   *http.Response
	cancel context.CancelFunc
	events chan sseEvent
	once   sync.Once
}

// events opens /api/events and parses its events in the background.
func (c *apiClient) events() *eventStream {
	c.t.Helper()
	hc := *c.hc
	hc.Timeout = 0 // a stream
	return openEvents(c.t, &hc, c.base, c.token)
}

// openEvents opens base's /api/events (with a bearer token unless "") and
// parses its events in the background until tb's cleanup.
func openEvents(tb testing.TB, hc *http.Client, base, token string) *eventStream {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/events", nil)
	if err != nil {
		tb.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		cancel()
		tb.Fatalf("GET /api/events: %v", err)
	}
	s := &eventStream{resp: resp, cancel: cancel, events: make(chan sseEvent, 4096)}
	tb.Cleanup(s.close)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		s.close()
		tb.Fatalf("GET /api/events: status %d: %s", resp.StatusCode, b)
	}
	go s.read()
	return s
}

// read parses the stream (https://html.spec.whatwg.org/#event-stream-interpretation,
// the parts the server uses) until it ends.
func (s *eventStream) read() {
	defer close(s.events)
	sc := bufio.NewScanner(s.resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var ev sseEvent
	var data []string
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if ev.Event != "" || len(data) > 0 {
				ev.Data = strings.Join(data, "\n")
				s.events <- ev
			}
			ev, data = sseEvent{}, nil
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue // a comment (ping)
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			ev.Event = value
		case "data":
			data = append(data, value)
		case "id":
			ev.ID = value
		}
	}
}

func (s *eventStream) close() {
	s.once.Do(func() {
		s.cancel()
		s.resp.Body.Close()
	})
}

// next returns the next event, failing t after d.
func (s *eventStream) next(t *testing.T, d time.Duration) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-s.events:
		if !ok {
			t.Fatal("/api/events ended")
		}
		return ev
	case <-time.After(d):
		t.Fatalf("no event within %s", d)
	}
	return sseEvent{}
}

// operatorTask hands a task to the scripted team as operator op and waits
// until alice's question is in op's inbox and the MAS is at rest.
func (m *monitorEnv) operatorTask(op string) (taskID string, question engine.InboxEntry) {
	m.t.Helper()
	sys := m.stack.Sys
	taskID, err := sys.AddTask(op, engine.AddTaskRequest{TaskName: "report", TaskIntention: "Research a topic and write a report."})
	if err != nil {
		m.t.Fatal(err)
	}
	m.stack.WaitFor("alice's question to "+op, func() bool {
		entries, _ := sys.Inbox(op)
		for _, e := range entries {
			if e.Content == scripted.OperatorQuestion && e.AwaitingReply {
				question = e
			}
		}
		return question.MessageID != "" && atRest(sys)
	})
	return taskID, question
}
