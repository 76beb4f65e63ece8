package engine

// Usage is what one or more LLM calls cost, as the engine accounts it per
// step, agent and task (and budgets count it). It is the engine's own type:
// the llm package reports its calls' usage in Usage, and the executor
// that makes the calls (skills) converts it where the answer enters the
// engine, in its Output. The JSON names are the stored documents' and
// Usage's.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
	// CachedTokens is the part of PromptTokens the endpoint served from its
	// prompt cache (0 where the endpoint does not report it).
	CachedTokens int `json:"cached_tokens"`
	// Calls counts the completions that succeeded or failed after retries.
	Calls int `json:"calls"`
	// LatencyMS is the wall time spent in the calls, retries included.
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
