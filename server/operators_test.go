package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/internal/teststack"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
	"github.com/mas-mcp/mas-mcp/server"
)

// Bearer tokens of the two operators (at least 16 characters).
const (
	tokenAnn = "ann-token-0123456789abcdef"
	tokenBea = "bea-token-0123456789abcdef"
)

// operators is an env whose server serves HTTP with two bearer tokens, each
// bound to its own operator HumanAgent, and one client per operator.
type operators struct {
	*env
	ann, bea       string // the operators' agent IDs
	annPeer, beaPC *peer
	url            string // the HTTP server's
}

func newOperators(t *testing.T, version string) *operators {
	t.Helper()
	o := &operators{}
	o.env, o.ann, o.bea, o.url = newTwoOperatorEnv(t)
	o.annPeer = o.httpPeer(o.url, tokenAnn, version)
	o.beaPC = o.httpPeer(o.url, tokenBea, version)
	return o
}

// newOperatorsWith is newOperators with the server's configuration
// adjusted (limits, coalescing) after the operators and tokens are set.
func newOperatorsWith(t *testing.T, version string, adjust func(*server.Config)) *operators {
	t.Helper()
	o := &operators{}
	tok := tokenOperators(t, &o.ann, &o.bea)
	o.env = newEnvWith(t, envOptions{Config: func(c *server.Config) {
		tok.Config(c)
		if adjust != nil {
			adjust(c)
		}
	}})
	ts := httptest.NewServer(o.srv.Handler())
	t.Cleanup(ts.Close)
	o.url = ts.URL
	o.annPeer = o.httpPeer(o.url, tokenAnn, version)
	o.beaPC = o.httpPeer(o.url, tokenBea, version)
	return o
}

// newTwoOperatorEnv is an env served over HTTP (at url) with two
// operators, ann and bea, each bound to its bearer token.
func newTwoOperatorEnv(t *testing.T) (e *env, ann, bea, url string) {
	t.Helper()
	return newTwoOperatorEnvWith(t, nil)
}

// newTwoOperatorEnvWith is newTwoOperatorEnv with stack adjusting the
// stack's options (nil: none).
func newTwoOperatorEnvWith(t *testing.T, stack func(*teststack.Options)) (e *env, ann, bea, url string) {
	t.Helper()
	e = newEnvWith(t, envOptions{Stack: stack, Config: func(c *server.Config) {
		var err error
		if ann, err = c.System.AddOperator("ann"); err != nil {
			t.Fatal(err)
		}
		if bea, err = c.System.AddOperator("bea"); err != nil {
			t.Fatal(err)
		}
		c.HTTP.Tokens = map[string]string{tokenAnn: ann, tokenBea: bea}
	}})
	ts := httptest.NewServer(e.srv.Handler())
	t.Cleanup(ts.Close)
	return e, ann, bea, ts.URL
}

// httpPeer connects a client over streamable HTTP with a bearer token.
func (e *env) httpPeer(url, token, version string) *peer {
	e.t.Helper()
	tr := &http.Transport{}
	e.t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: teststack.Bearer{Token: token, Base: tr}}
	return e.dial(&mcp.StreamableClientTransport{Endpoint: url + "/mcp", HTTPClient: hc, MaxRetries: -1}, version)
}

