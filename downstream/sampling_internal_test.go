package downstream

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/llm"
)

// TestSamplingUsesTheCallingStepsGate: a server's sampling request is an
// LLM call of the step whose tool call it belongs to. It runs under that
// step's llm.CallGate and outage observer (the engine's stepOutage: no LLM
// call of a task held for its budget starts), not under those of the step
// that happened to connect the session first.
func TestSamplingUsesTheCallingStepsGate(t *testing.T) {
	ts := rigServer(t, addSamplingTool, nil)
	ep, client := newRigLLM(t)
	e, _ := rigExecutor(t, map[string]ServerConfig{
		"srv": {URL: ts.URL + "/mcp", AllowSampling: true, Timeout: Duration(time.Minute)},
	}, nil, client)

	// Task A's step connects the session (its first use of the server).
	gateA := &rigGate{}
	inA := rigInput("srv", &engine.ToolCall{InstructionType: "get_description"})
	inA.Step.TaskID, inA.Step.StepID = "task-A", "step-A"
	if out := e.Execute(llm.WithOutageObserver(context.Background(), gateA), inA); out.Err != nil {
		t.Fatalf("step A: %v", out.Err)
	}

	// Task B is held; its step's tool call makes the server sample.
	gateB := &rigGate{held: true}
	inB := rigInput("srv", &engine.ToolCall{ToolName: "ask-sampling", Arguments: map[string]any{}})
	inB.Step.TaskID, inB.Step.StepID = "task-B", "step-B"
	out := e.Execute(llm.WithOutageObserver(context.Background(), gateB), inB)
	t.Logf("step B: err %v", out.Err)
	if n := ep.requests.Load(); n != 0 || gateB.asked.Load() == 0 {
		t.Errorf("held task B's sampling call: %d request(s) reached the LLM endpoint; B's gate was asked %d times, "+
			"task A's (the step that connected the session) %d times; want B's gate asked and no request",
			n, gateB.asked.Load(), gateA.asked.Load())
	}
}

// TestSamplingTokensAreCounted: the tokens the MAS's LLM spends answering
// a server's sampling request are the calling step's: they are in its
// Output.Usage, which budgets (task, agent, operator per day) and the
// audit of usage count.
func TestSamplingTokensAreCounted(t *testing.T) {
	ts := rigServer(t, addSamplingTool, nil)
	ep, client := newRigLLM(t)
	e, _ := rigExecutor(t, map[string]ServerConfig{
		"srv": {URL: ts.URL + "/mcp", AllowSampling: true, Timeout: Duration(time.Minute)},
	}, nil, client)
	out := e.Execute(context.Background(), rigInput("srv", &engine.ToolCall{ToolName: "ask-sampling", Arguments: map[string]any{}}))
	if out.Err != nil {
		t.Fatalf("step failed: %v", out.Err)
	}
	if n := ep.requests.Load(); n != 1 {
		t.Fatalf("the LLM endpoint got %d requests, want 1", n)
	}
	if out.Usage.TotalTokens != 1000 || out.Usage.PromptTokens != 600 || out.Usage.Calls != 1 {
		t.Errorf("the step's usage is %+v after one sampling call that cost 1000 tokens (600 prompt); want them counted", out.Usage)
	}
}

// slowLLM answers after took (an LLM outage being waited out: the client
// retries for up to --llm-outage-window, 10 minutes).
type slowLLM struct{ took time.Duration }

func (s slowLLM) Complete(ctx context.Context, _ *llm.Request) (*llm.Response, error) {
	select {
	case <-time.After(s.took):
		return &llm.Response{Content: "hi", Model: "sampler"}, nil
	case <-ctx.Done():
		return &llm.Response{}, fmt.Errorf("llm: chat completion: %w", ctx.Err())
	}
}

// TestSamplingHoldsTheCallTimeout: while the MAS's LLM answers a server's
// sampling request the server is not the one being slow: as while the
// operator answers an elicitation, the call's timeout is held. A slow
// model, or an LLM outage waited out, does not run the call into the
// server's timeout (an outage pauses the step, it does not fail it).
func TestSamplingHoldsTheCallTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &conn{name: "srv", sc: ServerConfig{URL: "http://srv.invalid/mcp", AllowSampling: true, Timeout: Duration(time.Minute)}}
		e := &Executor{cfg: ExecutorConfig{LLM: slowLLM{took: 5 * time.Minute}, Texts: rigTexts{},
			Logger: slog.New(slog.DiscardHandler)}}
		in := rigInput("srv", &engine.ToolCall{ToolName: "ask-sampling"})
		// The call as Pool.do makes it; the handler's context ends with it.
		cctx, f, end := c.begin(withCaller(context.Background(), in, "ask-sampling"))
		defer end()
		res, err := e.sample(cctx, "srv", f, &mcp.CreateMessageParams{MaxTokens: 10,
			Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "Say hi"}}}})
		if cause := context.Cause(cctx); cause != nil {
			t.Errorf("the tool call ended while the MAS's LLM was answering the server's sampling request: %v (sample: %v)", cause, err)
		}
		if err != nil || res == nil {
			t.Errorf("sample = %v, %v; want the LLM's answer", res, err)
		}
	})
}

// ctxProbe answers the servers' requests, noting whether the handler's
// context carries a value of the step that connected the session.
type ctxProbe struct{ leaked chan bool }

type stepMark struct{}

func (p ctxProbe) elicit(context.Context, string, *inflight, *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	return &mcp.ElicitResult{Action: "cancel"}, nil
}

func (p ctxProbe) sample(ctx context.Context, _ string, _ *inflight, _ *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
	p.leaked <- ctx.Value(stepMark{}) != nil
	return &mcp.CreateMessageResult{Role: "assistant", Content: &mcp.TextContent{Text: "hi"}}, nil
}

// TestSessionContextCarriesNoStepValues: a session outlives the step that
// connected it, and the SDK runs the handlers of the server's requests in
// contexts derived from the session's: it carries none of that step's
// values (its LLM gate, its trace, its caller).
func TestSessionContextCarriesNoStepValues(t *testing.T) {
	ts := rigServer(t, addSamplingTool, nil)
	pool := NewPool(&Config{Servers: map[string]ServerConfig{
		"srv": {URL: ts.URL + "/mcp", AllowSampling: true, Timeout: Duration(time.Minute)},
	}}, nil)
	t.Cleanup(func() { _ = pool.Close() })
	probe := ctxProbe{leaked: make(chan bool, 1)}
	pool.serve(probe)
	ctx := withCaller(context.WithValue(context.Background(), stepMark{}, true), rigInput("srv", nil), "ask-sampling")
	err := pool.do(ctx, "srv", true, func(ctx context.Context, s *mcp.ClientSession) error {
		_, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "ask-sampling", Arguments: map[string]any{}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if <-probe.leaked {
		t.Error("the handler of a server's request runs with the values of the step that connected the session")
	}
}
