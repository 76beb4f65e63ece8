package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
	"github.com/mas-mcp/mas-mcp/server"
)

// probe is a request that passes every check when the guard lets it
// through: an initialize on /mcp (200), an event stream on /sse (200).
func probe(path string, kv ...string) rawReq {
	if path == "/sse" {
		return rawReq{method: http.MethodGet, path: path, header: jsonHeaders(kv...)}
	}
	return rawReq{method: http.MethodPost, path: path, header: jsonHeaders(kv...), body: initBody("2025-11-25")}
}

func TestHTTPOriginAllowlist(t *testing.T) {
	r := newHTTPRig(t, rigOptions{HTTP: server.HTTPConfig{AllowedOrigins: []string{"https://app.example"}}})
	port := r.ts.URL[strings.LastIndex(r.ts.URL, ":"):]
	for _, tc := range []struct {
		origin string
		want   int
	}{
		{"", http.StatusOK},
		{r.ts.URL, http.StatusOK}, // same origin
		{"https://app.example", http.StatusOK},
		{"https://evil.example", http.StatusForbidden},
		{"null", http.StatusForbidden},
		{"http://localhost" + port, http.StatusForbidden}, // another origin, same machine
		{"http://127.0.0.1:1", http.StatusForbidden},
		{"https://app.example.evil.example", http.StatusForbidden},
		{"https" + strings.TrimPrefix(r.ts.URL, "http"), http.StatusForbidden}, // same host and port, other scheme
		{"http://app.example", http.StatusForbidden},                           // the allowed one is https
	} {
		for _, path := range []string{"/mcp", "/sse"} {
			q := probe(path)
			if tc.origin != "" {
				q.header["Origin"] = tc.origin
			}
			if got := r.send(q); got.status != tc.want {
				t.Errorf("%s with Origin %q: status %d (%s), want %d", path, tc.origin, got.status, strings.TrimSpace(got.body), tc.want)
			}
		}
	}
}

func TestHTTPHostAllowlist(t *testing.T) {
	t.Run("loopback default", func(t *testing.T) {
		r := newHTTPRig(t, rigOptions{})
		port := r.ts.URL[strings.LastIndex(r.ts.URL, ":"):]
		for _, tc := range []struct {
			host string
			want int
		}{
			{"localhost" + port, http.StatusOK},
			{"127.0.0.1" + port, http.StatusOK},
			{"[::1]" + port, http.StatusOK},
			{"evil.example", http.StatusForbidden},
			{"evil.example" + port, http.StatusForbidden},
			{"localhost.evil.example" + port, http.StatusForbidden},
			{"127.0.0.1.nip.io" + port, http.StatusForbidden},
		} {
			for _, path := range []string{"/mcp", "/sse"} {
				q := probe(path)
				q.host = tc.host
				if got := r.send(q); got.status != tc.want {
					t.Errorf("%s with Host %q: status %d (%s), want %d", path, tc.host, got.status, strings.TrimSpace(got.body), tc.want)
				}
			}
		}
	})
	t.Run("explicit list", func(t *testing.T) {
		r := newHTTPRig(t, rigOptions{HTTP: server.HTTPConfig{AllowedHosts: []string{"mas.example"}}})
		for _, host := range []string{"127.0.0.1", "localhost", "evil.example"} {
			q := probe("/mcp")
			q.host = host
			if got := r.send(q); got.status != http.StatusForbidden || !strings.Contains(got.body, "is not allowed") {
				t.Errorf("Host %q: status %d (%s), want 403 from our guard", host, got.status, strings.TrimSpace(got.body))
			}
		}
	})
}

// TestHTTPAllowedHostsOnLoopback: a listener on loopback behind a reverse
// proxy on the same machine (Host: mas.example) is what AllowedHosts is
// for; the hosts it lists must be served.
func TestHTTPAllowedHostsOnLoopback(t *testing.T) {
	r := newHTTPRig(t, rigOptions{HTTP: server.HTTPConfig{AllowedHosts: []string{"mas.example"}}})
	for _, host := range []string{"mas.example", "mas.example:8443"} {
		for _, path := range []string{"/mcp", "/sse"} {
			q := probe(path)
			q.host = host
			if got := r.send(q); got.status != http.StatusOK {
				t.Errorf("%s with Host %q: status %d (%s), want 200", path, host, got.status, strings.TrimSpace(got.body))
			}
		}
	}
}

