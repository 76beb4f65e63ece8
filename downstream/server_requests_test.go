package downstream_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/downstream"
	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
)

// fixture is an MCP server written for the tests, served over streamable
// HTTP, whose tools ask the client things back.
type fixture struct {
	*httptest.Server
	// protocolErrCalls counts the calls of fail-protocol, sendCalls those
	// of send.
	protocolErrCalls, sendCalls atomic.Int32
	// versions records the protocol version each tool call was served on.
	versions chan string
	// stop ends the calls of hang (a stateless server never learns that
	// the client gave up).
	stop chan struct{}
	// hanging receives once per call of hang when it starts; cancelled once
	// per call whose context the server cancelled (the client sent
	// notifications/cancelled).
	hanging, cancelled chan struct{}
}

// newFixture starts the fixture server; stateless serves only clients of
// protocol 2026-07-28 and later (which get no server-to-client requests:
// they must be answered with input requests instead).
func newFixture(t *testing.T, stateless bool) *fixture {
	f := &fixture{versions: make(chan string, 100), stop: make(chan struct{}),
		hanging: make(chan struct{}, 10), cancelled: make(chan struct{}, 10)}
	srv := mcp.NewServer(&mcp.Implementation{Name: "fixture", Version: "1"}, nil)
	ro := &mcp.ToolAnnotations{ReadOnlyHint: true}
	type none struct{}
	text := func(s string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
	}
	seen := func(req *mcp.CallToolRequest) {
		if p := req.Session.InitializeParams(); p != nil {
			select {
			case f.versions <- p.ProtocolVersion:
			default:
			}
		}
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "ask-sampling", Description: "Asks the client's LLM.", Annotations: ro},
		func(ctx context.Context, req *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
			seen(req)
			res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 10,
				Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "Say hi"}}}})
			if err != nil {
				return nil, nil, fmt.Errorf("sampling failed: %w", err)
			}
			return text(fmt.Sprintf("the client's LLM said %v", res.Content)), nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "ask-elicitation", Description: "Asks the user.", Annotations: ro},
		func(ctx context.Context, req *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
			seen(req)
			res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Your name?",
				RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}}})
			if err != nil {
				return nil, nil, fmt.Errorf("elicitation failed: %w", err)
			}
			return text(fmt.Sprintf("the user answered %s %v", res.Action, res.Content)), nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "input-elicitation", Description: "Asks the user by input request.", Annotations: ro},
		func(ctx context.Context, req *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
			seen(req)
			if r, ok := req.Params.InputResponses["e"].(*mcp.ElicitResult); ok {
				return text(fmt.Sprintf("the user answered %s %v", r.Action, r.Content)), nil, nil
			}
			return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"e": &mcp.ElicitParams{Message: "Your name?",
				RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}}}}}, nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "ask-roots", Description: "Lists the client's roots.", Annotations: ro},
		func(ctx context.Context, req *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
			seen(req)
			res, err := req.Session.ListRoots(ctx, nil)
			if err != nil {
				return nil, nil, fmt.Errorf("listing roots failed: %w", err)
			}
			return text(fmt.Sprintf("the client has %d roots", len(res.Roots))), nil, nil
		})
	// The way of protocol 2026-07-28 (multi round-trip requests): the
	// result asks for input and the client calls again with it. The SDK
	// turns it into a sampling request for older clients.
	mcp.AddTool(srv, &mcp.Tool{Name: "input-sampling", Description: "Asks the client's LLM by input request.", Annotations: ro},
		func(ctx context.Context, req *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
			seen(req)
			if r := req.Params.InputResponses["s"]; r != nil {
				return text("got the client's answer"), nil, nil
			}
			return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"s": &mcp.CreateMessageParams{MaxTokens: 10,
				Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "Say hi"}}}}}}, nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "hang", Description: "Never answers.", Annotations: ro},
		func(ctx context.Context, req *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
			f.hanging <- struct{}{}
			select {
			case <-ctx.Done():
				f.cancelled <- struct{}{}
				return nil, nil, ctx.Err()
			case <-f.stop:
				return nil, nil, errors.New("stopped")
			}
		})
	srv.AddTool(&mcp.Tool{Name: "fail-protocol", Description: "Answers with a JSON-RPC error.", Annotations: ro,
		InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			f.protocolErrCalls.Add(1)
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "upstream https://example.com: connection refused"}
		})
	// A destructive tool whose first call loses the connection after the
	// tool did its work (a network drop, a proxy restarting).
	srv.AddTool(&mcp.Tool{Name: "send", Description: "Sends a message (not idempotent).",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: new(true)}, InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if f.sendCalls.Add(1) == 1 {
				f.CloseClientConnections()
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-f.stop:
					return nil, errors.New("stopped")
				}
			}
			return text("sent"), nil
		})
	f.Server = httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{Stateless: stateless}))
	return f
}

