package llm

import (
	"cmp"
	"context"
	"sync/atomic"
)

// Observer watches chat calls (OpenTelemetry spans and metrics, set by
// internal/telemetry). Chat must call next exactly once, with the context
// it wants the call to run under, and return what next returned.
type Observer interface {
	Chat(ctx context.Context, call ChatCall, next func(context.Context, *Request) (*Response, error)) (*Response, error)
}

// ChatCall describes one chat call to an Observer.
type ChatCall struct {
	Request *Request
	// Model is the model asked for (the request's, else the client's default).
	Model string
	// Provider names the API's flavour (gen_ai.provider.name).
	Provider string
	// Scrub removes the client's secrets (API key, base URL credentials)
	// from a text, for whatever an Observer records of prompts and answers.
	Scrub func(string) string
}

type observerBox struct{ o Observer }

var observer atomic.Pointer[observerBox]

// SetObserver makes o watch every chat call of every client; nil stops
// watching. With none set a call costs one atomic load more.
func SetObserver(o Observer) {
	if o == nil {
		observer.Store(nil)
		return
	}
	observer.Store(&observerBox{o})
}

// Complete sends req, retrying transient failures. See Client for the
// contract on failure; Usage.PromptChars and ResponseChars count bytes.
func (o *OpenAI) Complete(ctx context.Context, req *Request) (*Response, error) {
	if b := observer.Load(); b != nil && req != nil {
		return b.o.Chat(ctx, ChatCall{Request: req, Model: cmp.Or(req.Model, o.model), Provider: "openai", Scrub: o.secrets.scrub}, o.complete)
	}
	return o.complete(ctx, req)
}

// Observed returns c with its calls watched by the Observer (if any) as
// OpenAI's are: for other backends, and for in-process fakes in
// benchmarks. It records prompts unscrubbed: c has no secrets to scrub.
func Observed(c Client, provider, model string) Client {
	return observed{c, provider, model}
}

type observed struct {
	c               Client
	provider, model string
}

func (o observed) Complete(ctx context.Context, req *Request) (*Response, error) {
	if b := observer.Load(); b != nil && req != nil {
		return b.o.Chat(ctx, ChatCall{Request: req, Model: cmp.Or(req.Model, o.model), Provider: o.provider}, o.c.Complete)
	}
	return o.c.Complete(ctx, req)
}
