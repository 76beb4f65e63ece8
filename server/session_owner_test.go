package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestForeignSessionLooksUnknown: an operator may only name its own MCP
// sessions. A request of bea naming ann's live session (a task-augmented
// add_task, an ordinary call, a DELETE) is answered exactly as one naming
// a session that does not exist, so bea cannot tell that ann's is live;
// and ann's session goes on working.
func TestForeignSessionLooksUnknown(t *testing.T) {
	r := newExtRig(t)
	ann := r.httpClient(mcp.NewClient(&mcp.Implementation{Name: "ann", Version: "1"}, nil), tokenAnn)
	annSession := ann.ID()
	if annSession == "" {
		t.Fatal("ann's client has no session ID")
	}
	body := func(task bool) []byte {
		p := map[string]any{"name": "add_task", "arguments": map[string]any{"task_name": "probe", "task_intention": "probe the session"}}
		if task {
			p["task"] = map[string]any{"ttl": 60000}
		}
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": p})
		return b
	}
	send := func(method, session string, b []byte) (int, string) {
		req, _ := http.NewRequest(method, r.url, bytes.NewReader(b))
		for k, v := range map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
			"Mcp-Protocol-Version": "2025-11-25", "Mcp-Session-Id": session, "Authorization": "Bearer " + tokenBea} {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(got)
	}
	for _, c := range []struct {
		name, method string
		body         []byte
	}{
		{"task-augmented add_task", http.MethodPost, body(true)},
		{"add_task", http.MethodPost, body(false)},
		{"DELETE", http.MethodDelete, nil},
	} {
		code, got := send(c.method, annSession, c.body)
		wantCode, want := send(c.method, "NOSUCHSESSION0000000000000", c.body)
		if code != wantCode || got != want {
			t.Errorf("%s by bea naming ann's session: %d %q; naming an unknown session: %d %q: want the same answer", c.name, code, got, wantCode, want)
		}
	}
	if tasks := r.stack.Sys.Tasks(); len(tasks) != 1 { // the base task only
		t.Errorf("bea's requests naming ann's session added %d task(s)", len(tasks)-1)
	}
	if _, err := ann.ListTools(t.Context(), nil); err != nil {
		t.Errorf("ann's session after bea's requests: %v", err)
	}

	// The same over SSE: ann's stream names its session in its first event.
	base := strings.TrimSuffix(r.url, "/mcp")
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/sse", nil)
	req.Header.Set("Authorization", "Bearer "+tokenAnn)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var endpoint string
	for sc := bufio.NewScanner(resp.Body); endpoint == "" && sc.Scan(); {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			endpoint = data
		}
	}
	_, annSSE, ok := strings.Cut(endpoint, "sessionid=")
	if !ok {
		t.Fatalf("ann's SSE stream named no session: %q", endpoint)
	}
	postSSE := func(session string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, base+"/sse?sessionid="+session, bytes.NewReader(body(false)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tokenBea)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(got)
	}
	code, got := postSSE(annSSE)
	wantCode, want := postSSE("NOSUCHSESSION0000000000000")
	if code != wantCode || got != want {
		t.Errorf("a POST of bea to ann's SSE session: %d %q; to an unknown session: %d %q: want the same answer", code, got, wantCode, want)
	}
}