// TestOperatorsAreSeparate: over HTTP each bearer token acts as its own
// operator. Ann's task reports to ann; alice's question reaches ann's inbox
// only; bea can read neither ann's inbox nor ann's conversations.
func TestOperatorsAreSeparate(t *testing.T) {
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			o := newOperators(t, version)
			sys := o.stack.Sys
			ann, bea := o.annPeer, o.beaPC

			var added server.AddTaskOut
			ann.call("add_task", map[string]any{"task_name": "report", "task_intention": "Research a topic and write a report."}, &added)
			task := o.stack.Task(added.TaskID)
			if task.Operator != o.ann || !slices.Contains(task.TaskGroup, o.ann) || slices.Contains(task.TaskGroup, o.bea) {
				t.Fatalf("task operator %s, group %v: want ann (%s) in it and not bea", task.Operator, task.TaskGroup, o.ann)
			}

			var question engine.InboxEntry
			o.stack.WaitFor("alice's question to ann", func() bool {
				entries, _ := sys.Inbox(o.ann)
				for _, m := range entries {
					if m.Content == scripted.OperatorQuestion {
						question = m
					}
				}
				return question.MessageID != "" && atRest(sys)
			})

			// Inboxes through the tool.
			var annInbox, beaInbox server.GetInboxOut
			ann.call("get_inbox", nil, &annInbox)
			bea.call("get_inbox", nil, &beaInbox)
			if annInbox.OperatorID != o.ann || annInbox.AwaitingReply != 1 || len(annInbox.Messages) != 1 || annInbox.Messages[0].MessageID != question.MessageID {
				t.Errorf("ann's get_inbox = %+v, want alice's question", annInbox)
			}
			if beaInbox.OperatorID != o.bea || len(beaInbox.Messages) != 0 {
				t.Errorf("bea's get_inbox = %+v, want bea's empty inbox", beaInbox)
			}
			// The default operator (stdio, in-memory) sees nothing of it.
			var defInbox server.GetInboxOut
			o.call("get_inbox", nil, &defInbox)
			if defInbox.OperatorID != sys.OperatorID() || len(defInbox.Messages) != 0 {
				t.Errorf("the default operator's get_inbox = %+v, want its own empty inbox", defInbox)
			}

			// Inboxes as resources.
			annURI, beaURI := "mas://operators/"+o.ann+"/inbox", "mas://operators/"+o.bea+"/inbox"
			var doc server.InboxDocument
			ann.read(annURI, &doc)
			if doc.OperatorID != o.ann || len(doc.Messages) != 1 || doc.Messages[0].MessageID != question.MessageID {
				t.Errorf("ann reads her inbox: %+v", doc)
			}
			bea.read(beaURI, &doc)
			if doc.OperatorID != o.bea || len(doc.Messages) != 0 {
				t.Errorf("bea reads her inbox: %+v", doc)
			}
			if res, err := bea.client.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: annURI}); err == nil {
				t.Errorf("bea read ann's inbox: %.200s", res.Contents[0].Text)
			} else if !strings.Contains(err.Error(), "only by that operator") {
				t.Errorf("bea reads ann's inbox: error %v, want it to say only ann may", err)
			}
			if txt := bea.callErr("read_resource", map[string]any{"uri": annURI}); !strings.Contains(txt, "only by that operator") {
				t.Errorf("bea's read_resource of ann's inbox: %q", txt)
			}

			// Ann's agent document shows her conversation_pool to her only.
			annAgent := "mas://agents/" + o.ann
			var mine, theirs map[string]any
			ann.read(annAgent, &mine)
			bea.read(annAgent, &theirs)
			pool, _ := mine["conversation_pool"].(map[string]any)
			if privates, _ := pool["conversation_privates"].(map[string]any); privates[question.SenderID] == nil {
				t.Errorf("ann's own agent document lacks her conversation with alice: %v", mine["conversation_pool"])
			}
			if _, ok := theirs["conversation_pool"]; ok {
				t.Errorf("bea sees ann's conversation_pool: %v", theirs["conversation_pool"])
			}
			if doc := bea.readTool(annAgent).(map[string]any); doc["conversation_pool"] != nil {
				t.Errorf("bea's read_resource shows ann's conversation_pool")
			}

			// Bea does not own the task and it is not shared with her: she cannot message its agents.
			if txt := bea.callErr("send_message", map[string]any{"task_id": added.TaskID, "receiver": []string{question.SenderID}, "content": "hi"}); !strings.Contains(txt, "only its owner, operators it is shared with and admins may manage it") {
				t.Errorf("bea's send_message: %q", txt)
			}
			// Ann answers; her inbox empties.
			var sent server.SendMessageOut
			ann.call("send_message", map[string]any{"task_id": added.TaskID, "receiver": []string{question.SenderID}, "content": "Markdown."}, &sent)
			if len(sent.Messages) != 1 || !sent.Messages[0].Answers {
				t.Errorf("ann's answer = %+v", sent)
			}
			ann.call("get_inbox", map[string]any{"only_awaiting_reply": true}, &annInbox)
			if annInbox.AwaitingReply != 0 {
				t.Errorf("ann's inbox still awaits %d replies", annInbox.AwaitingReply)
			}
		})
	}
}

// TestOperatorStepsArePrivate: an operator's messages are its own (spec
// §7.1, and agentDocument hides conversation_pool from other readers); its
// step list must not show them to another operator either.
func TestOperatorStepsArePrivate(t *testing.T) {
	o := newOperators(t, "2025-11-25")
	sys := o.stack.Sys
	const secret = "the launch code is 4242"
	if _, err := sys.HumanSend(o.ann, engine.HumanMessage{TaskID: sys.BaseTaskID(), Receiver: []string{sys.ManagerID()}, Content: secret}); err != nil {
		t.Fatal(err)
	}
	steps := "mas://agents/" + o.ann + "/steps"
	res, err := o.beaPC.client.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: steps})
	if err == nil && strings.Contains(res.Contents[0].Text, secret) {
		t.Errorf("bea reads ann's message in %s", steps)
	}
}

// TestTokensMustNameOperators: a token bound to an ID that is not an
// operator HumanAgent is a configuration error; otherwise its requests act
// as that agent (an LLM agent's add_task gives it a task nobody starts) or
// fail on every call.
func TestTokensMustNameOperators(t *testing.T) {
	e := newEnv(t)
	for name, op := range map[string]string{"unknown ID": noSuchID, "LLM agent": e.stack.Sys.ManagerID()} {
		srv, err := server.New(server.Config{System: e.stack.Sys, HTTP: server.HTTPConfig{Tokens: map[string]string{tokenAnn: op}}})
		if err == nil {
			_ = srv.Close()
			t.Errorf("%s: server.New accepted a token bound to %s", name, op)
		} else if !strings.Contains(err.Error(), op) {
			t.Errorf("%s: error %q does not name %s", name, err, op)
		}
	}
}

// annTaskAtRest has ann add a task and waits until it is staffed and the
// MAS is at rest.
func annTaskAtRest(o *operators) string {
	o.t.Helper()
	var added server.AddTaskOut
	o.annPeer.call("add_task", map[string]any{"task_name": "ann secret merger", "task_intention": "Research a topic and write a report."}, &added)
	o.stack.WaitFor("ann's task staffed, and rest", func() bool {
		return len(o.stack.Task(added.TaskID).StageList) > 0 && atRest(o.stack.Sys)
	})
	return added.TaskID
}
