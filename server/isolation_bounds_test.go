package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/internal/teststack"

	"github.com/mas-mcp/mas-mcp/server"
)

// TestInputResponsesBounded: a reply given as an elicitation answer
// (wait_for_updates' inputResponses, protocol 2026-07-28) is free text sent
// to an agent like send_message's content, so it is held to the same limit
// (limits.text_bytes, 32 KiB by default) with an error naming the field;
// more answers than a list may hold (limits.list_items) are refused
// together; answer_approval's arguments are bounded as JSON.
func TestInputResponsesBounded(t *testing.T) {
	e := newEnvWith(t, envOptions{ProtocolVersion: "2026-07-28"})
	f := e.startTask()
	huge := strings.Repeat("x", 200<<10) // 200 KiB, over limits.text_bytes

	// send_message refuses it, naming the field: the limit is real.
	if txt := e.callErr("send_message", map[string]any{"task_id": f.TaskID, "receiver": []string{f.Question.SenderID}, "content": huge}); !strings.Contains(txt, "content") {
		t.Fatalf("send_message's refusal: %.200s", txt)
	}

	wait := func(responses mcp.InputResponseMap) string {
		t.Helper()
		res, err := e.client.CallTool(context.Background(), &mcp.CallToolParams{Name: "wait_for_updates", Arguments: map[string]any{"timeout_seconds": 1},
			InputResponses: responses})
		if err != nil {
			t.Fatalf("wait_for_updates: %v", err)
		}
		if !res.IsError {
			t.Errorf("wait_for_updates took the answers: %.300s", resultText(res))
		}
		return resultText(res)
	}
	unanswered := func(what string) {
		t.Helper()
		for _, m := range e.stack.Task(f.TaskID).SharedConversationPool {
			if m.SenderID == f.Operator && m.ReturnWaitingID != "" {
				t.Errorf("%s: a %d-byte reply was sent to %s", what, len(m.Message), f.Question.SenderID)
			}
		}
	}

	txt := wait(mcp.InputResponseMap{f.Question.MessageID: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"reply": huge}}})
	if field := fmt.Sprintf("inputResponses[%q].reply", f.Question.MessageID); !strings.Contains(txt, field) || !strings.Contains(txt, "limits.text_bytes") {
		t.Errorf("the refusal of a %d-byte reply does not name %s and limits.text_bytes: %.300s", len(huge), field, txt)
	}
	unanswered("a huge reply")

	many := mcp.InputResponseMap{f.Question.MessageID: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"reply": "fine"}}}
	for i := range 64 {
		many[fmt.Sprintf("made-up-%d", i)] = &mcp.ElicitResult{Action: "cancel"}
	}
	if txt := wait(many); !strings.Contains(txt, "inputResponses: 65 items") || !strings.Contains(txt, "limits.list_items") {
		t.Errorf("the refusal of 65 answers does not name inputResponses and limits.list_items: %.300s", txt)
	}
	unanswered("65 answers")

	args := map[string]any{"path": huge}
	if txt := e.callErr("answer_approval", map[string]any{"message_id": f.Question.MessageID, "approve": true, "arguments": args}); !strings.Contains(txt, "arguments") || !strings.Contains(txt, "limits.text_bytes") {
		t.Errorf("answer_approval's refusal of %d KiB of arguments: %.300s", len(huge)>>10, txt)
	}
}