// tokenRig serves two operators besides the MAS's default one, each with
// its own token.
type tokenRig struct {
	*httpRig
	opA, opB, tokA, tokB string
}

func newTokenRig(t *testing.T) *tokenRig {
	tr := &tokenRig{tokA: "token-of-operator-a-0123456789", tokB: "token-of-operator-b-0123456789"}
	tr.httpRig = newHTTPRig(t, rigOptions{Configure: func(st *teststack.Stack, cfg *server.Config) {
		var err error
		if tr.opA, err = st.Sys.AddOperator("ops-a"); err != nil {
			t.Fatal(err)
		}
		if tr.opB, err = st.Sys.AddOperator("ops-b"); err != nil {
			t.Fatal(err)
		}
		cfg.HTTP.Tokens = map[string]string{tr.tokA: tr.opA, tr.tokB: tr.opB}
	}})
	return tr
}

// client is an HTTP client that sends token as its bearer token.
func (tr *tokenRig) client(token string) (*http.Client, *wireLog) {
	w := &wireLog{base: tr.ts.Client().Transport, header: http.Header{"Authorization": {"Bearer " + token}}}
	return &http.Client{Transport: w}, w
}

func TestHTTPBearerTokens(t *testing.T) {
	tr := newTokenRig(t)
	for _, tc := range []struct {
		name, auth string
		want       int
	}{
		{"missing", "", http.StatusUnauthorized},
		{"wrong", "Bearer not-a-token-of-anyone-at-all", http.StatusUnauthorized},
		{"prefix of a token", "Bearer " + tr.tokA[:16], http.StatusUnauthorized},
		{"not bearer", "Basic " + tr.tokA, http.StatusUnauthorized},
		{"right", "Bearer " + tr.tokA, http.StatusOK},
	} {
		for _, path := range []string{"/mcp", "/sse"} {
			q := probe(path)
			if tc.auth != "" {
				q.header["Authorization"] = tc.auth
			}
			got := tr.send(q)
			if got.status != tc.want {
				t.Errorf("%s, %s token: status %d (%s), want %d", path, tc.name, got.status, strings.TrimSpace(got.body), tc.want)
			}
			if strings.Contains(got.body, tr.tokA) || strings.Contains(got.body, tr.tokB) {
				t.Errorf("%s, %s token: the answer contains a token: %s", path, tc.name, got.body)
			}
		}
	}

	// Over streamable HTTP each token acts as its operator.
	ctx := context.Background()
	hcB, _ := tr.client(tr.tokB)
	csB := tr.connect("2025-11-25", hcB, nil)
	var added server.AddTaskOut
	rigCall(t, csB, "add_task", map[string]any{"task_name": "b's task", "task_intention": "Operator B hands this over."}, &added)
	if got := tr.stack.Task(added.TaskID).Operator; got != tr.opB {
		t.Errorf("task handed over with B's token: operator %s, want B %s", got, tr.opB)
	}
	var inbox server.GetInboxOut
	rigCall(t, csB, "get_inbox", nil, &inbox)
	if inbox.OperatorID != tr.opB {
		t.Errorf("get_inbox with B's token: operator %s, want B %s", inbox.OperatorID, tr.opB)
	}
	if _, err := csB.ReadResource(ctx, &mcp.ReadResourceParams{URI: "mas://operators/" + tr.opA + "/inbox"}); err == nil {
		t.Error("B read A's inbox")
	}
	tr.stack.WaitFor("B's task to finish", func() bool { return tr.stack.Task(added.TaskID).ExecutionState == engine.StateFinished })

	// A session is bound to its token: B cannot use A's session, which to
	// B is an unknown one (404).
	init := tr.send(rawReq{method: http.MethodPost, path: "/mcp", body: initBody("2025-11-25"),
		header: jsonHeaders("Authorization", "Bearer "+tr.tokA)})
	sid := init.header.Get("Mcp-Session-Id")
	if init.status != http.StatusOK || sid == "" {
		t.Fatalf("initialize with A's token: status %d, session %q", init.status, sid)
	}
	hijack := tr.send(rawReq{method: http.MethodPost, path: "/mcp",
		body:   strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`),
		header: jsonHeaders("Authorization", "Bearer "+tr.tokB, "Mcp-Session-Id", sid, "Mcp-Protocol-Version", "2025-11-25")})
	if hijack.status != http.StatusNotFound {
		t.Errorf("B using A's session: status %d, want 404 (as an unknown session)", hijack.status)
	}
}

// TestHTTPUnauthorizedChallenge: RFC 6750 §3 — a 401 must carry
// WWW-Authenticate so clients know to send a bearer token.
func TestHTTPUnauthorizedChallenge(t *testing.T) {
	tr := newTokenRig(t)
	for _, auth := range []string{"", "Bearer not-a-token-of-anyone-at-all"} {
		q := probe("/mcp")
		if auth != "" {
			q.header["Authorization"] = auth
		}
		got := tr.send(q)
		if ch := got.header.Get("WWW-Authenticate"); got.status != http.StatusUnauthorized || !strings.HasPrefix(ch, "Bearer") {
			t.Errorf("Authorization %q: status %d, WWW-Authenticate %q; want 401 with a Bearer challenge", auth, got.status, ch)
		}
	}
}

// TestHTTPLegacySSEActsAsTokenOperator: over /sse too, a token acts as its
// operator.
func TestHTTPLegacySSEActsAsTokenOperator(t *testing.T) {
	tr := newTokenRig(t)
	hcB, _ := tr.client(tr.tokB)
	c := mcp.NewClient(&mcp.Implementation{Name: "sse-client", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.SSEClientTransport{Endpoint: tr.sseURL, HTTPClient: hcB}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	var inbox server.GetInboxOut
	rigCall(t, cs, "get_inbox", nil, &inbox)
	if inbox.OperatorID != tr.opB {
		t.Errorf("get_inbox over /sse with B's token: operator %s, want B %s (default operator %s)", inbox.OperatorID, tr.opB, tr.stack.Sys.OperatorID())
	}
}

func TestHTTPConfigRefused(t *testing.T) {
	st := teststack.New(t, teststack.Options{})
	long := "a-token-long-enough-0123456789"
	op := st.Sys.OperatorID() // tokens must name an operator HumanAgent
	for _, tc := range []struct {
		name string
		http server.HTTPConfig
		want []string // substrings of the error; nil: accepted
	}{
		{"all interfaces without tokens", server.HTTPConfig{Addr: "0.0.0.0:7777"}, []string{"0.0.0.0:7777", "not loopback", "tokens"}},
		{"empty host without tokens", server.HTTPConfig{Addr: ":7777"}, []string{"not loopback", "tokens"}},
		{"LAN address without tokens", server.HTTPConfig{Addr: "192.168.1.10:7777"}, []string{"not loopback", "tokens"}},
		{"hostname without tokens", server.HTTPConfig{Addr: "mas.example:7777"}, []string{"not loopback", "tokens"}},
		{"short token", server.HTTPConfig{Addr: "0.0.0.0:7777", Tokens: map[string]string{"short-token-15ch": op}}, nil},
		{"too short token", server.HTTPConfig{Addr: "0.0.0.0:7777", Tokens: map[string]string{"short-token-15c": "op-x"}}, []string{"op-x", "too short", "16"}},
		{"too short token on loopback", server.HTTPConfig{Tokens: map[string]string{"abc": "op-y"}}, []string{"op-y", "too short"}},
		{"origin without scheme", server.HTTPConfig{AllowedOrigins: []string{"app.example"}}, []string{"app.example", "scheme"}},
		{"negative body limit", server.HTTPConfig{MaxBodyBytes: -1}, []string{"max body bytes", "negative"}},
		{"bad address", server.HTTPConfig{Addr: "nonsense"}, []string{"nonsense"}},
		{"all interfaces with tokens", server.HTTPConfig{Addr: "0.0.0.0:7777", Tokens: map[string]string{long: op}}, nil},
		{"loopback without tokens", server.HTTPConfig{Addr: "127.0.0.1:7777"}, nil},
		{"localhost without tokens", server.HTTPConfig{Addr: "localhost:0"}, nil},
		{"IPv6 loopback without tokens", server.HTTPConfig{Addr: "[::1]:7777"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := server.New(server.Config{System: st.Sys, HTTP: tc.http})
			if err == nil {
				_ = srv.Close()
				if tc.want != nil {
					t.Fatalf("accepted; want an error naming %q", tc.want)
				}
				return
			}
			if tc.want == nil {
				t.Fatalf("refused: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			for tok := range tc.http.Tokens {
				if strings.Contains(err.Error(), tok) {
					t.Errorf("error %q shows the token", err)
				}
			}
		})
	}
}

// bigBody is a JSON-RPC request of n bytes; chunked hides its length.
func bigBody(n int, chunked bool) io.Reader {
	head := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ask_info","arguments":{"type":"`
	tail := `"}}}`
	r := io.MultiReader(strings.NewReader(head), strings.NewReader(strings.Repeat("x", n-len(head)-len(tail))), strings.NewReader(tail))
	if chunked {
		return r // an unknown length: the client sends it chunked
	}
	b, _ := io.ReadAll(r)
	return strings.NewReader(string(b))
}

func TestHTTPBodyLimit(t *testing.T) {
	const size = 5 << 20
	for _, tc := range []struct {
		name  string
		limit int64
	}{{"default 4 MiB", 0}, {"configured 1 MiB", 1 << 20}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newHTTPRig(t, rigOptions{HTTP: server.HTTPConfig{MaxBodyBytes: tc.limit}})
			init := r.send(probe("/mcp"))
			sid := init.header.Get("Mcp-Session-Id")
			for _, chunked := range []bool{false, true} {
				for _, hdr := range [][]string{
					nil, // no session: the stateful handler's initialize path
					{"Mcp-Session-Id", sid, "Mcp-Protocol-Version", "2025-11-25"}, // in a session
					{"Mcp-Protocol-Version", "2026-07-28"},                        // stateless
				} {
					got := r.send(rawReq{method: http.MethodPost, path: "/mcp", header: jsonHeaders(hdr...), body: bigBody(size, chunked)})
					if got.status != http.StatusRequestEntityTooLarge {
						t.Errorf("5 MiB body (chunked %v, headers %q): status %d (%.100s), want 413", chunked, hdr, got.status, got.body)
					}
				}
			}
			// A body just under the limit is read (and answered); checked
			// on the small limit only, a 4 MiB JSON parse is slow under -race.
			limit := tc.limit
			if limit == 0 {
				return
			}
			got := r.send(rawReq{method: http.MethodPost, path: "/mcp", header: jsonHeaders("Mcp-Session-Id", sid, "Mcp-Protocol-Version", "2025-11-25"),
				body: bigBody(int(limit)-1, true)})
			if got.status != http.StatusOK {
				t.Errorf("body of limit-1 bytes: status %d (%.200s), want 200", got.status, got.body)
			}
		})
	}
}