// newFixtureStack has a worker make the calls to the fixture. Everything
// is closed before the stack's goroutine-leak check.
func newFixtureStack(t *testing.T, f *fixture, timeout time.Duration, calls []scripted.Call) *toolStack {
	cfg := &downstream.Config{Servers: map[string]downstream.ServerConfig{
		"fixture": {URL: f.URL + "/mcp", Timeout: downstream.Duration(timeout)},
	}}
	s := newToolStack(t, cfg, calls)
	t.Cleanup(func() {
		_ = s.pool.Close()
		close(f.stop)
		f.CloseClientConnections()
		f.Close()
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	})
	return s
}

// TestServerRequests: mas-mcp offers no sampling to downstream servers
// whose config does not allow it, and no roots unless configured
// (requests_test.go has the requests that are answered). A tool that asks
// for what is not offered fails cleanly with a reason, well within the
// server's timeout, and a tool that never answers fails at the timeout.
func TestServerRequests(t *testing.T) {
	const timeout = 3 * time.Second
	type want struct {
		tool string
		// errs are substrings of the step's error; none: it must finish.
		errs []string
		// slow steps may take the whole timeout.
		slow bool
		// result is a substring of a finished step's result.
		result string
	}
	for _, tc := range []struct {
		name      string
		stateless bool
		version   string // the protocol the calls must be served on
		wants     []want
	}{{
		name: "stateful", version: "2025-11-25",
		wants: []want{
			{tool: "ask-sampling", errs: []string{"tool ask-sampling reported an error", "sampling failed", "client does not support CreateMessage"}},
			// The SDK's client answers roots/list with its (no) roots.
			{tool: "ask-roots", result: "the client has 0 roots"},
			{tool: "input-sampling", errs: []string{"call input-sampling", "client does not support CreateMessage"}},
			{tool: "hang", errs: []string{"call hang", "no answer within 3s"}, slow: true},
		},
	}, {
		name: "stateless", stateless: true, version: "2026-07-28",
		wants: []want{
			{tool: "ask-sampling", errs: []string{"tool ask-sampling reported an error", "sampling failed", "cannot be sent"}},
			{tool: "ask-elicitation", errs: []string{"tool ask-elicitation reported an error", "elicitation failed"}},
			{tool: "ask-roots", errs: []string{"tool ask-roots reported an error", "listing roots failed", "cannot be sent"}},
			{tool: "input-sampling", errs: []string{"call input-sampling", "client does not support CreateMessage"}},
			{tool: "hang", errs: []string{"call hang", "no answer within 3s"}, slow: true},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.stateless)
			var calls []scripted.Call
			for _, w := range tc.wants {
				calls = append(calls, scripted.Call{Server: "fixture", Tool: w.tool, Args: map[string]any{}})
			}
			s := newFixtureStack(t, f, timeout, calls)
			w := s.runWorker(t, "fixture")

			steps := s.toolSteps(w)
			if len(steps) != len(tc.wants) {
				t.Fatalf("tool steps: %d, want %d\n%s", len(steps), len(tc.wants), s.Dump())
			}
			for i, want := range tc.wants {
				st := steps[i]
				msg, _ := st.ExecuteResult["error"].(string)
				took := st.FinishedAt.Sub(st.StartedAt)
				t.Logf("%s: %s in %s: %s", want.tool, st.ExecutionState, took.Round(time.Millisecond), msg)
				switch {
				case want.errs == nil && st.ExecutionState != engine.StateFinished:
					t.Errorf("%s: %s: %s", want.tool, st.ExecutionState, msg)
				case want.errs != nil && st.ExecutionState != engine.StateFailed:
					t.Errorf("%s: %s, want failed", want.tool, st.ExecutionState)
				}
				if got := jsonString(st.ExecuteResult["mcp_server_result"]); !strings.Contains(got, want.result) {
					t.Errorf("%s: result %s lacks %q", want.tool, got, want.result)
				}
				for _, e := range want.errs {
					if !strings.Contains(msg, e) {
						t.Errorf("%s: error %q lacks %q", want.tool, msg, e)
					}
				}
				if limit := timeout / 2; !want.slow && took > limit {
					t.Errorf("%s took %s, want well within the server's timeout %s", want.tool, took, timeout)
				}
				if want.slow && took > timeout+2*time.Second {
					t.Errorf("%s took %s, want about the server's timeout %s", want.tool, took, timeout)
				}
			}
			for len(f.versions) > 0 {
				if v := <-f.versions; v != tc.version {
					t.Errorf("a call was served on protocol %s, want %s", v, tc.version)
				}
			}
		})
	}
}

