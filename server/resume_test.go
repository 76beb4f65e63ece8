package server_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
	"github.com/mas-mcp/mas-mcp/server"
)

// rawMCP is a streamable HTTP client made of plain requests, as short-lived
// as a CLI: it never opens the standalone GET stream nor ends its session.
type rawMCP struct {
	t   *testing.T
	url string
	sid string
}

// post sends one JSON-RPC message and returns the response's content type
// and body (an SSE stream is read to its end).
func (c *rawMCP) post(body string) (string, string) {
	c.t.Helper()
	req, err := http.NewRequest("POST", c.url, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	if c.sid != "" {
		req.Header.Set("Mcp-Session-Id", c.sid)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	if resp.StatusCode/100 != 2 {
		c.t.Fatalf("POST %s: %s\n%s", body, resp.Status, b)
	}
	if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
		c.sid = sid
	}
	return resp.Header.Get("Content-Type"), string(b)
}

func (c *rawMCP) initialize() {
	c.post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	c.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	c.t.Cleanup(c.end)
}

// end ends the session (DELETE), as the test's leak check wants.
func (c *rawMCP) end() {
	req, err := http.NewRequest("DELETE", c.url, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	req.Header.Set("Mcp-Session-Id", c.sid)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
}

// TestShortLivedClientNoUndelivered: a client that adds a task and goes
// away without ending its session (as the Inspector CLI and the TypeScript
// SDK do) causes no "rejected by transport" record, not even at debug: the
// notifications sent to its session while it has no stream are kept, and
// it finds them when it comes back and opens its standalone stream.
func TestShortLivedClientNoUndelivered(t *testing.T) {
	team := scripted.NewTeam()
	// The team waits for gate, so until the client is back the only
	// resources/list_changed its session is sent are add_task's (the task's
	// resources): the one it reads on its stream is one that was kept for
	// it, not a later one (as the team's agents appear) delivered live.
	gate := make(chan struct{})
	release := sync.OnceFunc(func() { close(gate) })
	st := teststack.New(t, teststack.Options{Handler: func(c *fakellm.Call) fakellm.Reply {
		<-gate
		return team.Handle(c)
	}})
	t.Cleanup(release) // before the stack closes
	var logs teststack.SyncBuffer
	srv, err := server.New(server.Config{System: st.Sys, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close) // after the client's session ends (cleanups run last first)

	cli := &rawMCP{t: t, url: hs.URL + "/mcp"}
	cli.initialize()
	// A witness session, connected after the client's and of the same
	// protocol version: the SDK notifies such sessions one after the other
	// in the order they connected, so once the witness has a
	// resources/list_changed, the client's session was sent it too. (Not
	// a 2026-07-28 session: it gets list_changed through subscriptions/listen,
	// which its Connect sends without waiting for the server to take it,
	// so it may miss add_task's.)
	listChanged := make(chan struct{}, 64)
	ct, stt := mcp.NewInMemoryTransports()
	ss, err := srv.MCP().Connect(context.Background(), stt, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	witness, err := mcp.NewClient(&mcp.Implementation{Name: "witness", Version: "1"}, &mcp.ClientOptions{
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) {
			select {
			case listChanged <- struct{}{}:
			default:
			}
		},
	}).Connect(context.Background(), ct, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer witness.Close()

	if _, out := cli.post(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"add_task","arguments":{"task_name":"report","task_intention":"Research a topic and write a report."}}}`); !strings.Contains(out, "task_id") {
		t.Fatalf("add_task: %s", out)
	}
	select {
	case <-listChanged:
	case <-time.After(30 * time.Second):
		t.Fatal("no resources/list_changed after add_task")
	}
	if strings.Contains(logs.String(), "rejected by transport") || strings.Contains(logs.String(), "undelivered") {
		t.Errorf("a notification to the short-lived client's session was not delivered:\n%s", logs.String())
	}

	// The client comes back: its standalone stream replays what it missed.
	// With no Last-Event-ID, as the client received no event on that
	// stream: go-sdk replays the stream's events from the first (index 0).
	// (Last-Event-ID "_0" would say it had that first event, and replay
	// from the second: the list_changed it missed would not be there.)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", cli.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	req.Header.Set("Mcp-Session-Id", cli.sid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "notifications/resources/list_changed") {
			return
		}
	}
	t.Errorf("the resumed stream ended (%v) without the resources/list_changed the client missed", sc.Err())
}

// TestSSEPrimingEvent: a POST answered with an SSE stream in a 2025-11-25
// session opens with a priming event (an ID and empty data), so a client
// cut off mid-call can resume with Last-Event-ID (SEP-1699).
func TestSSEPrimingEvent(t *testing.T) {
	e := newMonitorEnv(t, envOptions{})
	cli := &rawMCP{t: t, url: e.ts.URL + "/mcp"}
	cli.initialize()
	ctype, body := cli.post(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ask_info","arguments":{"type":"tasks"}}}`)
	if !strings.HasPrefix(ctype, "text/event-stream") {
		t.Fatalf("content type %q, want an SSE stream", ctype)
	}
	first, _, _ := strings.Cut(body, "\n\n")
	var id, data string
	hasData := false
	for _, line := range strings.Split(first, "\n") {
		if v, ok := strings.CutPrefix(line, "id:"); ok {
			id = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "data:"); ok {
			hasData, data = true, strings.TrimSpace(v)
		}
	}
	if id == "" || !hasData || data != "" {
		t.Errorf("first event %q: want a priming event (an id, empty data)", first)
	}
	if !strings.Contains(body, `"result"`) {
		t.Errorf("no result after the priming event:\n%s", body)
	}
}
