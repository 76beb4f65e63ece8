package server_test

import (
	"context"
	"fmt"
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
// open is capped (sessions, /api/events, /sse), so the subscriptions/listen
// streams of protocol 2026-07-28 should be too: with every cap at 2, one
// operator should not hold 20 of them open.
func TestListenStreamsCapped(t *testing.T) {
	t.Skip("not fixed yet: subscriptions/listen streams and wait_for_updates long polls of protocol 2026-07-28 are not counted per operator (a cap needs a receiving middleware holding a streamCaps slot for the request's life, and the test's peers must tolerate a refused listen at connect)")
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
		c.Coalesce = time.Millisecond
	}})
	ts := httptest.NewServer(e.srv.Handler())
	t.Cleanup(ts.Close)
	const n = 20
	var peers []*peer
	for range n {
		p := e.httpPeer(ts.URL, tokenAnn, "2026-07-28")
		p.subscribe("mas://tasks")
		peers = append(peers, p)
	}
	var added server.AddTaskOut
	peers[0].call("add_task", map[string]any{"task_name": "r", "task_intention": "Research a topic and write a report."}, &added)
	held := 0
	for _, p := range peers {
		if p.await(func() bool { return len(p.noticesOf("mas://tasks")) > 0 }, 10*time.Second) {
			held++
		}
	}
	if held > 2 {
		t.Errorf("one operator holds %d subscriptions/listen streams open, past every per-operator cap (2)", held)
	}
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
