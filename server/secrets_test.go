package server_test

import (
	"context"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/internal/teststack"
)

// TestSecretInArgumentsIsRedacted: a tool call or a resource read whose
// arguments hold a secret (the API key) is answered — with an error that
// quotes them, or a result that repeats them — with "[redacted]" in its
// place, and the key shows up in no answer and no log line.
func TestSecretInArgumentsIsRedacted(t *testing.T) {
	e := newEnv(t)
	key := teststack.SentinelKey
	var answers []string
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"ask_info", map[string]any{"type": "type-" + key}},
		{"manage_task", map[string]any{"action": key, "task_id": e.stack.Sys.BaseTaskID()}},
		{"manage_agent", map[string]any{"action": "add_task_participant", "task_id": key, "agents": []string{key}}},
		{"send_message", map[string]any{"task_id": key, "receiver": []string{e.stack.Sys.ManagerID()}, "content": "x"}},
		{"read_resource", map[string]any{"uri": "mas://tasks/" + key}},
	} {
		answers = append(answers, c.tool+": "+e.callErr(c.tool, c.args))
	}
	answers = append(answers, "add_task: "+resultText(e.call("add_task", map[string]any{"task_name": "call " + key, "task_intention": "Use " + key + "."}, nil)))
	_, err := e.client.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "mas://tasks/" + key})
	if err == nil {
		t.Fatal("reading a task that does not exist succeeded")
	}
	if strings.Contains(err.Error(), key) {
		t.Errorf("resources/read's error holds the API key: %v", err)
	}
	for _, a := range answers {
		if strings.Contains(a, key) {
			t.Errorf("the answer holds the API key: %s", a)
		}
		if !strings.Contains(a, "[redacted]") {
			t.Errorf("the answer lacks \"[redacted]\" (it should quote what it was given): %s", a)
		}
	}
	if strings.Contains(e.stack.Logs.String(), key) {
		t.Error("the logs hold the API key")
	}
}
