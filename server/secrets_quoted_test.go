package server_test

import (
	"context"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/internal/teststack"
)

// TestClippedQuoteOfASecretIsScrubbed: an error quotes a value the client
// sent through clip (its first 64 bytes, then "…"), and then the answer is
// scrubbed (scrubAnswers, apiError). A secret that straddles byte 64 is
// cut by clip: its first bytes (here 14 of the API key) must be scrubbed
// all the same.
func TestClippedQuoteOfASecretIsScrubbed(t *testing.T) {
	key := teststack.SentinelKey
	value := strings.Repeat("a", 50) + key + "\x01" // a control character: the name check quotes the value
	leak := key[:14]                                // what clip keeps of the key (64 - 50 bytes)

	e := newEnv(t)
	answer := e.callErr("manage_task", map[string]any{"action": "pause_task", "task_id": value})
	if strings.Contains(answer, leak) {
		t.Errorf("manage_task's error holds the first %d bytes of the API key %q: %s", len(leak), leak, answer)
	}

	m := newMonitorEnv(t, envOptions{})
	r := m.client().do("GET", "/api/trail?task_id="+strings.Repeat("a", 50)+key+"%01", nil)
	if r.status < 400 {
		t.Fatalf("GET /api/trail: status %d, want an error", r.status)
	}
	if strings.Contains(string(r.body), leak) {
		t.Errorf("GET /api/trail's error holds the first %d bytes of the API key %q: %s", len(leak), leak, r.body)
	}
}

// TestProtocolInputErrorsAreScrubbed: boundRequests, the outermost
// receiving middleware (outside scrubAnswers), quotes the value it refuses
// (a control character): resources/read, resources/subscribe and
// completion/complete must answer a URI or value that holds the API key
// with [redacted], as every answer that quotes a caller's argument does.
func TestProtocolInputErrorsAreScrubbed(t *testing.T) {
	e := newEnvWith(t, envOptions{ProtocolVersion: "2025-11-25"})
	key := teststack.SentinelKey
	uri := "mas://tasks/" + key + "\x01"
	ctx := context.Background()
	check := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: succeeded, want an error", what)
			return
		}
		if strings.Contains(err.Error(), key) {
			t.Errorf("%s: the error holds the API key: %v", what, err)
		}
	}
	_, err := e.client.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
	check("resources/read", err)
	check("resources/subscribe", e.client.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}))
	_, err = e.client.Complete(ctx, &mcp.CompleteParams{
		Ref:      &mcp.CompleteReference{Type: "ref/resource", URI: "mas://tasks/{task_id}"},
		Argument: mcp.CompleteParamsArgument{Name: "task_id", Value: key + "\x01"},
	})
	check("completion/complete", err)
}