func TestHTTPProtocolVersionHeader(t *testing.T) {
	r := newHTTPRig(t, rigOptions{})
	for _, v := range []string{"2024-01-01", "2099-12-31", "garbage", "2025-11-25,2026-07-28"} {
		for _, path := range []string{"/mcp", "/sse"} {
			got := r.send(probe(path, "Mcp-Protocol-Version", v))
			if got.status != http.StatusBadRequest {
				t.Errorf("%s with version %q: status %d, want 400", path, v, got.status)
				continue
			}
			for _, sv := range mcp.SupportedProtocolVersions() {
				if !strings.Contains(got.body, sv) {
					t.Errorf("%s with version %q: message %q does not list %s", path, v, got.body, sv)
				}
			}
		}
	}
	for _, v := range mcp.SupportedProtocolVersions() {
		if got := r.send(probe("/mcp", "Mcp-Protocol-Version", v)); got.status == http.StatusBadRequest && strings.Contains(got.body, "unsupported MCP protocol version") {
			t.Errorf("supported version %s refused: %s", v, got.body)
		}
	}
}

// TestHTTPVersionRouting: 2026-07-28 is served statelessly (no session),
// older versions keep sessions.
func TestHTTPVersionRouting(t *testing.T) {
	r := newHTTPRig(t, rigOptions{})
	for _, tc := range []struct {
		header, version string
		wantSession     bool
	}{
		{"", "2025-11-25", true},
		{"2025-11-25", "2025-11-25", true},
		{"2025-06-18", "2025-06-18", true},
		{"2026-07-28", "2026-07-28", false},
	} {
		got := r.send(rawReq{method: http.MethodPost, path: "/mcp", header: jsonHeaders("Mcp-Protocol-Version", tc.header), body: initBody(tc.version)})
		if sid := got.header.Get("Mcp-Session-Id"); (sid != "") != tc.wantSession {
			t.Errorf("initialize %s (header %q): status %d, session %q; want a session: %v", tc.version, tc.header, got.status, sid, tc.wantSession)
		}
	}

	for _, tc := range []struct {
		version     string
		wantSession bool
	}{{"", false}, {"2026-07-28", false}, {"2025-11-25", true}, {"2025-03-26", true}} {
		w := &wireLog{base: r.ts.Client().Transport}
		cs := r.connect(tc.version, &http.Client{Transport: w}, nil)
		var info server.AskInfoOut
		rigCall(t, cs, "ask_info", map[string]any{"type": "all_agents"}, &info)
		if info.Type != "all_agents" {
			t.Errorf("client %q: ask_info = %+v", tc.version, info)
		}
		if sessions := w.sessionIDs(); (len(sessions) > 0) != tc.wantSession || (cs.ID() != "") != tc.wantSession {
			t.Errorf("client %q (negotiated %s): session IDs %q, client session %q; want a session: %v",
				tc.version, cs.InitializeResult().ProtocolVersion, sessions, cs.ID(), tc.wantSession)
		}
	}
}

