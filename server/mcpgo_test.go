package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	mcpgoclient "github.com/mark3labs/mcp-go/client"
	mcpgotransport "github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
	"github.com/mas-mcp/mas-mcp/server"
)

// The HTTP rig below is shared by mcpgo_test.go, security_test.go and
// bench_test.go: the whole MAS behind srv.Handler() on a real (loopback)
// HTTP server.

// httpRig is a MAS on the fake LLM (the scripted team) served by
// srv.Handler() on an httptest server. Everything is closed at the test's
// cleanup, clients first, then the MCP sessions, the HTTP server, the MCP
// server and the MAS; teststack's leak check runs last.
type httpRig struct {
	t     testing.TB
	stack *teststack.Stack
	team  *scripted.Team
	srv   *server.Server
	ts    *httptest.Server
	// url is the streamable HTTP endpoint; sseURL the legacy SSE one.
	url, sseURL string
}

// rigOptions tune an httpRig; zero values mean the server's defaults.
type rigOptions struct {
	HTTP     server.HTTPConfig
	Coalesce time.Duration
	// AskOperator makes alice ask the operator a waiting question.
	AskOperator bool
	// Configure edits the server's config once the MAS runs (to bind
	// tokens to operators it adds, say).
	Configure func(*teststack.Stack, *server.Config)
	// LLM, if set, answers the fake LLM's requests; next is the team's brain.
	LLM func(c *fakellm.Call, next func(*fakellm.Call) fakellm.Reply) fakellm.Reply
}

func newHTTPRig(t testing.TB, o rigOptions) *httpRig {
	t.Helper()
	team := scripted.NewTeam()
	team.AskOperator = o.AskOperator
	handle := team.Handle
	if o.LLM != nil {
		handle = func(c *fakellm.Call) fakellm.Reply { return o.LLM(c, team.Handle) }
	}
	st := teststack.New(t, teststack.Options{Handler: handle})
	cfg := server.Config{System: st.Sys, Logger: st.Log, Coalesce: o.Coalesce, HTTP: o.HTTP}
	if o.Configure != nil {
		o.Configure(st, &cfg)
	}
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		// Sessions hold streams open; httptest's Close waits for them.
		// Their connections are closed first, which ends each stream's
		// request (and an SSE session with it) from its own handler:
		// closing a session from here could race go-sdk's Connect of a
		// stream still being set up (a data race inside the SDK).
		ts.CloseClientConnections()
		ts.Close()
		for ss := range srv.MCP().Sessions() {
			_ = ss.Close()
		}
	})
	return &httpRig{t: t, stack: st, team: team, srv: srv, ts: ts, url: ts.URL + "/mcp", sseURL: ts.URL + "/sse"}
}

// connect connects a go-sdk client over streamable HTTP. version pins the
// protocol version ("" is the SDK's latest, 2026-07-28, which our routing
// serves statelessly); hc nil is the rig's client.
func (r *httpRig) connect(version string, hc *http.Client, opts *mcp.ClientOptions) *mcp.ClientSession {
	r.t.Helper()
	cs, err := r.dial(version, hc, opts)
	if err != nil {
		r.t.Fatalf("connect (protocol %q): %v", version, err)
	}
	return cs
}

// dial is connect returning the error.
func (r *httpRig) dial(version string, hc *http.Client, opts *mcp.ClientOptions) (*mcp.ClientSession, error) {
	if hc == nil {
		hc = r.ts.Client()
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "rig-client", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: r.url, HTTPClient: hc, MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		return nil, err
	}
	r.t.Cleanup(func() { _ = cs.Close() })
	return cs, nil
}

// rawReq is one hand-made HTTP request to the rig.
type rawReq struct {
	method, path string
	// host overrides the Host header.
	host   string
	header map[string]string
	body   io.Reader
}

// rawResp is what came back; body is read unless the response is a GET's
// event stream (which never ends).
type rawResp struct {
	status int
	header http.Header
	body   string
}

