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
		return sendAs(t, r.url, tokenBea, method, session, b)
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
		return answer(t, req)
	}
	code, got := postSSE(annSSE)
	wantCode, want := postSSE("NOSUCHSESSION0000000000000")
	if code != wantCode || got != want {
		t.Errorf("a POST of bea to ann's SSE session: %d %q; to an unknown session: %d %q: want the same answer", code, got, wantCode, want)
	}
}

// TestSessionOpenedWhileCountingStaysOwned: a session opened while the
// server counts the live ones (after its look at the SDK's sessions,
// before its lock) is not taken for closed: it still holds its place
// under the session caps, and to another operator it is still an unknown
// session (404), not the SDK's 403.
func TestSessionOpenedWhileCountingStaysOwned(t *testing.T) {
	r := newExtRig(t)
	base, _, _, _, _ := r.srv.Held()
	var ann *mcp.ClientSession
	r.srv.AfterSessionsSnapshot(func() {
		ann = r.httpClient(mcp.NewClient(&mcp.Implementation{Name: "ann", Version: "1"}, nil), tokenAnn)
	})
	if held, _, _, _, _ := r.srv.Held(); held != base+1 {
		t.Errorf("the server holds %d MCP sessions after ann opened one while it counted them, want %d", held, base+1)
	}
	probe := func(session string) (int, string) {
		return sendAs(t, r.url, tokenBea, http.MethodPost, session, []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	}
	code, got := probe(ann.ID())
	if wantCode, want := probe("NOSUCHSESSION0000000000000"); code != wantCode || got != want {
		t.Errorf("bea naming ann's session: %d %q; naming an unknown session: %d %q: want the same answer", code, got, wantCode, want)
	}
	if _, err := ann.ListTools(t.Context(), nil); err != nil {
		t.Errorf("ann's session: %v", err)
	}
}

// sendAs sends an HTTP request of protocol 2025-11-25 with token's bearer
// header to url, naming session, and returns the answer's status and body.
func sendAs(t *testing.T, url, token, method, session string, body []byte) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, bytes.NewReader(body))
	for k, v := range map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
		"Mcp-Protocol-Version": "2025-11-25", "Mcp-Session-Id": session, "Authorization": "Bearer " + token} {
		req.Header.Set(k, v)
	}
	return answer(t, req)
}

// answer sends req and returns the answer's status and body.
func answer(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(got)
}
