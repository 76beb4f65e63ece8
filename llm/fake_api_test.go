package llm

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// testKey is the API key of the tests; it must never show in errors or logs.
const testKey = "sk-test-9f8e7d6c5b4a"

// reply is one scripted answer of fakeAPI.
type reply struct {
	status int               // 0 means 200
	header map[string]string // extra response headers
	// body is sent as is; empty with status 200 means a completion of
	// "hello" for the requested model with defaultUsage.
	body string
	// hold keeps the request open until the client gives up.
	hold bool
	// hijack closes the connection without answering.
	hijack bool
	// echoAuth appends the request's Authorization header to an error
	// message, as careless proxies do.
	echoAuth bool
}

var defaultUsage = usageJSON{PromptTokens: 11, CompletionTokens: 7, TotalTokens: 18}

type usageJSON struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type messageJSON struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type choiceJSON struct {
	Index        int         `json:"index"`
	Message      messageJSON `json:"message"`
	FinishReason string      `json:"finish_reason"`
}

type completionJSON struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []choiceJSON `json:"choices"`
	Usage   *usageJSON   `json:"usage,omitempty"`
}

// completionBody renders a chat completion in the OpenAI format; a nil usage
// leaves the field out, as some compatible servers do.
func completionBody(model, content string, usage *usageJSON) string {
	b, err := json.Marshal(completionJSON{
		ID: "chatcmpl-1", Object: "chat.completion", Created: 1, Model: model,
		Choices: []choiceJSON{{Message: messageJSON{Role: RoleAssistant, Content: content}, FinishReason: "stop"}},
		Usage:   usage,
	})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// errorBody renders an OpenAI error object.
func errorBody(msg string) string {
	b, err := json.Marshal(map[string]map[string]string{"error": {"message": msg, "type": "invalid_request_error"}})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// requestJSON is what the tests read back from a request body.
type requestJSON struct {
	Model               string        `json:"model"`
	Messages            []messageJSON `json:"messages"`
	Temperature         *float64      `json:"temperature"`
	MaxTokens           *int          `json:"max_tokens"`
	MaxCompletionTokens *int          `json:"max_completion_tokens"`
}

// fakeAPI is an OpenAI-compatible chat completions server that answers with
// a script of replies (the last one repeats) and records what it received.
type fakeAPI struct {
	*httptest.Server
	hold time.Duration // how long each request stays in flight

	mu          sync.Mutex
	replies     []reply
	requests    []requestJSON // guarded by mu
	auth        []string      // Authorization headers; guarded by mu
	inflight    int           // guarded by mu
	maxInflight int           // guarded by mu
	// arrived receives a value (never blocking) when a request arrives.
	arrived chan struct{}
}

func newFakeAPI(t testing.TB, replies ...reply) *fakeAPI {
	t.Helper()
	if len(replies) == 0 {
		replies = []reply{{}}
	}
	f := &fakeAPI{replies: replies, arrived: make(chan struct{}, 1)}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/chat/completions" {
		http.Error(w, errorBody("no route "+r.Method+" "+r.URL.Path), http.StatusNotFound)
		return
	}
	var req requestJSON
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, errorBody("bad json: "+err.Error()), http.StatusBadRequest)
		return
	}

	f.mu.Lock()
	rp := f.replies[min(len(f.requests), len(f.replies)-1)]
	f.requests = append(f.requests, req)
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	f.inflight++
	f.maxInflight = max(f.maxInflight, f.inflight)
	f.mu.Unlock()
	select {
	case f.arrived <- struct{}{}:
	default:
	}
	defer func() {
		f.mu.Lock()
		f.inflight--
		f.mu.Unlock()
	}()

	if f.hold > 0 {
		time.Sleep(f.hold)
	}
	switch {
	case rp.hold:
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
		return
	case rp.hijack:
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	body := rp.body
	status := rp.status
	if status == 0 {
		status = http.StatusOK
	}
	if body == "" && status == http.StatusOK {
		u := defaultUsage
		body = completionBody(req.Model, "hello", &u)
	}
	if rp.echoAuth {
		body = errorBody("invalid credentials: " + r.Header.Get("Authorization"))
	}
	for k, v := range rp.header {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

func (f *fakeAPI) received() []requestJSON {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]requestJSON(nil), f.requests...)
}

func (f *fakeAPI) authHeaders() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.auth...)
}

func (f *fakeAPI) maxInFlight() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.maxInflight
}

// sleepRecorder stands in for the backoff sleep: it records the requested
// waits and returns at once (or with ctx's error).
type sleepRecorder struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (s *sleepRecorder) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.waits = append(s.waits, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleepRecorder) got() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.waits...)
}

// newTestClient connects a client to api with the test key and model
// "test-model" unless cfg says otherwise; its sleeps are recorded, not slept.
func newTestClient(t testing.TB, api *fakeAPI, cfg OpenAIConfig) (*OpenAI, *sleepRecorder) {
	t.Helper()
	if cfg.BaseURL == "" {
		cfg.BaseURL = api.URL
	}
	if cfg.Model == "" {
		cfg.Model = "test-model"
	}
	if cfg.APIKey == "" {
		cfg.APIKey = testKey
	}
	if cfg.OutageWindow == 0 {
		// Most tests want the retries' end; outage tests set a window.
		cfg.OutageWindow = -1
	}
	o, err := NewOpenAI(cfg)
	if err != nil {
		t.Fatalf("NewOpenAI: %v", err)
	}
	rec := &sleepRecorder{}
	o.sleep = rec.sleep
	return o, rec
}

func userRequest(text string) *Request {
	return &Request{Messages: []Message{{Role: RoleUser, Content: text}}}
}
