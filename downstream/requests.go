package downstream

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/llm"
)

// Requests of downstream servers (server-to-client requests made during a
// call, or a 2026-07-28 server's input requests):
//
//   - elicitation/create is put to the operator of the task whose agent made
//     the call, as the risk gate's question is (the inbox, and the operator's
//     own MCP client when the executor can reach it); the answer goes back.
//   - sampling/createMessage is answered with the MAS's own LLM client when
//     the server's config says allowSampling; otherwise mas-mcp does not
//     offer sampling and the SDK refuses the request.
//   - roots/list is answered with the server's configured roots.
//
// While the operator is being asked, the call's timeout is held (the
// server is not the one being slow); the wait for the operator is bounded
// by ConfirmTimeout, and it ends when the call is cancelled.
//
// Which call a request belongs to: a 2026-07-28 input request arrives
// within its call (its context carries the call). A request a stateful
// server sends is tied by MCP to no call we can see through the SDK; it is
// attributed to the server's earliest call in flight (with one agent
// calling a server at a time, that is exact).

// serverRequests answers what downstream servers ask (the Executor).
type serverRequests interface {
	elicit(ctx context.Context, server string, call *inflight, p *mcp.ElicitParams) (*mcp.ElicitResult, error)
	sample(ctx context.Context, server string, call *inflight, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error)
}

// errCallTimeout is the cause of a call's context ending at the server's timeout.
var errCallTimeout = errors.New("the server's timeout passed")

// caller is who makes a call: the tool step being executed.
type caller struct {
	in   *engine.ExecInput
	tool string

	mu    sync.Mutex // guards usage
	usage llm.Usage  // what the MAS's LLM spent answering the call's sampling requests
}

// spend adds what one sampling request cost to the call's usage.
func (c *caller) spend(u llm.Usage) {
	c.mu.Lock()
	c.usage.Add(u)
	c.mu.Unlock()
}

// spent is what the call's sampling requests cost, as the engine accounts
// it: the tool step's usage (budgets count it). Nil-safe.
func (c *caller) spent() engine.Usage {
	if c == nil {
		return engine.Usage{}
	}
	c.mu.Lock()
	u := c.usage
	c.mu.Unlock()
	return engine.Usage{
		PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens,
		CachedTokens: u.CachedTokens, Calls: u.Calls, LatencyMS: u.LatencyMS,
		PromptChars: u.PromptChars, ResponseChars: u.ResponseChars,
	}
}

type callerKey struct{}
type inflightKey struct{}

// withCaller marks ctx as the context of the step's call of tool.
func withCaller(ctx context.Context, in *engine.ExecInput, tool string) context.Context {
	return context.WithValue(ctx, callerKey{}, &caller{in: in, tool: tool})
}

// callerOf returns the caller withCaller put into ctx (nil if none).
func callerOf(ctx context.Context) *caller {
	c, _ := ctx.Value(callerKey{}).(*caller)
	return c
}

// inflight is one call on a server's session, with a timeout that can be
// held while the operator is asked on its behalf.
type inflight struct {
	ctx     context.Context // the call's context
	started time.Time
	timeout time.Duration

	mu    sync.Mutex // guards timer and holds
	timer *time.Timer
	holds int

	// sessionRefused: the server answered the call's own request with 404
	// for an unknown session (serverTransport), so it did not process it.
	sessionRefused atomic.Bool
	// undialled: no connection could be made for the call's own request
	// (serverTransport), so it was not sent.
	undialled atomic.Bool
}

// caller returns who makes the call (nil when it is not a tool step's).
func (f *inflight) caller() *caller {
	return callerOf(f.ctx)
}

// asCaller returns a context with the values of the call's, the calling
// step's (its outage observer and call gate, its trace, what shows its
// agent waiting for the operator), that ends with ctx (a server request's
// handler's), and what releases it.
func (f *inflight) asCaller(ctx context.Context) (context.Context, func()) {
	cctx, cancel := context.WithCancelCause(f.ctx)
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	return cctx, func() { stop(); cancel(nil) }
}

