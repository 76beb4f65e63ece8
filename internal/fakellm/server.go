package fakellm

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/llm"
)

// maxBody bounds a request body; mas-mcp prompts are far smaller.
const maxBody = 16 << 20

// Server is an OpenAI-compatible chat-completions endpoint answering from a
// script. It serves POST /v1/chat/completions and POST /chat/completions;
// streaming requests are refused. All methods are safe for concurrent use.
type Server struct {
	playbook

	// fixed at creation
	t    testing.TB
	ts   *httptest.Server
	done chan struct{} // closed at cleanup: delayed replies stop waiting

	// delayDone, when set by a test of this package, is told how each
	// Delay wait ended (nil: waited it out).
	delayDone func(error)
}

// New starts a fake endpoint; it is closed when t's test finishes.
// Requests that no rule answered are logged at cleanup.
func New(t testing.TB) *Server { return newServer(t, nil) }

// newServer is New with the test hook delayDone, set before the server
// starts so handlers read it without a lock.
func newServer(t testing.TB, delayDone func(error)) *Server {
	s := &Server{t: t, done: make(chan struct{}), delayDone: delayDone}
	s.invalid = func(msg string) { t.Error(msg) }
	s.ts = httptest.NewServer(http.HandlerFunc(s.serveHTTP))
	t.Cleanup(func() {
		close(s.done)
		s.ts.Close()
		for _, c := range s.Unmatched() {
			t.Logf("fakellm: request #%d was not answered by the script: %s", c.N, noScript(&c))
		}
	})
	return s
}

// BaseURL is the endpoint's base URL, ending in /v1 (e.g.
// "http://127.0.0.1:1234/v1"), as OPENAI_BASE_URL expects it.
func (s *Server) BaseURL() string { return s.ts.URL + "/v1" }

// wire types of the chat-completions API (the subset mas-mcp uses).
type (
	wireMessage struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	wireRequest struct {
		Model               string        `json:"model"`
		Messages            []wireMessage `json:"messages"`
		Temperature         *float32      `json:"temperature,omitempty"`
		MaxTokens           int           `json:"max_tokens,omitempty"`
		MaxCompletionTokens int           `json:"max_completion_tokens,omitempty"`
		Stream              bool          `json:"stream,omitempty"`
	}
	wireChoice struct {
		Index        int         `json:"index"`
		Message      wireMessage `json:"message"`
		FinishReason string      `json:"finish_reason"`
	}
	wireUsage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
		// PromptTokensDetails is sent only when some prompt tokens were
		// cached, as OpenAI omits it on endpoints without caching.
		PromptTokensDetails *wireTokenDetails `json:"prompt_tokens_details,omitempty"`
	}
	wireTokenDetails struct {
		CachedTokens int `json:"cached_tokens"`
	}
	wireResponse struct {
		ID      string       `json:"id"`
		Object  string       `json:"object"`
		Created int64        `json:"created"`
		Model   string       `json:"model"`
		Choices []wireChoice `json:"choices"`
		Usage   wireUsage    `json:"usage"`
	}
	wireError struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
	}
)

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path != "/v1/chat/completions" && r.URL.Path != "/chat/completions":
		writeError(w, http.StatusNotFound, "fakellm: unknown path "+r.URL.Path)
		return
	case r.Method != http.MethodPost:
		writeError(w, http.StatusMethodNotAllowed, "fakellm: method "+r.Method+" not allowed")
		return
	}
	var req wireRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "fakellm: bad request body: "+err.Error())
		return
	}
	if req.Stream {
		writeError(w, http.StatusBadRequest, "fakellm: stream: streaming is not supported")
		return
	}
	msgs := make([]llm.Message, len(req.Messages))
	for i, m := range req.Messages {
		msgs[i] = llm.Message{Role: m.Role, Content: m.Content}
	}
	c := newCall(req.Model, msgs, req.Temperature, max(req.MaxTokens, req.MaxCompletionTokens))
	reply := s.answer(&c)
	if err := reply.check(); err != nil {
		s.t.Errorf("%v (request #%d, %s)", err, c.N, c.Skill)
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if err := s.wait(r, reply.Delay); err != nil {
		// The client is gone (nothing to answer) or the test is over.
		writeError(w, http.StatusServiceUnavailable, "fakellm: "+err.Error())
		return
	}
	if reply.RetryAfter != "" {
		w.Header().Set("Retry-After", reply.RetryAfter)
	}
	if reply.failed() {
		writeError(w, reply.Status, reply.errorMessage())
		return
	}
	prompt, completion, cached := reply.usage(&c)
	usage := wireUsage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
	if cached > 0 {
		usage.PromptTokensDetails = &wireTokenDetails{CachedTokens: cached}
	}
	model := c.Model
	if model == "" {
		model = "fakellm"
	}
	writeJSON(w, http.StatusOK, wireResponse{
		ID:      "chatcmpl-fakellm-" + strconv.Itoa(c.N),
		Object:  "chat.completion",
		Created: time.Now().Unix(),
		Model:   model,
		Choices: []wireChoice{{
			Message:      wireMessage{Role: llm.RoleAssistant, Content: reply.Content},
			FinishReason: "stop",
		}},
		Usage: usage,
	})
}

// wait sleeps d unless the client goes away or the server closes first.
func (s *Server) wait(r *http.Request, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	var err error
	select {
	case <-timer.C:
	case <-r.Context().Done():
		err = fmt.Errorf("client gone during delay: %w", r.Context().Err())
	case <-s.done:
		err = fmt.Errorf("server closed during delay")
	}
	if s.delayDone != nil {
		s.delayDone(err)
	}
	return err
}

func writeError(w http.ResponseWriter, status int, msg string) {
	typ, code := "invalid_request_error", strconv.Itoa(status)
	switch {
	case status == http.StatusTooManyRequests:
		typ, code = "rate_limit_error", "rate_limit_exceeded"
	case status >= 500:
		typ = "server_error"
	}
	writeJSON(w, status, struct {
		Error wireError `json:"error"`
	}{wireError{Message: msg, Type: typ, Code: code}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	// The client may be gone already; there is no one to tell.
	_ = json.NewEncoder(w).Encode(v)
}
