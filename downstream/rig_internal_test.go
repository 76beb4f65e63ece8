package downstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/llm"
)

// The rigs of the package's internal tests: an executor over a pool of
// in-process streamable HTTP servers, an OpenAI-compatible LLM endpoint,
// a step's LLM gate, a log to read.

// rigTexts renders every text as its key.
type rigTexts struct{}

func (rigTexts) Text(key string, _ any) string { return key }

// rigNoOperator never answers (no call in these tests asks).
type rigNoOperator struct{}

func (rigNoOperator) Ask(context.Context, engine.OperatorQuestion) (engine.Answer, error) {
	return engine.Answer{}, errors.New("no operator in this test")
}

// rigInput is a tool step of agent-1 in task-1 calling server.
func rigInput(server string, call *engine.ToolCall) *engine.ExecInput {
	return &engine.ExecInput{
		Agent: engine.AgentState{AgentID: "agent-1", Name: "worker"},
		Step: engine.StepState{StepID: "step-1", TaskID: "task-1", StageID: "stage-1", AgentID: "agent-1",
			Type: engine.StepTool, Executor: server, InstructionContent: call},
		Operator: rigNoOperator{},
	}
}

// rigLog collects log records as text.
type rigLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *rigLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *rigLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *rigLog) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// noArgs is a tool's empty input.
type noArgs struct{}

// rigServer serves an MCP server made by setup over streamable HTTP;
// wrap (optional) sits in front of the SDK's handler.
func rigServer(t *testing.T, setup func(*mcp.Server), wrap func(http.Handler) http.Handler) *httptest.Server {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "rig", Version: "1"}, nil)
	setup(srv)
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	if wrap != nil {
		h = wrap(h)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	})
	return ts
}

// rigExecutor is an executor over a pool of the given servers; the pool
// is closed before the servers (cleanups run last-in first-out).
func rigExecutor(t *testing.T, servers map[string]ServerConfig, log *slog.Logger, client llm.Client) (*Executor, *Pool) {
	t.Helper()
	pool := NewPool(&Config{Servers: servers}, log)
	t.Cleanup(func() { _ = pool.Close() })
	e, err := NewExecutor(ExecutorConfig{Pool: pool, Texts: rigTexts{}, LLM: client, Logger: log, ConfirmTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return e, pool
}

// addSamplingTool adds "ask-sampling": it asks the client's LLM once.
func addSamplingTool(srv *mcp.Server) {
	mcp.AddTool(srv, &mcp.Tool{Name: "ask-sampling", Description: "Asks the client's LLM.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest, _ noArgs) (*mcp.CallToolResult, any, error) {
			res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 10,
				Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "Say hi"}}}})
			if err != nil {
				return nil, nil, fmt.Errorf("sampling failed: %w", err)
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("the LLM said %v", res.Content)}}}, nil, nil
		})
}

// rigLLMEndpoint is an OpenAI-compatible endpoint that counts requests
// and answers each with "hi", costing 1000 tokens.
type rigLLMEndpoint struct {
	*httptest.Server
	requests atomic.Int32
}

func newRigLLM(t *testing.T) (*rigLLMEndpoint, llm.Client) {
	t.Helper()
	ep := &rigLLMEndpoint{}
	ep.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ep.requests.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","created":1,"model":"sampler",`+
			`"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"hi"}}],`+
			`"usage":{"prompt_tokens":600,"completion_tokens":400,"total_tokens":1000}}`)
	}))
	transport := &http.Transport{}
	t.Cleanup(func() {
		transport.CloseIdleConnections()
		ep.CloseClientConnections()
		ep.Close()
	})
	client, err := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: ep.URL + "/v1", APIKey: "k", Model: "sampler",
		MaxRetries: -1, HTTPClient: &http.Client{Transport: transport}})
	if err != nil {
		t.Fatal(err)
	}
	return ep, client
}

// rigGate is a running step's LLM observer (llm.OutageObserver with the
// llm.CallGate ability, as the engine's stepOutage): held, its task is
// held for its budget and no LLM call of the step may start.
type rigGate struct {
	held          bool
	asked, outage atomic.Int32
}

func (g *rigGate) OutageBegan(time.Time, string) { g.outage.Add(1) }
func (g *rigGate) OutageEnded(llm.OutageEnd)     {}
func (g *rigGate) BeforeCall(context.Context) error {
	g.asked.Add(1)
	if g.held {
		return errors.New("the task is held: its token budget is spent")
	}
	return nil
}