// hold stops the call's timeout until the returned release is called;
// then the call has its whole timeout again.
func (f *inflight) hold() (release func()) {
	f.mu.Lock()
	f.holds++
	if f.holds == 1 {
		f.timer.Stop()
	}
	f.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			f.holds--
			if f.holds == 0 {
				f.timer.Reset(f.timeout)
			}
			f.mu.Unlock()
		})
	}
}

// begin registers a call with the server's timeout; end must be called
// when it returns.
func (c *conn) begin(ctx context.Context) (cctx context.Context, f *inflight, end func()) {
	cctx, cancel := context.WithCancelCause(ctx)
	f = &inflight{started: time.Now(), timeout: c.sc.timeout()}
	cctx = context.WithValue(cctx, inflightKey{}, f)
	f.ctx = cctx
	f.timer = time.AfterFunc(f.timeout, func() { cancel(errCallTimeout) })
	c.callsMu.Lock()
	if c.calls == nil {
		c.calls = map[*inflight]struct{}{}
	}
	c.calls[f] = struct{}{}
	c.callsMu.Unlock()
	return cctx, f, func() {
		f.mu.Lock()
		f.timer.Stop()
		f.mu.Unlock()
		cancel(nil)
		c.callsMu.Lock()
		delete(c.calls, f)
		c.callsMu.Unlock()
	}
}

// callFor finds the call a server's request belongs to: the call whose
// context the request's handler runs in, else the earliest call in flight
// made by a tool step.
func (c *conn) callFor(ctx context.Context) *inflight {
	if f, ok := ctx.Value(inflightKey{}).(*inflight); ok {
		return f
	}
	c.callsMu.Lock()
	defer c.callsMu.Unlock()
	var first *inflight
	for f := range c.calls {
		if f.caller() != nil && (first == nil || f.started.Before(first.started)) {
			first = f
		}
	}
	return first
}

// clientOptions are the options of the server's client: the handlers of
// its requests, when an executor serves them, and its roots.
func (c *conn) clientOptions(h serverRequests) *mcp.ClientOptions {
	opts := &mcp.ClientOptions{
		// Only what we answer is offered: a server that asks for more gets
		// a clean refusal instead of a request that would hang a step.
		Capabilities: &mcp.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			c.mu.Lock()
			c.caps = nil
			c.mu.Unlock()
		},
	}
	if len(c.sc.Roots) > 0 {
		opts.Capabilities.RootsV2 = &mcp.RootCapabilities{}
	}
	if h == nil {
		return opts
	}
	// The handler's context ends with the call's too (a cancelled step
	// stops waiting for the operator).
	within := func(ctx context.Context) (context.Context, *inflight, func(), error) {
		f := c.callFor(ctx)
		if f == nil || f.caller() == nil {
			return nil, nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
				Message: "mas-mcp answers this only during a tool call of one of its agents, and none is in progress"}
		}
		hctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(f.ctx, cancel)
		return hctx, f, func() { stop(); cancel() }, nil
	}
	opts.ElicitationHandler = func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		hctx, f, done, err := within(ctx)
		if err != nil {
			return nil, err
		}
		defer done()
		return h.elicit(hctx, c.name, f, req.Params)
	}
	if c.sc.AllowSampling {
		opts.CreateMessageHandler = func(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			hctx, f, done, err := within(ctx)
			if err != nil {
				return nil, err
			}
			defer done()
			return h.sample(hctx, c.name, f, req.Params)
		}
	}
	return opts
}

// roots are the server's configured roots as MCP roots.
func (sc ServerConfig) roots() []*mcp.Root {
	var out []*mcp.Root
	for _, r := range sc.Roots {
		u, err := rootURI(r)
		if err != nil {
			continue // checked when the configuration was loaded
		}
		out = append(out, &mcp.Root{URI: u, Name: filepath.Base(strings.TrimSuffix(r, "/"))})
	}
	return out
}