// TestListenStreamsCapped: every long-lived stream an operator can hold
// open is capped (sessions, /api/events, /sse), and so are the
// subscriptions/listen streams of protocol 2026-07-28, stateless and so
// outside the session caps (limits.long_requests_per_operator, shared with
// long polls: TestLongRequestCaps). With every cap at 2, twenty go-sdk
// clients of one operator, each subscribing, hold 2 listen streams open,
// not 40 (go-sdk opens one at connect, for list changes, and one per
// subscribed URI; it takes a refused one silently, so each client still
// connects). The streams held work; a refused one is told why; once one
// ends, another opens.
func TestListenStreamsCapped(t *testing.T) {
	var ann string
	e := newEnvWith(t, envOptions{Config: func(c *server.Config) {
		var err error
		if ann, err = c.System.AddOperator("ann"); err != nil {
			t.Fatal(err)
		}
		c.HTTP.Tokens = map[string]string{tokenAnn: ann}
		c.Limits.Sessions, c.Limits.SessionsPerOperator = 2, 2
		c.Limits.SSEStreams, c.Limits.SSEStreamsPerOperator = 2, 2
		c.Limits.EventStreams, c.Limits.EventStreamsPerOperator = 2, 2
		c.Limits.LongRequests, c.Limits.LongRequestsPerOperator = 4, 2
		c.Coalesce = time.Millisecond
	}})
	ts := httptest.NewServer(e.srv.Handler())
	t.Cleanup(ts.Close)
	held := func() int {
		_, n := e.srv.LongRequests(ann)
		return n
	}
	// A client's Connect and Subscribe return once the server answered
	// their listen request (admitted, or refused): no wait is needed.
	const n = 20
	var peers []*peer
	for range n {
		p := e.httpPeer(ts.URL, tokenAnn, "2026-07-28")
		p.subscribe("mas://tasks")
		peers = append(peers, p)
	}
	// The first client holds both places (its connect's stream and its
	// subscription's): one stream is subscribed to mas://tasks, not 20.
	if got := e.srv.SubscribedSessions(); got != 1 {
		t.Fatalf("%d subscriptions/listen streams of one operator are subscribed to mas://tasks, want 1 (a share of 2, the first client's two)", got)
	}
	if got := held(); got != 2 {
		t.Fatalf("one operator holds %d subscriptions/listen streams open with a share of 2", got)
	}
	var added server.AddTaskOut
	peers[0].call("add_task", map[string]any{"task_name": "r", "task_intention": "Research a topic and write a report."}, &added)
	peers[0].waitUntil("a notification of mas://tasks on a stream held", func() bool { return len(peers[0].noticesOf("mas://tasks")) > 0 })

	// The refusal, as a client reading the answer sees it.
	body := `{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"notifications":{"resourceSubscriptions":["mas://tasks"]},` +
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}`
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/mcp", strings.NewReader(body))
	for k, v := range map[string]string{"Authorization": "Bearer " + tokenAnn, "Content-Type": "application/json",
		"Accept": "application/json, text/event-stream", "Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "subscriptions/listen"} {
		req.Header.Set(k, v)
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	refused(t, "a third listen stream", reply{status: resp.StatusCode, header: resp.Header, body: string(b)},
		http.StatusTooManyRequests, "operator "+ann, "limits.long_requests_per_operator")

	// One ends (its handler returns once the client closed it): another
	// client's subscription, refused before, is admitted and works.
	if err := peers[0].client.Unsubscribe(context.Background(), &mcp.UnsubscribeParams{URI: "mas://tasks"}); err != nil {
		t.Fatal(err)
	}
	awaitLong(t, e.srv, ann, 1)
	if err := peers[1].client.Unsubscribe(context.Background(), &mcp.UnsubscribeParams{URI: "mas://tasks"}); err != nil {
		t.Fatal(err) // forgets the refused one (nothing is open)
	}
	peers[1].subscribe("mas://tasks")
	if got, subscribed := held(), e.srv.SubscribedSessions(); got != 2 || subscribed != 1 {
		t.Fatalf("after one stream ended and another client subscribed: %d held, %d subscribed; want 2 and 1", got, subscribed)
	}
	peers[0].call("add_task", map[string]any{"task_name": "r2", "task_intention": "Research another topic."}, nil)
	peers[1].waitUntil("a notification of mas://tasks on the stream admitted after one ended", func() bool { return len(peers[1].noticesOf("mas://tasks")) > 0 })
}

// TestSubscriptionsPerSessionCapped: one session may not subscribe to URIs
// naming no resource (mas://agents/<made up>/steps), nor to more resources
// than limits.subscriptions_per_session; a URI subscribed to again counts
// once, and an unsubscription makes room.
func TestSubscriptionsPerSessionCapped(t *testing.T) {
	e := newEnvWith(t, envOptions{ProtocolVersion: "2025-11-25", Config: func(c *server.Config) { c.Limits.SubscriptionsPerSession = 3 }})
	ctx := context.Background()
	sub := func(uri string) error { return e.client.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}) }
	if err := sub("mas://agents/made-up-1/steps"); err == nil {
		t.Errorf("a subscription to a URI naming no resource was taken")
	}
	for _, uri := range []string{"mas://tasks", "mas://agents", "mas://catalog", "mas://tasks"} {
		if err := sub(uri); err != nil {
			t.Fatalf("subscribe %s: %v", uri, err)
		}
	}
	fourth := "mas://tasks/" + e.stack.Sys.BaseTaskID()
	if err := sub(fourth); err == nil || !strings.Contains(err.Error(), "limits.subscriptions_per_session") {
		t.Errorf("a fourth subscription with a cap of 3: %v, want a refusal naming limits.subscriptions_per_session", err)
	}
	if err := e.client.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: "mas://catalog"}); err != nil {
		t.Fatal(err)
	}
	if err := sub(fourth); err != nil {
		t.Errorf("subscribe %s after an unsubscription: %v", fourth, err)
	}
}

// TestLongPollsPerSessionCapped: limits.long_requests_per_operator bounds
// the long waits an operator holds within sessions (protocol 2025-11-25),
// as it bounds the stateless requests of 2026-07-28: with a cap of 2, once
// bea holds two wait_for_updates long polls in one session (up to 300 s
// each: a goroutine, a stream and a scan of the event log per change), a
// third is refused at once with a tool error naming the key, and so is a
// tasks/result wait in another session of hers (a JSON-RPC error); ann's
// share is her own; a wait that ends frees its place.
func TestLongPollsPerSessionCapped(t *testing.T) {
	o := newOperatorsWith(t, "2025-11-25", func(c *server.Config) {
		c.Limits.LongRequests, c.Limits.LongRequestsPerOperator = 4, 2
	})
	ann, bea, base := o.annPeer, o.beaPC, o.stack.Sys.BaseTaskID()
	// A task of bea's that waits for her answer: tasks/result would wait.
	var added server.AddTaskOut
	bea.call("add_task", map[string]any{"task_name": "bea's", "task_intention": "Research a topic and write a report."}, &added)
	o.stack.WaitFor("bea's task staffed, and rest", func() bool {
		return len(o.stack.Task(added.TaskID).StageList) > 0 && atRest(o.stack.Sys)
	})
	// Long polls of the base task, where nothing happens at rest.
	poll := func(timeout int) *mcp.CallToolParams {
		return mcpCall("wait_for_updates", map[string]any{"timeout_seconds": timeout, "task_id": base})
	}
	ctx := context.Background()
	var stops []func()
	for i := range 2 {
		pctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			p := poll(60) // outlasts the test; a failed run's polls end by themselves
			p.SetProgressToken(fmt.Sprintf("poll-%d", i))
			_, _ = bea.client.CallTool(pctx, p)
		}()
		stops = append(stops, sync.OnceFunc(func() { cancel(); <-done }))
	}
	t.Cleanup(func() {
		// The server ends a poll once the client's cancellation reaches
		// it: its place is free, and nothing holds the HTTP server open.
		for _, stop := range stops {
			stop()
		}
		awaitLong(t, o.srv, o.bea, 0)
	})
	// Each poll waits once it sends progress (after its place is taken).
	waiting := map[any]bool{}
	bea.waitUntil("both polls waiting (a progress notification each)", func() bool {
		for _, p := range drain(bea.progress) {
			waiting[p.ProgressToken] = true
		}
		return len(waiting) == 2
	})
	if _, held := o.srv.LongRequests(o.bea); held != 2 {
		t.Errorf("bea's two waiting polls hold %d places, want 2", held)
	}

	// (A poll over the cap that were let in would time out after 1 s, and a
	// tasks/result after 20: failures, not hangs.)
	res, err := bea.client.CallTool(ctx, poll(1))
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(resultText(res), "limits.long_requests_per_operator") {
		t.Fatalf("bea's third wait_for_updates with a cap of 2: %q (isError %v), want a tool error naming limits.long_requests_per_operator", resultText(res), res.IsError)
	}
	t.Logf("refused: %s", resultText(res))
	c := mcp.NewClient(&mcp.Implementation{Name: "tasks-client", Version: "1"}, nil)
	if err := mcp.AddSendingCustomMethod[*extTaskParams, *mcp.CallToolResult](c, "tasks/result"); err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: o.url + "/mcp", HTTPClient: &http.Client{Transport: teststack.Bearer{Token: tokenBea, Base: tr}}, MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_, err = mcp.CallCustomMethod[*extTaskParams, *mcp.CallToolResult](rctx, cs, "tasks/result", &extTaskParams{TaskID: added.TaskID})
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || !strings.Contains(rpcErr.Message, "limits.long_requests_per_operator") {
		t.Errorf("bea's tasks/result beside her two long polls: %v, want a JSON-RPC error naming limits.long_requests_per_operator", err)
	}
	if res := ann.call("wait_for_updates", map[string]any{"timeout_seconds": 1, "task_id": base}, nil); res.IsError {
		t.Errorf("ann's wait_for_updates while bea is at her cap: %s", resultText(res))
	}

	stops[0]()
	awaitLong(t, o.srv, o.bea, 1)
	if res := bea.call("wait_for_updates", map[string]any{"timeout_seconds": 1, "task_id": base}, nil); res.IsError {
		t.Errorf("bea's wait_for_updates once one of hers ended: %s", resultText(res))
	}
}