// send sends a raw request with the rig's HTTP client.
func (r *httpRig) send(q rawReq) rawResp {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, q.method, r.ts.URL+q.path, q.body)
	if err != nil {
		r.t.Fatal(err)
	}
	if q.host != "" {
		req.Host = q.host
	}
	for k, v := range q.header {
		req.Header.Set(k, v)
	}
	resp, err := r.ts.Client().Do(req)
	if err != nil {
		r.t.Fatalf("%s %s: %v", q.method, q.path, err)
	}
	defer resp.Body.Close()
	out := rawResp{status: resp.StatusCode, header: resp.Header}
	if q.method == http.MethodGet && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// The first event (a legacy SSE session's endpoint) before the
		// stream is closed: closing it while go-sdk is still opening the
		// session races inside go-sdk (seen under -race).
		br := bufio.NewReader(io.LimitReader(resp.Body, 1<<16))
		for {
			line, err := br.ReadString('\n')
			if err != nil || strings.TrimSpace(line) == "" {
				break
			}
			out.body += line
		}
		return out
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	out.body = string(b)
	return out
}

// initBody is a JSON-RPC initialize request.
func initBody(version string) io.Reader {
	return strings.NewReader(fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":%q,"capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, version))
}

// jsonHeaders are a streamable HTTP POST's headers, plus extra pairs.
func jsonHeaders(kv ...string) map[string]string {
	h := map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
	for i := 0; i+1 < len(kv); i += 2 {
		h[kv[i]] = kv[i+1]
	}
	return h
}

// wireLog is an http.RoundTripper that adds header to every request and
// records every response: its body (streams too, as they are read) and its
// Mcp-Session-Id.
type wireLog struct {
	base   http.RoundTripper
	header http.Header

	bodies teststack.SyncBuffer
	mu     sync.Mutex
	sids   []string
}

func (w *wireLog) RoundTrip(req *http.Request) (*http.Response, error) {
	if len(w.header) > 0 {
		req = req.Clone(req.Context())
		for k, v := range w.header {
			req.Header[k] = v
		}
	}
	resp, err := w.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
		w.mu.Lock()
		w.sids = append(w.sids, sid)
		w.mu.Unlock()
	}
	fmt.Fprintf(&w.bodies, "\n--- %s %s: %d\n", req.Method, req.URL.Path, resp.StatusCode)
	resp.Body = teeBody{ReadCloser: resp.Body, w: &w.bodies}
	return resp, nil
}

func (w *wireLog) sessionIDs() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Compact(slices.Clone(w.sids))
}

type teeBody struct {
	io.ReadCloser
	w io.Writer
}

func (t teeBody) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	_, _ = t.w.Write(p[:n])
	return n, err
}

// rigCall calls a tool, failing on any error, and decodes its structured
// output into out (if non-nil).
func rigCall(t testing.TB, cs *mcp.ClientSession, name string, args any, out any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		t.Fatalf("%s: tool error: %s", name, rigText(res))
	}
	if out != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: structured output %s: %v", name, b, err)
		}
	}
	return res
}

// rigText is a tool result's text.
func rigText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// mcpgoWantTools are the server's tools, sorted (go-sdk lists tools by
// name, whatever order they were added in).
var mcpgoWantTools = []string{"add_task", "answer_approval", "ask_info", "get_inbox", "get_trail", "manage_agent", "manage_task", "read_resource", "send_message", "show_task", "wait_for_updates"}

