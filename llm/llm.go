// Package llm provides chat-completion backends for the skills of mas-mcp.
//
// Every skill call is one stateless request (spec §9.3: steps share no
// context), so the interface is a single Complete method. The default backend
// talks to any OpenAI-compatible endpoint (OpenAI, Ollama, vLLM, DeepSeek,
// DashScope compatible mode …) through github.com/sashabaranov/go-openai.
package llm

import (
	"context"
	"time"
)

// Role names of chat messages.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// Message is one chat message of a request.
type Message struct {
	Role    string
	Content string
}

// Request is one chat completion.
type Request struct {
	// Model overrides the client's default model when non-empty
	// (an agent's llm_config.model).
	Model string
	// Messages are sent in order.
	Messages []Message
	// Temperature is sent only when non-nil.
	Temperature *float32
	// MaxTokens is sent only when positive.
	MaxTokens int
	// Tag names the caller for logs (e.g. "agent=… step=… skill=planning").
	// It is never sent to the endpoint.
	Tag string
}

// Usage is what one or more calls cost.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
	// CachedTokens is the part of PromptTokens the endpoint served from its
	// prompt cache (usage.prompt_tokens_details.cached_tokens; 0 where the
	// endpoint does not report it).
	CachedTokens int `json:"cached_tokens"`
	// Calls counts the HTTP-level completions that succeeded or failed
	// after retries (one per Complete call).
	Calls int `json:"calls"`
	// LatencyMS is the wall time spent in Complete, retries included.
	LatencyMS int64 `json:"latency_ms"`
	// PromptChars and ResponseChars are the sizes of what was sent and received.
	PromptChars   int `json:"prompt_chars"`
	ResponseChars int `json:"response_chars"`
}

// Add adds o to u.
func (u *Usage) Add(o Usage) {
	u.PromptTokens += o.PromptTokens
	u.CompletionTokens += o.CompletionTokens
	u.TotalTokens += o.TotalTokens
	u.CachedTokens += o.CachedTokens
	u.Calls += o.Calls
	u.LatencyMS += o.LatencyMS
	u.PromptChars += o.PromptChars
	u.ResponseChars += o.ResponseChars
}

// Response is the answer to a Request.
type Response struct {
	Content string
	Model   string
	Usage   Usage
	Latency time.Duration
	// Attempts counts the HTTP requests the call made (retries included;
	// 0: none was sent). Clients that do not retry leave it 0.
	Attempts int
}

// Client completes chat requests. Implementations are safe for concurrent use.
// On failure the returned error never contains a secret (API key, token), and
// the returned *Response is still non-nil with Content empty and Usage holding
// what the failed attempts cost (Calls, LatencyMS, PromptChars), so failed
// calls are accounted for too.
type Client interface {
	Complete(ctx context.Context, req *Request) (*Response, error)
}
