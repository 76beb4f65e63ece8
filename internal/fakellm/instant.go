package fakellm

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mas-mcp/mas-mcp/llm"
)

// Instant is an in-process [llm.Client] answering from a script, without
// HTTP: for benchmarks of the engine and tests that do not care about the
// wire. Requests are recognised and matched exactly as by [Server].
// All methods are safe for concurrent use.
type Instant struct {
	playbook
}

var _ llm.Client = (*Instant)(nil)

// NewInstant returns an Instant whose fallback handler is h (nil: none; add
// rules with Script). Script panics on a rule with Times below -1, since
// there is no test to report it to.
func NewInstant(h func(*Call) Reply) *Instant {
	in := &Instant{}
	in.invalid = func(msg string) { panic(msg) }
	in.fallback = h
	return in
}

// Complete answers req from the script. It waits the reply's Delay unless
// ctx ends first. An error reply, and a request nothing answered, return a
// *[StatusError]. As the llm.Client contract asks, the response is non-nil
// even on failure, with Usage.Calls, LatencyMS and PromptChars filled.
// A request whose ctx is already done is not recorded, as it would never
// reach a server.
func (in *Instant) Complete(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	start := time.Now()
	resp := &llm.Response{Model: "fakellm", Usage: llm.Usage{Calls: 1}}
	fail := func(err error) (*llm.Response, error) {
		resp.Latency = time.Since(start)
		resp.Usage.LatencyMS = resp.Latency.Milliseconds()
		return resp, err
	}
	if req == nil {
		return fail(errors.New("fakellm: complete: nil request"))
	}
	if req.Model != "" {
		resp.Model = req.Model
	}
	resp.Usage.PromptChars = promptChars(req.Messages)
	if err := ctx.Err(); err != nil {
		return fail(fmt.Errorf("fakellm: complete: %w", err))
	}

	c := newCall(req.Model, req.Messages, req.Temperature, req.MaxTokens)
	reply := in.answer(&c)
	if err := reply.check(); err != nil {
		return fail(err)
	}
	if reply.Delay > 0 {
		timer := time.NewTimer(reply.Delay)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return fail(fmt.Errorf("fakellm: complete: delay: %w", ctx.Err()))
		}
	}
	if reply.failed() {
		return fail(&StatusError{Status: reply.Status, RetryAfter: reply.RetryAfter, Message: reply.errorMessage()})
	}
	prompt, completion, cached := reply.usage(&c)
	resp.Content = reply.Content
	resp.Usage.PromptTokens = prompt
	resp.Usage.CachedTokens = cached
	resp.Usage.CompletionTokens = completion
	resp.Usage.TotalTokens = prompt + completion
	resp.Usage.ResponseChars = len(reply.Content)
	resp.Latency = time.Since(start)
	resp.Usage.LatencyMS = resp.Latency.Milliseconds()
	return resp, nil
}
