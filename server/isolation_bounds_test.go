package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

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
