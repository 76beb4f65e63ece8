package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/internal/teststack"
	"github.com/mas-mcp/mas-mcp/server"

	"github.com/mas-mcp/mas-mcp/internal/app"
)

// TestProviderSecretsNowhere runs the binary against an LLM endpoint behind
// a base URL with user:pass@ and ?api-key=MARKER that answers every request
// with 401, echoing the key masked (as OpenAI does) and the URL it was
// asked. Once an agent's step failed on it, neither the marker, the
// password nor the key's visible parts are in anything a client can read
// (every resource, the change events, ask_info) or in the logs; the
// requests went to /v1/chat/completions with the query kept as a query.
// The trail — its resources, get_trail, the export — holds none of them
// either.
func TestProviderSecretsNowhere(t *testing.T) {
	const marker = "MARKER-5ecret-q"
	const password = "pw-5ecret-basic"
	key := teststack.SentinelKey
	masked := key[:6] + strings.Repeat("*", 10) + key[len(key)-4:]
	var mu sync.Mutex
	var uris []string // guarded by mu
	llm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		uris = append(uris, r.URL.RequestURI())
		mu.Unlock()
		body, _ := json.Marshal(map[string]any{"error": map[string]any{
			"message": "Incorrect API key provided: " + masked + ". You asked " + r.URL.RequestURI() + ".",
			"type":    "invalid_request_error", "code": "invalid_api_key",
		}})
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write(body)
	}))
	defer llm.Close()
	u, _ := url.Parse(llm.URL)
	m := newMAS(t, masOptions{LLMURL: "http://gw-user:" + password + "@" + u.Host + "/v1?api-key=" + marker})
	m.start()

	var added server.AddTaskOut
	m.callTool("add_task", map[string]any{"task_name": "report", "task_intention": "Write a report."}, &added)

	// Follow the change events until a failed step shows the 401.
	var seen strings.Builder // every event and document read
	var cursor uint64
	for !strings.Contains(seen.String(), "status 401") {
		var out server.WaitOut
		m.callTool("wait_for_updates", map[string]any{"cursor": cursor, "timeout_seconds": 10}, &out)
		cursor = out.Cursor
		b, _ := json.Marshal(out.Events)
		seen.Write(b)
		seen.WriteString(readEverything(t, m.cs))
	}
	// The audit trail (issue 16 item 5): its resources, get_trail and the
	// export, which reads beside the running owner.
	for _, task := range []string{added.TaskID, ""} {
		if task == "" {
			var tasks []server.TaskBrief
			m.callTool("read_resource", map[string]any{"uri": "mas://tasks"}, &struct {
				Document *[]server.TaskBrief `json:"document"`
			}{&tasks})
			for _, tb := range tasks {
				if tb.Base {
					task = tb.TaskID
				}
			}
		}
		res, err := m.cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "mas://tasks/" + task + "/trail?limit=500"})
		if err != nil {
			t.Fatal(err)
		}
		trailText := res.Contents[0].Text
		if task == added.TaskID && !strings.Contains(trailText, `"llm_call"`) {
			t.Errorf("the task's trail holds no LLM call:\n%.2000s", trailText)
		}
		seen.WriteString(trailText)
		var got json.RawMessage
		m.callTool("get_trail", map[string]any{"task_id": task, "limit": 500}, &got)
		seen.Write(got)
		var out, errs strings.Builder
		if err := app.Export(context.Background(), []string{"--task", task, "--data-dir", m.dataDir}, func(string) string { return "" }, &out, &errs); err != nil {
			t.Fatalf("export: %v (%s)", err, errs.String())
		}
		seen.WriteString(out.String())
	}
	var info json.RawMessage
	m.callTool("ask_info", map[string]any{"type": "tasks"}, &info)
	seen.Write(info)
	m.callTool("ask_info", map[string]any{"type": "task_info", "task_id": added.TaskID}, &info)
	seen.Write(info)

	logs := m.logs()
	if !strings.Contains(logs, `"llm":"http://[REDACTED]@`+u.Host+`/v1?api-key=[REDACTED]"`) {
		t.Errorf("the ready line does not show the base URL redacted:\n%s", lastLines(logs, 40))
	}
	for _, where := range []struct{ name, text string }{{"what clients read", seen.String()}, {"the logs", logs}} {
		for _, secret := range []string{marker, password, key, masked, key[:8], key[len(key)-8:]} {
			if strings.Contains(where.text, secret) {
				t.Errorf("%s show %q", where.name, secret)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// The start-up check (GET /v1/models) comes first; every request keeps
	// the configured query string.
	if !slices.Contains(uris, "/v1/chat/completions?api-key="+marker) {
		t.Errorf("the LLM was asked %q, want /v1/chat/completions?api-key=%s among them", uris, marker)
	}
	for _, u := range uris {
		if !strings.HasSuffix(u, "?api-key="+marker) {
			t.Errorf("the LLM was asked %q without the configured query string", u)
		}
	}
}

// readEverything is the text of every resource cs lists.
func readEverything(t *testing.T, cs *mcp.ClientSession) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	for r, err := range cs.Resources(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: r.URI})
		if err != nil {
			t.Fatalf("read %s: %v", r.URI, err)
		}
		for _, c := range res.Contents {
			_, _ = io.WriteString(&b, c.Text)
		}
	}
	return b.String()
}