// TestServerErrorAnswerIsNotABrokenTransport: a server that answers a call
// with a JSON-RPC error mentioning "connection refused" is not restarted,
// and the call is not made twice.
func TestServerErrorAnswerIsNotABrokenTransport(t *testing.T) {
	f := newFixture(t, false)
	s := newFixtureStack(t, f, 3*time.Second, []scripted.Call{{Server: "fixture", Tool: "fail-protocol", Args: map[string]any{}}})
	w := s.runWorker(t, "fixture")
	steps := s.toolSteps(w)
	if len(steps) != 1 || steps[0].ExecutionState != engine.StateFailed ||
		!strings.Contains(fmt.Sprint(steps[0].ExecuteResult["error"]), "connection refused") {
		t.Fatalf("want one failed step quoting the server's error\n%s", s.Dump())
	}
	if n := f.protocolErrCalls.Load(); n != 1 {
		t.Errorf("the tool was called %d times, want 1", n)
	}
}

// TestCallInterruptedIsNotMadeAgain: when the connection drops during a
// call of a tool that is neither read-only nor idempotent, the call may
// have taken effect: it must not be made a second time on the new session.
func TestCallInterruptedIsNotMadeAgain(t *testing.T) {
	f := newFixture(t, false)
	cfg := &downstream.Config{Servers: map[string]downstream.ServerConfig{
		"fixture": {URL: f.URL + "/mcp", Timeout: downstream.Duration(15 * time.Second), AutoApprove: []string{"send"}},
	}}
	s := newToolStack(t, cfg, []scripted.Call{{Server: "fixture", Tool: "send", Args: map[string]any{}}})
	t.Cleanup(func() {
		_ = s.pool.Close()
		close(f.stop)
		f.CloseClientConnections()
		f.Close()
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	})
	w := s.runWorker(t, "fixture")
	steps := s.toolSteps(w)
	if len(steps) != 1 {
		t.Fatalf("tool steps: %d, want 1\n%s", len(steps), s.Dump())
	}
	t.Logf("the interrupted call: %s %v", steps[0].ExecutionState, steps[0].ExecuteResult["error"])
	if n := f.sendCalls.Load(); n != 1 {
		t.Errorf("send was called %d times, want 1 (and a failed step saying the call may have been made)", n)
	}
}

// hangingCall starts a worker whose tool call hangs in f's server and
// returns the worker, its task and the running tool step.
func (s *toolStack) hangingCall(t *testing.T, f *fixture) (w, task, running string) {
	t.Helper()
	w, task = s.startWorker(t, "fixture")
	select {
	case <-f.hanging:
	case <-time.After(time.Minute):
		t.Fatalf("the tool call never started\n%s", s.Dump())
	}
	for _, st := range s.toolSteps(w) {
		if st.ExecutionState == engine.StateRunning {
			running = st.StepID
		}
	}
	if running == "" {
		t.Fatalf("no running tool step\n%s", s.Dump())
	}
	return w, task, running
}

// TestOperatorStopsARunningToolCall: the operator cancels a running tool
// call, or interrupts its agent: the downstream server learns of it (its
// handler's context is cancelled by notifications/cancelled), the step
// fails with the operator's reason, and an interrupt's instruction is the
// agent's next step.
func TestOperatorStopsARunningToolCall(t *testing.T) {
	for _, interrupt := range []bool{false, true} {
		t.Run(map[bool]string{false: "cancel_step", true: "interrupt"}[interrupt], func(t *testing.T) {
			f := newFixture(t, false)
			s := newFixtureStack(t, f, time.Minute, []scripted.Call{{Server: "fixture", Tool: "hang", Args: map[string]any{}}})
			w, task, running := s.hangingCall(t, f)
			op := s.Sys.OperatorID()
			want := "cancelled by the operator: too slow"
			if interrupt {
				if _, err := s.Sys.Interrupt(op, w, "too slow", "INSTRUCTION: skip the tool"); err != nil {
					t.Fatal(err)
				}
				want = "interrupted by the operator: too slow"
			} else if err := s.Sys.CancelStep(op, w, running, "too slow"); err != nil {
				t.Fatal(err)
			}
			select {
			case <-f.cancelled:
			case <-time.After(time.Minute):
				t.Fatal("the downstream server never learned the call was cancelled")
			}
			s.WaitFor("the tool step to fail", func() bool {
				for _, st := range s.toolSteps(w) {
					if st.StepID == running {
						return st.ExecutionState == engine.StateFailed
					}
				}
				return false
			})
			for _, st := range s.toolSteps(w) {
				if st.StepID == running && fmt.Sprint(st.ExecuteResult["error"]) != want {
					t.Errorf("tool step error %q, want %q", st.ExecuteResult["error"], want)
				}
			}
			if interrupt {
				a, _ := s.Sys.Agent(w)
				found := false
				for _, st := range a.AgentStep.StepList {
					if st.TaskID == task && st.Executor == engine.SkillProcessMessage && strings.Contains(st.TextContent, "INSTRUCTION: skip the tool") {
						found = true
					}
				}
				if !found {
					t.Errorf("the instruction is not among the worker's steps\n%s", s.Dump())
				}
			}
		})
	}
}
