package server_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/server"
)

// TestInputRequestsAreBounded: a task's open questions travel as
// inputRequests (tasks/get, wait_for_updates's input_required) at most
// limits.list_items at a time — as many as one tasks/update or retry may
// answer — and the answer says how many more wait (_meta
// mas-mcp/moreInputRequests; tasks/get's statusMessage too). Once those
// are answered, the rest come.
func TestInputRequestsAreBounded(t *testing.T) {
	const listItems = 3
	r := &extRig{}
	tok := tokenOperators(t, &r.ann, &r.bea)
	r.env = newEnvWith(t, envOptions{Config: func(c *server.Config) {
		tok.Config(c)
		c.Limits.ListItems = listItems
	}})
	ts := httptest.NewServer(r.srv.Handler())
	t.Cleanup(ts.Close)
	r.url = ts.URL + "/mcp"
	sys := r.stack.Sys

	id := r.addTask(tokenAnn, "many questions").TaskID
	r.openQuestion(r.ann, id) // alice's, then four more of the manager's
	ctx, cancel := context.WithCancel(context.Background())
	var asks sync.WaitGroup
	t.Cleanup(func() { cancel(); asks.Wait() })
	for i := range 4 {
		asks.Go(func() {
			_, _ = sys.AskOperator(ctx, engine.OperatorQuestion{TaskID: id, AgentID: r.stack.Task(id).TaskManager, Question: "question " + string(rune('A'+i))})
		})
	}
	const total = 5
	open := func() int {
		in, _ := sys.Inbox(r.ann)
		n := 0
		for _, e := range in {
			if e.AwaitingReply && e.TaskID == id {
				n++
			}
		}
		return n
	}
	r.stack.WaitFor("five open questions", func() bool { return open() == total })

	ext := r.client(tokenAnn, true, nil)
	got, err := call(t, ext, "tasks/get", &extTaskParams{TaskID: id})
	if err != nil || got.Status != "input_required" {
		t.Fatalf("tasks/get: %+v, %v", got, err)
	}
	if len(got.InputRequests) != listItems || got.Meta["mas-mcp/moreInputRequests"] != float64(total-listItems) ||
		!strings.Contains(got.StatusMessage, "2 more") {
		t.Errorf("tasks/get: %d inputRequests, _meta %v, statusMessage %q: want %d of them, and 2 more said", len(got.InputRequests), got.Meta, got.StatusMessage, listItems)
	}

	// wait_for_updates, read without go-sdk's automatic retries.
	cs := r.mrtrClient(tokenAnn)
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "wait_for_updates", Arguments: map[string]any{"task_id": id, "timeout_seconds": 1}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.InputRequests) != listItems || res.Meta["mas-mcp/moreInputRequests"] != float64(total-listItems) {
		t.Fatalf("wait_for_updates: %d inputRequests, _meta %v: want %d of them and 2 more", len(res.InputRequests), res.Meta, listItems)
	}

	// Answering them brings the rest.
	answers := map[string]any{}
	for key := range res.InputRequests {
		answers[key] = map[string]any{"action": "accept", "content": map[string]any{"reply": "ok"}}
	}
	if _, err := call(t, ext, "tasks/update", &extTaskParams{TaskID: id, InputResponses: answers}); err != nil {
		t.Fatalf("tasks/update: %v", err)
	}
	got, err = call(t, ext, "tasks/get", &extTaskParams{TaskID: id})
	if err != nil || len(got.InputRequests) != total-listItems || got.Meta["mas-mcp/moreInputRequests"] != nil {
		t.Errorf("tasks/get after answering: %d inputRequests, _meta %v, %v: want the other %d, no more", len(got.InputRequests), got.Meta, err, total-listItems)
	}
}

// mrtrClient connects a 2026-07-28 client that declares form elicitation
// and makes no automatic multi round-trip retries: its wait_for_updates
// returns the input_required result itself.
func (r *extRig) mrtrClient(token string) *mcp.ClientSession {
	r.t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "mrtr", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) { return nil, nil },
		MultiRoundTrip:     &mcp.MultiRoundTripOptions{Disabled: true}})
	return r.connect(c, token)
}