// leakProbe marks the operator message whose LLM calls the fake refuses
// with 401, so the LLM client's failure path is exercised too.
const leakProbe = "LEAK-PROBE: please acknowledge"

// TestSentinelKeyNeverLeaks runs a whole scripted task (with a question to
// the operator) through an MCP client over HTTP, plus an LLM call refused
// with 401, and looks for the API key in everything a client can see —
// every response body on the wire (results, errors, resource reads, the
// notification streams), every notification handed to the client — and in
// the stack's logs.
func TestSentinelKeyNeverLeaks(t *testing.T) {
	var refused sync.Map // agent+step IDs already refused once
	r := newHTTPRig(t, rigOptions{AskOperator: true, LLM: func(c *fakellm.Call, next func(*fakellm.Call) fakellm.Reply) fakellm.Reply {
		if strings.Contains(c.Prompt, leakProbe) {
			if _, again := refused.LoadOrStore(c.StepID, true); !again {
				return fakellm.Reply{Status: http.StatusUnauthorized, Content: "Incorrect API key provided"}
			}
		}
		return next(c)
	}})
	ctx := context.Background()
	wire := &wireLog{base: r.ts.Client().Transport}
	var seen teststack.SyncBuffer // every notification, as JSON
	var updated, logged, progressed atomic.Int64
	note := func(kind string, n *atomic.Int64, params any) {
		n.Add(1)
		b, _ := json.Marshal(params)
		fmt.Fprintf(&seen, "%s %s\n", kind, b)
	}
	var none atomic.Int64
	cs := r.connect("2025-11-25", &http.Client{Transport: wire}, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, q *mcp.ResourceUpdatedNotificationRequest) {
			note("updated", &updated, q.Params)
		},
		LoggingMessageHandler: func(_ context.Context, q *mcp.LoggingMessageRequest) { note("log", &logged, q.Params) },
		ProgressNotificationHandler: func(_ context.Context, q *mcp.ProgressNotificationClientRequest) {
			note("progress", &progressed, q.Params)
		},
		ResourceListChangedHandler: func(_ context.Context, q *mcp.ResourceListChangedRequest) { note("list_changed", &none, q.Params) },
	})
	if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
		t.Fatal(err)
	}
	subscribe := func(uri string) {
		if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
			t.Fatalf("subscribe %s: %v", uri, err)
		}
	}
	for _, uri := range []string{"mas://tasks", "mas://agents", "mas://catalog", "mas://operators/" + r.stack.Sys.OperatorID() + "/inbox"} {
		subscribe(uri)
	}
	var added server.AddTaskOut
	rigCall(t, cs, "add_task", map[string]any{"task_name": "report", "task_intention": "Research a topic and write a report."}, &added)
	subscribe(added.ResourceURI)
	subscribe("mas://tasks/" + added.TaskID + "/conversation")

	// wait follows the MAS with wait_for_updates (asking for progress)
	// until done holds.
	var cursor uint64
	var timedOut bool // the last wait found nothing and timed out
	wait := func(what string, done func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !done() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s\n%s", what, r.stack.Dump())
			}
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "wait_for_updates", Meta: mcp.Meta{"progressToken": "sentinel"},
				Arguments: map[string]any{"cursor": cursor, "timeout_seconds": 2}})
			if err != nil || res.IsError {
				t.Fatalf("wait_for_updates: %v %v", err, res)
			}
			var w server.WaitOut
			b, _ := json.Marshal(res.StructuredContent)
			_ = json.Unmarshal(b, &w)
			cursor, timedOut = w.Cursor, w.TimedOut
		}
	}
	var question engine.InboxEntry
	wait("alice's question", func() bool {
		var inbox server.GetInboxOut
		rigCall(t, cs, "get_inbox", map[string]any{"only_awaiting_reply": true}, &inbox)
		for _, m := range inbox.Messages {
			if m.Content == scripted.OperatorQuestion {
				question = m.InboxEntry
			}
		}
		return question.MessageID != ""
	})
	rigCall(t, cs, "send_message", map[string]any{"task_id": added.TaskID, "receiver": []string{question.SenderID}, "content": "Use markdown."}, nil)
	wait("the task to finish", func() bool { return r.stack.Task(added.TaskID).ExecutionState == engine.StateFinished })

	// The manager's LLM call about the probe is refused: its step fails.
	manager := r.stack.Sys.ManagerID()
	rigCall(t, cs, "send_message", map[string]any{"task_id": r.stack.Sys.BaseTaskID(), "receiver": []string{manager}, "content": leakProbe}, nil)
	wait("the manager's refused step", func() bool {
		a, _ := r.stack.Sys.Agent(manager)
		return slices.ContainsFunc(a.AgentStep.StepList, func(s engine.StepState) bool { return s.ExecutionState == engine.StateFailed })
	})
	// Once the MAS is quiet, a wait times out, with progress on the way
	// (a wait that returned events does not count: it may have sent none).
	timedOut = false
	wait("a quiet MAS", func() bool {
		r.srv.AwaitUpdatesHandled(r.stack.Sys.EventSeq())
		return timedOut && r.srv.EventCursor(r.stack.Sys.OperatorID()) == cursor
	})

	// Read everything there is, as resources and through the tools, and
	// provoke errors.
	var uris []string
	for res, err := range cs.Resources(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		uris = append(uris, res.URI)
	}
	task := r.stack.Task(added.TaskID)
	for _, st := range task.StageList {
		uris = append(uris, "mas://tasks/"+task.TaskID+"/stages/"+st.StageID)
	}
	var agentIDs []string
	for _, a := range r.stack.Sys.AgentBriefs() {
		agentIDs = append(agentIDs, a.AgentID)
		uris = append(uris, "mas://agents/"+a.AgentID+"/steps", "mas://operators/"+a.AgentID+"/inbox")
	}
	uris = append(uris, "mas://nothing", "https://example.com/", "mas://tasks/no-such-task")
	for _, uri := range uris {
		_, _ = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
		_, _ = cs.CallTool(ctx, &mcp.CallToolParams{Name: "read_resource", Arguments: map[string]any{"uri": uri}})
	}
	for _, typ := range append(slices.Clone(engine.QueryTypes), "tasks", "no_such_type") {
		_, _ = cs.CallTool(ctx, &mcp.CallToolParams{Name: "ask_info", Arguments: map[string]any{
			"type": typ, "task_id": task.TaskID, "stage_id": task.StageList[0].StageID, "agent_id": agentIDs}})
	}
	for _, call := range []mcp.CallToolParams{
		{Name: "manage_task", Arguments: map[string]any{"action": "explode", "task_id": task.TaskID}},
		{Name: "manage_task", Arguments: map[string]any{"action": "finish_task", "task_id": task.TaskID}},
		{Name: "manage_agent", Arguments: map[string]any{"action": "init_new_agent", "agent_config": map[string]any{"template": "nope"}}},
		{Name: "send_message", Arguments: map[string]any{"task_id": "nope", "receiver": []string{manager}, "content": "x"}},
		{Name: "get_inbox", Arguments: map[string]any{"limit": -1}},
		{Name: "wait_for_updates", Arguments: map[string]any{"timeout_seconds": 301}},
		{Name: "no_such_tool"},
	} {
		_, _ = cs.CallTool(ctx, &call)
	}
	if _, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "operator_guide", Arguments: map[string]string{"task": "x"}}); err != nil {
		t.Error(err)
	}
	_ = cs.Close() // ends the notification stream, so all of it was read

	wireText, seenText, logs := wire.bodies.String(), seen.String(), r.stack.Logs.String()
	// The capture saw the run (else finding no key would prove nothing).
	for _, want := range []string{scripted.TaskSummary, scripted.OperatorQuestion, leakProbe, "status 401", `"isError":true`, "notifications/resources/updated", "notifications/message"} {
		if !strings.Contains(wireText, want) {
			t.Errorf("the captured traffic lacks %q", want)
		}
	}
	if updated.Load() == 0 || logged.Load() == 0 || progressed.Load() == 0 {
		t.Errorf("notifications: %d resources/updated, %d logging, %d progress; want some of each", updated.Load(), logged.Load(), progressed.Load())
	}
	if !strings.Contains(logs, "401") {
		t.Error("the logs do not show the refused LLM call")
	}
	for name, text := range map[string]string{"the HTTP responses": wireText, "the notifications": seenText, "the logs": logs} {
		for _, secret := range []string{teststack.SentinelKey, "SENTINEL"} {
			if i := strings.Index(text, secret); i >= 0 {
				t.Errorf("%s contain %q: …%s…", name, secret, text[max(0, i-200):min(len(text), i+100)])
			}
		}
	}
	t.Logf("checked %d bytes of responses, %d of notifications, %d of logs", len(wireText), len(seenText), len(logs))
}