// TestMCPGoClientInterop connects mark3labs/mcp-go's streamable HTTP client
// to the real server: initialize, list the tools, ask_info and add_task.
// FACTS.md: against a go-sdk *stateful* server mcp-go assumes 2026-07-28
// unless built with WithLegacyProtocolOnly; our routing sends 2026-07-28
// requests to the stateless handler, so both ways must work.
func TestMCPGoClientInterop(t *testing.T) {
	for _, tc := range []struct {
		name        string
		opts        []mcpgoclient.ClientOption
		wantVersion string
		wantSession bool
	}{
		{"legacy-only", []mcpgoclient.ClientOption{mcpgoclient.WithLegacyProtocolOnly()}, "2025-11-25", true},
		{"default", nil, "2026-07-28", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newHTTPRig(t, rigOptions{})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			tr, err := mcpgotransport.NewStreamableHTTP(r.url, mcpgotransport.WithHTTPBasicClient(r.ts.Client()))
			if err != nil {
				t.Fatal(err)
			}
			c := mcpgoclient.NewClient(tr, tc.opts...)
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })

			init, err := c.Initialize(ctx, mcpgo.InitializeRequest{Params: mcpgo.InitializeParams{
				ClientInfo: mcpgo.Implementation{Name: "mcp-go-interop", Version: "1"},
			}})
			if err != nil {
				t.Fatalf("initialize: %v", err)
			}
			if init.ProtocolVersion != tc.wantVersion || init.ServerInfo.Name != "mas-mcp" {
				t.Errorf("initialize: protocol %q, server %q; want %q, mas-mcp", init.ProtocolVersion, init.ServerInfo.Name, tc.wantVersion)
			}
			if got := c.GetSessionId() != ""; got != tc.wantSession {
				t.Errorf("session ID %q: want one: %v", c.GetSessionId(), tc.wantSession)
			}

			tools, err := c.ListTools(ctx, mcpgo.ListToolsRequest{})
			if err != nil {
				t.Fatalf("tools/list: %v", err)
			}
			var names []string
			for _, tl := range tools.Tools {
				names = append(names, tl.Name)
			}
			slices.Sort(names)
			if diff := cmp.Diff(mcpgoWantTools, names); diff != "" {
				t.Errorf("tools/list mismatch (-want +got):\n%s", diff)
			}

			var info server.AskInfoOut
			mcpgoCall(t, c, "ask_info", map[string]any{"type": "all_agents"}, &info)
			if info.Type != "all_agents" || info.Markdown == "" {
				t.Errorf("ask_info all_agents = type %q, markdown %q", info.Type, info.Markdown)
			}
			agents, _ := info.Data.([]any)
			if len(agents) < 2 { // the manager and the operator at least
				t.Errorf("ask_info all_agents: %d agents in data %v, want the manager and the operator", len(agents), info.Data)
			}

			var added server.AddTaskOut
			mcpgoCall(t, c, "add_task", map[string]any{"task_name": "interop", "task_intention": "Check that mcp-go can hand over a task."}, &added)
			if added.TaskID == "" || added.ResourceURI != "mas://tasks/"+added.TaskID || added.TaskManager != r.stack.Sys.ManagerID() {
				t.Fatalf("add_task = %+v", added)
			}
			task := r.stack.Task(added.TaskID)
			if task.TaskName != "interop" || task.Operator != r.stack.Sys.OperatorID() {
				t.Errorf("task: name %q operator %q; want interop, the default operator", task.TaskName, task.Operator)
			}
			// The scripted team runs it to the end; let it, so nothing is
			// left mid-flight at cleanup.
			r.stack.WaitFor("the mcp-go task to finish", func() bool {
				return r.stack.Task(added.TaskID).ExecutionState == "finished"
			})

			// A bad call is a tool result with isError, not a protocol error.
			res, err := c.CallTool(ctx, mcpgo.CallToolRequest{Params: mcpgo.CallToolParams{Name: "ask_info", Arguments: map[string]any{"type": "no_such_type"}}})
			if err != nil || !res.IsError {
				t.Errorf("ask_info no_such_type: err %v, isError %v; want a tool error", err, res != nil && res.IsError)
			}
		})
	}
}

// mcpgoCall calls a tool with the mcp-go client and decodes its structured
// content into out.
func mcpgoCall(t *testing.T, c *mcpgoclient.Client, name string, args map[string]any, out any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.CallTool(ctx, mcpgo.CallToolRequest{Params: mcpgo.CallToolParams{Name: name, Arguments: args}})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		t.Fatalf("%s: tool error: %v", name, res.Content)
	}
	if slices.IndexFunc(res.Content, func(c mcpgo.Content) bool { _, ok := mcpgo.AsTextContent(c); return ok }) < 0 {
		t.Errorf("%s: no text content in %v", name, res.Content)
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: structured content %s: %v", name, b, err)
	}
}