// rootURI turns a configured root (an absolute path or a file:// URI) into
// a file:// URI.
func rootURI(r string) (string, error) {
	if strings.HasPrefix(r, "file://") {
		u, err := url.Parse(r)
		if err != nil || u.Path == "" {
			return "", fmt.Errorf("%q: not a file:// URI of a directory", r)
		}
		return r, nil
	}
	if !filepath.IsAbs(r) {
		return "", fmt.Errorf("%q: want an absolute directory path or a file:// URI", r)
	}
	return (&url.URL{Scheme: "file", Path: filepath.Clean(r)}).String(), nil
}

// elicit puts a server's elicitation to the operator of the calling task.
func (e *Executor) elicit(ctx context.Context, server string, call *inflight, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	who := call.caller()
	release := call.hold()
	defer release()
	f := formFromSchema(p.RequestedSchema, nil)
	message := p.Message
	if p.Mode == "url" {
		message += "\nOpen: " + p.URL + "\n(approve when you are done there, deny to decline)"
	}
	// The question is kept in the operator's inbox (the MAS's state).
	message = e.cfg.Pool.scrubber(server).text(message)
	question := e.cfg.Texts.Text("tool_elicit", map[string]any{
		"AgentID": who.in.Agent.AgentID, "AgentName": who.in.Agent.Name, "Server": server, "ToolName": who.tool,
		"Message": message, "Fields": f.describe(),
	})
	// Asked as the calling step: its agent shows waiting for the answer.
	ctx, done := call.asCaller(ctx)
	defer done()
	ans, err := e.askForm(ctx, who.in, question, message, f, false)
	switch {
	case errors.Is(err, engine.ErrNoAnswer):
		e.cfg.Logger.Info("elicitation not answered in time", "server", server, "agent", who.in.Agent.AgentID)
		return &mcp.ElicitResult{Action: "cancel"}, nil
	case err != nil && ctx.Err() != nil:
		return nil, err
	case err != nil:
		e.cfg.Logger.Info("elicitation answer unreadable", "server", server, "err", err)
		return &mcp.ElicitResult{Action: "cancel"}, nil
	}
	if p.Mode == "url" {
		ans.Content = nil
	}
	return &mcp.ElicitResult{Action: ans.Action, Content: ans.Content}, nil
}

// sample answers a server's sampling request with the MAS's LLM.
func (e *Executor) sample(ctx context.Context, server string, call *inflight, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
	if e.cfg.LLM == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "mas-mcp has no LLM client to answer sampling with"}
	}
	who := call.caller()
	// The server waits for the MAS's LLM, which may be slow or waiting
	// out an outage (up to --llm-outage-window): not the server's delay.
	release := call.hold()
	defer release()
	req := &llm.Request{MaxTokens: int(p.MaxTokens),
		Tag: fmt.Sprintf("sampling server=%s agent=%s step=%s", server, who.in.Agent.AgentID, who.in.Step.StepID)}
	if p.SystemPrompt != "" {
		req.Messages = append(req.Messages, llm.Message{Role: llm.RoleSystem, Content: p.SystemPrompt})
	}
	if p.Temperature != 0 {
		t := float32(p.Temperature)
		req.Temperature = &t
	}
	for _, m := range p.Messages {
		role := llm.RoleUser
		if m.Role == "assistant" {
			role = llm.RoleAssistant
		}
		var text string
		switch c := m.Content.(type) {
		case *mcp.TextContent:
			text = c.Text
		case nil:
		default:
			text = fmt.Sprintf("[%T content left out: mas-mcp samples text only]", c)
		}
		req.Messages = append(req.Messages, llm.Message{Role: role, Content: text})
	}
	if len(req.Messages) == 0 {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "sampling: no messages"}
	}
	// The calling step's LLM call: a task held for its budget makes none.
	lctx, done := call.asCaller(ctx)
	defer done()
	res, err := e.cfg.LLM.Complete(lctx, req)
	if res != nil {
		who.spend(res.Usage) // failed calls cost too
	}
	if err != nil {
		return nil, fmt.Errorf("sampling with the MAS's LLM: %w", err)
	}
	return &mcp.CreateMessageResult{Role: "assistant", Model: res.Model, StopReason: "endTurn",
		Content: &mcp.TextContent{Text: res.Content}}, nil
}