// TestServeHTTPGracefulShutdown: ServeHTTP returns within a few seconds of
// its context's end even with open event streams (the streamable
// standalone stream and a legacy SSE session) and a wait_for_updates call
// pending.
func TestServeHTTPGracefulShutdown(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pending []string // the sessions with a wait_for_updates call pending
	}{
		{name: "open streams"},
		{name: "wait pending over streamable HTTP", pending: []string{"streamable"}},
		{name: "wait pending over SSE", pending: []string{"sse"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testShutdown(t, tc.pending)
		})
	}
}

func testShutdown(t *testing.T, pending []string) {
	st := teststack.New(t, teststack.Options{})
	srv, err := server.New(server.Config{System: st.Sys, Logger: st.Log, HTTP: server.HTTPConfig{Addr: "127.0.0.1:0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrc := make(chan string, 1)
	served := make(chan error, 1)
	go func() { served <- srv.ServeHTTP(ctx, func(a string) { addrc <- a }) }()
	addr := <-addrc

	transport := &http.Transport{}
	t.Cleanup(transport.CloseIdleConnections)
	wire := &wireLog{base: transport}
	hc := &http.Client{Transport: wire}
	progress := make(chan string, 16)
	opts := &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, q *mcp.ProgressNotificationClientRequest) {
		select {
		case progress <- fmt.Sprint(q.Params.ProgressToken):
		default:
		}
	}}
	dial := func(tr mcp.Transport) *mcp.ClientSession {
		// Not a context with a timeout: the SSE client's stream lives
		// (only) as long as Connect's context.
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "shutdown", Version: "1"}, opts).Connect(context.Background(), tr, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.Close() })
		return cs
	}
	sessions := map[string]*mcp.ClientSession{
		"streamable": dial(&mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", HTTPClient: hc, MaxRetries: -1}),
		"sse":        dial(&mcp.SSEClientTransport{Endpoint: "http://" + addr + "/sse", HTTPClient: hc}),
	}
	if !wire.bodies.WaitFor(5*time.Second, nil, func(s string) bool { return strings.Contains(s, "--- GET /mcp: 200") }) {
		t.Fatal("the streamable client opened no standalone stream")
	}

	// A long wait on each, pending once its first progress arrives.
	returned := make(chan string, len(pending))
	for _, name := range pending {
		go func() {
			res, err := sessions[name].CallTool(context.Background(), &mcp.CallToolParams{Name: "wait_for_updates", Meta: mcp.Meta{"progressToken": name},
				Arguments: map[string]any{"timeout_seconds": 300}})
			returned <- fmt.Sprintf("%s: err %v, result %v", name, err, res != nil && !res.IsError)
		}()
	}
	for range pending {
		select {
		case <-progress:
		case <-time.After(10 * time.Second):
			t.Fatal("a wait never reported progress")
		}
	}

	cancel()
	start := time.Now()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("ServeHTTP: %v", err)
		}
		t.Logf("ServeHTTP returned %s after the cancel", time.Since(start).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		// Unblock it, so the test ends (and reports) now.
		_ = srv.Close()
		t.Fatal("ServeHTTP still serving 5 s after its context ended")
	}
	for range pending {
		select {
		case got := <-returned:
			t.Logf("pending call ended: %s", got)
		case <-time.After(5 * time.Second):
			t.Fatal("a pending wait_for_updates call never ended after shutdown")
		}
	}
}

