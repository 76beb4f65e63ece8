package server_test

import (
	"context"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
)

// TestProtocolInputsBounded: the values of the protocol's own methods are
// bounded as the tools' are: a tasks/* taskId (and a tasks/update answer's
// key), a URI to read or subscribe to, and a completion's values. Over its
// limit a value is refused (-32602) with an error naming the field, the
// limit and its key; no error quotes more than a short prefix of a value.
func TestProtocolInputsBounded(t *testing.T) {
	r := newExtRig(t)
	ctx := context.Background()
	c := mcp.NewClient(&mcp.Implementation{Name: "sep", Version: "1"}, nil)
	for _, m := range []string{"tasks/get", "tasks/result", "tasks/cancel"} {
		if err := mcp.AddSendingCustomMethod[*sepTaskParams, *sepTask](c, m); err != nil {
			t.Fatal(err)
		}
	}
	sep := r.httpClient(c, tokenAnn)
	ext := r.client(tokenAnn, true, nil)
	hugeID := strings.Repeat("x", 1<<20)
	hugeURI := "mas://tasks/" + hugeID

	// refused checks a refusal of a value over its limit.
	refused := func(what string, err error, field, key string) {
		t.Helper()
		switch {
		case err == nil:
			t.Errorf("%s: no error", what)
		case rpcCode(err) != jsonrpc.CodeInvalidParams:
			t.Errorf("%s: error %.300v: want -32602", what, err)
		case !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), "more than the limit") || !strings.Contains(err.Error(), key):
			t.Errorf("%s: error %.300v: want it to name %s, the limit and %s", what, err, field, key)
		case len(err.Error()) > 1024:
			t.Errorf("%s: a %d-byte error: %.300s", what, len(err.Error()), err)
		}
	}
	for _, m := range []string{"tasks/get", "tasks/result", "tasks/cancel"} {
		_, err := mcp.CallCustomMethod[*sepTaskParams, *sepTask](ctx, sep, m, &sepTaskParams{TaskID: hugeID})
		refused(m, err, "taskId", "limits.name_bytes")
		_, err = call(t, ext, m, &extTaskParams{TaskID: hugeID})
		if m != "tasks/result" { // not a method of the extension
			refused(m+" (2026-07-28)", err, "taskId", "limits.name_bytes")
		}
	}
	_, err := sep.ReadResource(ctx, &mcp.ReadResourceParams{URI: hugeURI})
	refused("resources/read", err, "uri", "limits.name_bytes")
	refused("resources/subscribe", sep.Subscribe(ctx, &mcp.SubscribeParams{URI: hugeURI}), "uri", "limits.name_bytes")
	complete := func(ref *mcp.CompleteReference, value string) error {
		_, err := sep.Complete(ctx, &mcp.CompleteParams{Ref: ref, Argument: mcp.CompleteParamsArgument{Name: "task_id", Value: value}})
		return err
	}
	template := &mcp.CompleteReference{Type: "ref/resource", URI: "mas://tasks/{task_id}"}
	prompt := &mcp.CompleteReference{Type: "ref/prompt", Name: "operator_guide"}
	refused("completion/complete of a task_id", complete(template, hugeID), "argument.value", "limits.name_bytes")
	refused("completion/complete of a prompt's free text", complete(prompt, hugeID), "argument.value", "limits.text_bytes")
	if err := complete(prompt, strings.Repeat("x", 1000)); err != nil {
		t.Errorf("completion/complete of 1000 bytes of a prompt's free text: %v", err)
	}

	// A tasks/update answer's key is a message ID.
	task, err := r.stack.Sys.AddTask(r.ann, engine.AddTaskRequest{TaskName: "t", TaskIntention: "do it"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = call(t, ext, "tasks/update", &extTaskParams{TaskID: task, InputResponses: map[string]any{hugeID: map[string]any{"action": "cancel"}}})
	refused("tasks/update", err, "inputResponses", "limits.name_bytes")

	// Within the limits, errors quote a short prefix only.
	longID := strings.Repeat("y", 250)
	_, err = mcp.CallCustomMethod[*sepTaskParams, *sepTask](ctx, sep, "tasks/get", &sepTaskParams{TaskID: longID})
	if err == nil || !strings.Contains(err.Error(), "no such task") || strings.Contains(err.Error(), longID) {
		t.Errorf("tasks/get of an unknown %d-byte taskId: %v: want no such task, quoting a prefix of it", len(longID), err)
	}
}
