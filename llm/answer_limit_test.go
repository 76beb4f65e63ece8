package llm

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// endlessAPI answers every request with status and a body that does not
// end: prefix, then filler up to offer bytes, then the connection is cut.
// It counts the bytes the client took.
type endlessAPI struct {
	*httptest.Server
	written atomic.Int64
	done    chan struct{}
}

func newEndlessAPI(t *testing.T, status int, prefix string, offer int64) *endlessAPI {
	t.Helper()
	a := &endlessAPI{done: make(chan struct{}, 16)}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { a.done <- struct{}{} }()
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		n, err := io.WriteString(w, prefix)
		a.written.Add(int64(n))
		chunk := bytes.Repeat([]byte("a"), 64<<10)
		for err == nil && a.written.Load() < offer {
			n, err = w.Write(chunk)
			a.written.Add(int64(n))
		}
		if err == nil {
			panic(http.ErrAbortHandler) // cut: the answer never ends
		}
	}))
	t.Cleanup(func() {
		a.CloseClientConnections()
		a.Close()
	})
	return a
}

// TestAnswerSizeIsBounded: an endpoint (or a proxy before it) whose answer
// does not end — a completion that runs on, an error page of hundreds of
// MB — is read up to MaxAnswerBytes, not into memory whole, and the call
// fails saying so: a successful answer at once, not asked again; an error
// answer by its status (a 502 is retried, as any).
func TestAnswerSizeIsBounded(t *testing.T) {
	const limit, offer = 1 << 20, 8 << 20
	for _, tc := range []struct {
		name   string
		status int
		prefix string
		want   string
	}{
		{"completion", http.StatusOK, `{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"`,
			"answer (HTTP 200) passed 1 MiB and was cut"},
		{"error page", http.StatusBadGateway, `<html><body>`, "server error: the endpoint's answer (HTTP 502) passed 1 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := newEndlessAPI(t, tc.status, tc.prefix, offer)
			transport := &http.Transport{}
			t.Cleanup(transport.CloseIdleConnections)
			c, err := NewOpenAI(OpenAIConfig{BaseURL: api.URL + "/v1", APIKey: testKey, Model: "m",
				MaxRetries: -1, MaxAnswerBytes: limit, HTTPClient: &http.Client{Transport: transport}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Complete(context.Background(), userRequest("hi"))
			<-api.done
			if got := api.written.Load(); got >= offer {
				t.Errorf("the client read all %d MiB of one answer: no limit on its size", got>>20)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one saying %q", err, tc.want)
			}
		})
	}
	if _, err := NewOpenAI(OpenAIConfig{Model: "m", MaxAnswerBytes: -1}); err == nil || !strings.Contains(err.Error(), "MaxAnswerBytes") {
		t.Errorf("a negative MaxAnswerBytes: err = %v, want a refusal naming it", err)
	}
}