// TestBearerGuessesThrottled: a wrong "Authorization: Bearer" token on the
// monitor API or the MCP endpoints counts as a failed attempt of its
// source address in bind_human_agent's throttle (one count for all the
// doors): past limits.password_failures, every request from the address
// with a bearer token is answered 429 with Retry-After, unchecked — a right
// token included, as bind_human_agent refuses a right token then — until
// the backoff (doubling with each failure) is over. Right tokens are never
// counted, and requests without a token (a bound session) are not refused.
func TestBearerGuessesThrottled(t *testing.T) {
	clock := newFakeClock()
	var ann, bea string
	tok := tokenOperators(t, &ann, &bea)
	m := newMonitorEnv(t, envOptions{Config: func(c *server.Config) {
		tok.Config(c)
		c.Limits.PasswordFailures, c.Limits.PasswordBackoff, c.Limits.PasswordBackoffMax = 2, time.Minute, time.Hour
		c.Limits.Now = clock.Now
	}})
	client := func(token string) *apiClient {
		c := m.client()
		c.token = token
		c.header.Set("Accept", "application/json, text/event-stream")
		return c
	}
	good, guess := client(tokenAnn), client("guess-0000000000000000")
	page := client("")
	page.json(http.MethodPost, "/api/bind_human_agent", map[string]any{"token": tokenBea}, http.StatusOK, nil)
	// mcpInit opens an MCP session, and closes it if it opened.
	mcpInit := func(c *apiClient) apiResponse {
		b, _ := io.ReadAll(initBody("2025-11-25"))
		r := c.do(http.MethodPost, "/mcp", string(b))
		if id := r.header.Get("Mcp-Session-Id"); id != "" {
			c.header.Set("Mcp-Session-Id", id)
			if d := c.do(http.MethodDelete, "/mcp", nil); d.status != http.StatusNoContent && d.status != http.StatusOK {
				t.Errorf("DELETE /mcp: status %d", d.status)
			}
			c.header.Del("Mcp-Session-Id")
		}
		return r
	}
	want := func(what string, r apiResponse, status int, retryAfter string) {
		t.Helper()
		if r.status != status || r.header.Get("Retry-After") != retryAfter {
			t.Errorf("%s: status %d, Retry-After %q; want %d, %q (body %.200s)", what, r.status, r.header.Get("Retry-After"), status, retryAfter, r.body)
		}
	}

	// Right tokens, however many, are not counted.
	for range 5 {
		want("a right token on /api/whoami", good.do(http.MethodGet, "/api/whoami", nil), http.StatusOK, "")
	}
	want("a right token on /mcp", mcpInit(good), http.StatusOK, "")
	if _, _, _, _, n := m.srv.Held(); n != 0 {
		t.Fatalf("throttle entries after right tokens only: %d, want 0", n)
	}

	// Two wrong tokens, one on each door (GET /api/events counts once).
	want("guess 1 on /api/events", guess.do(http.MethodGet, "/api/events", nil), http.StatusUnauthorized, "")
	want("guess 2 on /mcp", mcpInit(guess), http.StatusUnauthorized, "")
	// The address backs off: 1 minute.
	want("guess 3 on /api/whoami", guess.do(http.MethodGet, "/api/whoami", nil), http.StatusTooManyRequests, "60")
	want("guess 4 on /mcp", mcpInit(guess), http.StatusTooManyRequests, "60")
	want("guess 5 on /sse", guess.do(http.MethodGet, "/sse", nil), http.StatusTooManyRequests, "60")
	want("a right token on /api/whoami meanwhile", good.do(http.MethodGet, "/api/whoami", nil), http.StatusTooManyRequests, "60")
	want("a right token on /mcp meanwhile", mcpInit(good), http.StatusTooManyRequests, "60")
	want("bind_human_agent with a right token meanwhile", page.do(http.MethodPost, "/api/bind_human_agent", map[string]any{"token": tokenAnn}),
		http.StatusTooManyRequests, "60")
	want("a bound session meanwhile", page.do(http.MethodGet, "/api/whoami", nil), http.StatusOK, "")

	// Once the backoff is over, right tokens pass; the next wrong one
	// doubles it.
	clock.advance(time.Minute)
	want("a right token on /api/whoami after the backoff", good.do(http.MethodGet, "/api/whoami", nil), http.StatusOK, "")
	want("a right token on /mcp after the backoff", mcpInit(good), http.StatusOK, "")
	want("guess 6 after the backoff", guess.do(http.MethodGet, "/api/whoami", nil), http.StatusUnauthorized, "")
	want("guess 7", mcpInit(guess), http.StatusTooManyRequests, "120")
}
