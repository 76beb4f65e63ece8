package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// sseStream is a raw legacy SSE session: its stream and its endpoint.
type sseStream struct {
	br       *bufio.Reader
	endpoint string // path and query of the session's POST endpoint
}

// openSSE opens GET /sse with token and reads the endpoint event.
func openSSE(t *testing.T, tr *tokenRig, token string) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, tr.sseURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := tr.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /sse: status %d", resp.StatusCode)
	}
	s := &sseStream{br: bufio.NewReader(resp.Body)}
	if name, data := s.next(t); name != "endpoint" {
		t.Fatalf("first event %q (%s), want endpoint", name, data)
	} else {
		s.endpoint = data
	}
	return s
}

// next reads the next event (blocking until it comes).
func (s *sseStream) next(t *testing.T) (name, data string) {
	t.Helper()
	for {
		line, err := s.br.ReadString('\n')
		if err != nil {
			t.Fatalf("the SSE stream ended: %v", err)
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data += strings.TrimPrefix(line, "data: ")
		case line == "" && name != "":
			return name, data
		}
	}
}

// answer reads messages until the response to id, and returns its result.
func (s *sseStream) answer(t *testing.T, id int) json.RawMessage {
	t.Helper()
	for {
		name, data := s.next(t)
		var msg struct {
			ID     *int            `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if name != "message" || json.Unmarshal([]byte(data), &msg) != nil || msg.ID == nil || *msg.ID != id {
			continue
		}
		if msg.Error != nil {
			t.Fatalf("request %d failed: %s", id, msg.Error)
		}
		return msg.Result
	}
}

// TestSessionsBoundToToken: on every HTTP transport a session opened with
// operator A's token refuses requests made with B's token as if the
// session did not exist (404 "session not found": B learns nothing of A's
// sessions) and without one (401); A's own requests still work, and B's
// refused ones change nothing.
func TestSessionsBoundToToken(t *testing.T) {
	tr := newTokenRig(t)
	tasks := func() int { return len(tr.stack.Sys.Tasks()) }
	addTask := `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"add_task","arguments":{"task_name":"by b","task_intention":"B speaks in A's session."}}}`

	t.Run("legacy SSE", func(t *testing.T) {
		s := openSSE(t, tr, tr.tokA)
		post := func(token, body string) rawResp {
			h := jsonHeaders()
			if token != "" {
				h["Authorization"] = "Bearer " + token
			}
			return tr.send(rawReq{method: http.MethodPost, path: s.endpoint, header: h, body: strings.NewReader(body)})
		}
		init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
		if got := post(tr.tokB, init); got.status != http.StatusNotFound || strings.TrimSpace(got.body) != "session not found" {
			t.Errorf("B initializes A's SSE session: status %d (%s), want 404 session not found", got.status, strings.TrimSpace(got.body))
		}
		if got := post("", init); got.status != http.StatusUnauthorized {
			t.Errorf("no token, A's SSE session: status %d, want 401", got.status)
		}
		if got := post(tr.tokA, init); got.status != http.StatusAccepted {
			t.Fatalf("A initializes its SSE session: status %d (%s), want 202", got.status, strings.TrimSpace(got.body))
		}
		s.answer(t, 1)
		post(tr.tokA, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)

		before := tasks()
		if got := post(tr.tokB, strings.Replace(addTask, "%d", "2", 1)); got.status != http.StatusNotFound {
			t.Errorf("B calls add_task in A's SSE session: status %d (%s), want 404", got.status, strings.TrimSpace(got.body))
		}
		// A's next call is answered, as A: B's call never reached the session.
		if got := post(tr.tokA, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"get_inbox","arguments":{}}}`); got.status != http.StatusAccepted {
			t.Fatalf("A calls get_inbox: status %d", got.status)
		}
		var res struct {
			StructuredContent struct {
				OperatorID string `json:"operator_id"`
			} `json:"structuredContent"`
		}
		if err := json.Unmarshal(s.answer(t, 3), &res); err != nil || res.StructuredContent.OperatorID != tr.opA {
			t.Errorf("get_inbox in A's SSE session: operator %q (%v), want A %s", res.StructuredContent.OperatorID, err, tr.opA)
		}
		if n := tasks(); n != before {
			t.Errorf("tasks: %d after B's refused add_task, want %d", n, before)
		}
	})

	t.Run("streamable HTTP", func(t *testing.T) {
		// go-sdk binds these sessions to the token's user itself (its 403
		// for another's is answered as its 404 for an unknown session).
		init := tr.send(rawReq{method: http.MethodPost, path: "/mcp", body: initBody("2025-11-25"),
			header: jsonHeaders("Authorization", "Bearer "+tr.tokA)})
		sid := init.header.Get("Mcp-Session-Id")
		if init.status != http.StatusOK || sid == "" {
			t.Fatalf("initialize with A's token: status %d, session %q", init.status, sid)
		}
		before := tasks()
		for _, tc := range []struct {
			name, token string
			want        int
		}{{"B", tr.tokB, http.StatusNotFound}, {"no token", "", http.StatusUnauthorized}} {
			h := jsonHeaders("Mcp-Session-Id", sid, "Mcp-Protocol-Version", "2025-11-25")
			if tc.token != "" {
				h["Authorization"] = "Bearer " + tc.token
			}
			got := tr.send(rawReq{method: http.MethodPost, path: "/mcp", header: h, body: strings.NewReader(strings.Replace(addTask, "%d", "2", 1))})
			if got.status != tc.want {
				t.Errorf("%s calls add_task in A's session: status %d (%s), want %d", tc.name, got.status, strings.TrimSpace(got.body), tc.want)
			}
		}
		if n := tasks(); n != before {
			t.Errorf("tasks: %d after refused add_task calls, want %d", n, before)
		}
	})
}
