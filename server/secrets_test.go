package server_test

import (
	"context"
	"maps"
	"net/http"
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

// TestSecretInHTTPRequestIsRedacted: the monitor API's errors, and the
// MCP endpoint's, that quote a request's value (its path, a header, a
// field's or a query parameter's value, an unknown field's name, an ID the
// engine did not find) have each secret replaced with "[redacted]", and
// the key shows up in no answer and no log line.
func TestSecretInHTTPRequestIsRedacted(t *testing.T) {
	m := newMonitorEnv(t, envOptions{})
	key := teststack.SentinelKey
	c := m.client()
	task := m.stack.Sys.BaseTaskID()
	send := func(f map[string]any) map[string]any {
		out := map[string]any{"task_id": task, "receiver": []string{m.stack.Sys.ManagerID()}, "content": "hi"}
		maps.Copy(out, f)
		return out
	}
	for _, tc := range []struct {
		method, path string
		body         any
		header       [2]string
	}{
		{"GET", "/api/no-such-" + key, nil, [2]string{}},
		{"GET", "/api/states?type=" + key, nil, [2]string{}},
		{"GET", "/api/trail?task_id=" + task + "&limit=" + key, nil, [2]string{}},
		{"GET", "/api/trail?task_id=" + key + "%01", nil, [2]string{}},
		{"GET", "/api/trail?task_id=" + key, nil, [2]string{}},
		{"POST", "/api/send_message", send(nil), [2]string{"Content-Type", "application/" + key}},
		{"POST", "/api/send_message", send(map[string]any{"human_agent_id": key}), [2]string{}},
		{"POST", "/api/send_message", send(map[string]any{"task_id": key}), [2]string{}},
		{"POST", "/api/control", map[string]any{"action": key}, [2]string{}},
		{"POST", "/api/control", map[string]any{"action": "pause_task", key: true}, [2]string{}},
		{"POST", "/api/control", map[string]any{"action": "pause_task", "task_id": key}, [2]string{}},
		{"POST", "/api/answer_approval", map[string]any{"message_id": key, "approve": true}, [2]string{}},
		{"POST", "/mcp", "{}", [2]string{"Mcp-Protocol-Version", key}},
		{"POST", "/mcp", "{}", [2]string{"Origin", "http://" + key + ".example"}},
	} {
		c.header = http.Header{}
		if tc.header[0] != "" {
			c.header.Set(tc.header[0], tc.header[1])
		}
		r := c.do(tc.method, tc.path, tc.body)
		if r.status < 400 {
			t.Errorf("%s %s %v: status %d, want an error", tc.method, tc.path, tc.header, r.status)
		}
		if strings.Contains(string(r.body), key) {
			t.Errorf("%s %s %v: the answer holds the API key: %s", tc.method, tc.path, tc.header, r.body)
		}
		if !strings.Contains(string(r.body), "[redacted]") {
			t.Errorf("%s %s %v: the answer lacks \"[redacted]\" (it should quote what it was given): %s", tc.method, tc.path, tc.header, r.body)
		}
	}
	if strings.Contains(m.stack.Logs.String(), key) {
		t.Error("the logs hold the API key")
	}
}
