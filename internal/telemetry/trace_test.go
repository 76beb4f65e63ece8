package telemetry_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/mas-mcp/mas-mcp/downstream"
	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
	"github.com/mas-mcp/mas-mcp/internal/telemetry"
	"github.com/mas-mcp/mas-mcp/internal/telemetry/otlptest"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
	"github.com/mas-mcp/mas-mcp/prompts"
	"github.com/mas-mcp/mas-mcp/server"
)

// The trace context the MCP client sends with add_task.
const (
	clientTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpanID  = "00f067aa0ba902b7"
	clientParent  = "00-" + clientTraceID + "-" + clientSpanID + "-01"
)

// Secrets that must never be exported: the LLM API key (teststack's) and
// a downstream server's header token.
const headerSecret = "hdr-SENTINEL-token-7373"

// setup starts an OTLP receiver and telemetry exporting to it (as the
// OTEL_* variables of a user would), with or without content capture.
func setup(t *testing.T, capture bool) (*telemetry.Telemetry, *otlptest.Receiver) {
	return setupWith(t, capture, telemetry.Config{ServiceVersion: "test"})
}

func setupWith(t *testing.T, capture bool, cfg telemetry.Config) (*telemetry.Telemetry, *otlptest.Receiver) {
	t.Helper()
	r := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	// Metrics are exported by Flush only, never by a timer.
	t.Setenv("OTEL_METRIC_EXPORT_INTERVAL", "3600000")
	c := "false"
	if capture {
		c = "true"
	}
	t.Setenv(telemetry.EnvCaptureContent, c)
	tel, err := telemetry.Setup(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if tel == nil {
		t.Fatal("Setup with an OTLP endpoint set returned nil: telemetry off")
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	return tel, r
}

// echoServer is a downstream MCP server whose echo tool reports the
// params._meta each call came with.
func echoServer(t *testing.T) (url string, metas chan map[string]any) {
	t.Helper()
	metas = make(chan map[string]any, 10)
	srv := mcp.NewServer(&mcp.Implementation{Name: "echo", Version: "1"}, nil)
	type in struct {
		Text string `json:"text"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "echo", Description: "Echoes text.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest, a in) (*mcp.CallToolResult, any, error) {
			metas <- req.Params.GetMeta()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo: " + a.Text}}}, nil, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs.URL, metas
}

// run is a scripted task handed over by an MCP client whose add_task
// carries clientParent: a worker calls the echo tool once, then summarises.
type run struct {
	*teststack.Stack
	task, worker string
	metas        chan map[string]any
}

func runTask(t *testing.T) *run {
	t.Helper()
	url, metas := echoServer(t)
	pool := downstream.NewPool(&downstream.Config{Servers: map[string]downstream.ServerConfig{
		"fx": {URL: url, Description: "echoes", Headers: map[string]string{"Authorization": "Bearer " + headerSecret}},
	}}, nil)
	set, err := prompts.Load("en", "")
	if err != nil {
		t.Fatal(err)
	}
	user := &scripted.ToolUser{Calls: []scripted.Call{{Server: "fx", Tool: "echo", Args: map[string]any{"text": "hello"}}}}
	exec, err := downstream.NewExecutor(downstream.ExecutorConfig{Pool: pool, Texts: set})
	if err != nil {
		t.Fatal(err)
	}
	st := teststack.New(t, teststack.Options{
		Handler: user.Handle, Tools: pool, ToolExecutor: exec,
		// The receiver and the echo server keep the exporter's and the
		// pool's keep-alive connections until their own cleanups, which
		// run after the stack's leak check.
		NoLeakCheck: true,
	})
	t.Cleanup(func() { _ = pool.Close() })

	srv, err := server.New(server.Config{System: st.Sys, Logger: st.Log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	ctx := context.Background()
	ct, stt := mcp.NewInMemoryTransports()
	ss, err := srv.MCP().Connect(ctx, stt, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "add_task",
		// An operator pasting the API key by mistake: with content
		// capture on, prompts hold it, and it must still not be exported.
		Arguments: map[string]any{"task_name": "tools", "task_intention": "use the tools (key " + teststack.SentinelKey + ")"},
		Meta:      mcp.Meta{"traceparent": clientParent}})
	if err != nil || res.IsError {
		t.Fatalf("add_task: %v %+v", err, res)
	}
	task, _ := res.StructuredContent.(map[string]any)["task_id"].(string)
	if task == "" {
		t.Fatalf("add_task gave no task_id: %+v", res.StructuredContent)
	}

	sys := st.Sys
	w, err := sys.CreateAgent(engine.AgentConfig{Template: "researcher", Name: "worker", Tools: []string{"fx"}})
	if err != nil {
		t.Fatal(err)
	}
	op := sys.OperatorID()
	if _, err := sys.AgentInstruction(op, engine.AgentInstruction{Action: "add_task_participant", TaskID: task, Agents: []string{w}}); err != nil {
		t.Fatal(err)
	}
	if _, err := sys.TaskInstruction(op, engine.TaskInstruction{Action: "add_stage", TaskID: task,
		Stages: []engine.StageSpec{{StageIntention: "use tools", AgentAllocation: map[string]string{w: "make the calls"}}}}); err != nil {
		t.Fatal(err)
	}
	st.WaitFor("the worker's summary", func() bool {
		_, done := st.Task(task).StageList[0].CompletionSummary[w]
		return done
	})
	// Then until the manager has dealt with it too: no agent working, no
	// step left to run (the scripted manager starts nothing new).
	st.WaitFor("every agent idle", func() bool {
		if !teststack.AtRest(st.Sys) { // no report on its way (the manager's notice comes after)
			return false
		}
		for _, a := range st.Sys.Agents() {
			if a.Kind == engine.KindLLM && (a.WorkingState == engine.WorkingWorking || len(a.AgentStep.TodoList) > 0) {
				return false
			}
		}
		return true
	})
	return &run{Stack: st, task: task, worker: w, metas: metas}
}

// TestSpanTree: the trace of an MCP client's add_task holds the task span,
// every step of the task under it, every LLM call under its step, the
// tool call under its tool step, and the downstream request carries the
// trace on in its _meta.
func TestSpanTree(t *testing.T) {
	tel, rcv := setup(t, false)
	r := runTask(t)
	// The manager and the worker may still be finishing steps; those that
	// finished are exported by the flush.
	if err := tel.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := rcv.Spans()
	byID := map[string]otlptest.Span{}
	for _, s := range spans {
		byID[s.SpanID] = s
	}
	find := func(what string, ok func(otlptest.Span) bool) []otlptest.Span {
		var out []otlptest.Span
		for _, s := range spans {
			if ok(s) {
				out = append(out, s)
			}
		}
		return out
	}
	one := func(what string, ok func(otlptest.Span) bool) otlptest.Span {
		t.Helper()
		got := find(what, ok)
		if len(got) != 1 {
			t.Fatalf("%s: %d spans, want 1 (of %d spans: %s)", what, len(got), len(spans), names(spans))
		}
		return got[0]
	}

	srvSpan := one("the add_task server span", func(s otlptest.Span) bool { return s.Name == "tools/call add_task" })
	if srvSpan.Kind != tracepb.Span_SPAN_KIND_SERVER || srvSpan.TraceID != clientTraceID || srvSpan.ParentID != clientSpanID {
		t.Errorf("add_task span: kind %v trace %s parent %s; want server, %s, %s", srvSpan.Kind, srvSpan.TraceID, srvSpan.ParentID, clientTraceID, clientSpanID)
	}
	if got := srvSpan.Attrs["mcp.method.name"]; got != "tools/call" {
		t.Errorf("add_task span mcp.method.name = %q", got)
	}
	taskSpan := one("the task span", func(s otlptest.Span) bool {
		return s.Attrs["gen_ai.operation.name"] == "invoke_workflow" && s.Attrs["mas.task.id"] == r.task
	})
	if taskSpan.TraceID != clientTraceID || taskSpan.ParentID != srvSpan.SpanID {
		t.Errorf("task span: trace %s parent %s; want %s, %s (the add_task span)", taskSpan.TraceID, taskSpan.ParentID, clientTraceID, srvSpan.SpanID)
	}

	// Every step of the task that ran has its span under the task span.
	stepSpans := map[string]otlptest.Span{}
	for _, s := range find("step spans", func(s otlptest.Span) bool { return s.Attrs["gen_ai.operation.name"] == "invoke_agent" }) {
		stepSpans[s.Attrs["mas.step.id"]] = s
	}
	ran := 0
	var toolStep string
	for _, a := range r.Sys.Agents() {
		for _, st := range a.AgentStep.StepList {
			if st.TaskID != r.task || (st.ExecutionState != engine.StateFinished && st.ExecutionState != engine.StateFailed) || st.StartedAt.IsZero() {
				continue
			}
			ran++
			s, ok := stepSpans[st.StepID]
			if !ok {
				t.Errorf("step %s (%s of %s) has no span", st.StepID[:8], st.Executor, a.Name)
				continue
			}
			if s.TraceID != clientTraceID || s.ParentID != taskSpan.SpanID {
				t.Errorf("step %s span: trace %s parent %s; want %s, the task span %s", st.Executor, s.TraceID, s.ParentID, clientTraceID, taskSpan.SpanID)
			}
			if s.Attrs["gen_ai.agent.id"] != a.AgentID || s.Attrs["gen_ai.agent.name"] != a.Name || s.Name != "invoke_agent "+a.Name {
				t.Errorf("step span %q: agent attributes %v", s.Name, s.Attrs)
			}
			if st.Type == engine.StepTool {
				toolStep = st.StepID
			}
		}
	}
	if ran < 5 {
		t.Fatalf("only %d steps of the task ran: the script did not run", ran)
	}

	// Every LLM call is a chat span under the span of the step that made it.
	calls := r.LLM.Calls()
	chats := find("chat spans", func(s otlptest.Span) bool { return s.Attrs["gen_ai.operation.name"] == "chat" })
	if len(chats) != len(calls) {
		t.Errorf("%d chat spans for %d LLM calls", len(chats), len(calls))
	}
	perStep := map[string]int{}
	for _, c := range chats {
		p, ok := byID[c.ParentID]
		if !ok || p.Attrs["gen_ai.operation.name"] != "invoke_agent" || p.TraceID != c.TraceID {
			t.Errorf("chat span %s: parent %s is not a step span of its trace", c.SpanID, c.ParentID)
			continue
		}
		perStep[p.Attrs["mas.step.id"]]++
		if c.Kind != tracepb.Span_SPAN_KIND_CLIENT || c.Attrs["gen_ai.request.model"] != "fake-model" || c.Attrs["gen_ai.usage.input_tokens"] == "" || c.Attrs["gen_ai.usage.output_tokens"] == "" {
			t.Errorf("chat span %q: kind %v attributes %v", c.Name, c.Kind, c.Attrs)
		}
	}
	for _, c := range calls {
		if c.StepID != "" && perStep[c.StepID] == 0 {
			t.Errorf("LLM call %d (%s of %s, step %s) has no chat span under its step", c.N, c.Skill, c.AgentName, c.StepID)
		}
	}

	// The tool call: execute_tool under the tool step, the MCP client span
	// under it, and the downstream server got that span's context.
	if toolStep == "" {
		t.Fatal("no tool step ran")
	}
	exec := one("the execute_tool span", func(s otlptest.Span) bool {
		return s.Attrs["gen_ai.operation.name"] == "execute_tool" && s.Kind == tracepb.Span_SPAN_KIND_INTERNAL
	})
	if exec.Name != "execute_tool echo" || exec.Attrs["gen_ai.tool.name"] != "echo" || exec.ParentID != stepSpans[toolStep].SpanID {
		t.Errorf("execute_tool span %q attrs %v parent %s; want under the tool step %s", exec.Name, exec.Attrs, exec.ParentID, stepSpans[toolStep].SpanID)
	}
	call := one("the tools/call echo client span", func(s otlptest.Span) bool { return s.Name == "tools/call echo" })
	if call.Kind != tracepb.Span_SPAN_KIND_CLIENT || call.ParentID != exec.SpanID || call.TraceID != clientTraceID {
		t.Errorf("tools/call span: kind %v parent %s trace %s; want client, %s, %s", call.Kind, call.ParentID, call.TraceID, exec.SpanID, clientTraceID)
	}
	meta := <-r.metas
	want := "00-" + clientTraceID + "-" + call.SpanID + "-01"
	if got, _ := meta["traceparent"].(string); got != want {
		t.Errorf("downstream request _meta.traceparent = %q, want %q", got, want)
	}
}

func names(spans []otlptest.Span) string {
	var b strings.Builder
	for _, s := range spans {
		b.WriteString(s.Name)
		b.WriteString("; ")
	}
	return b.String()
}

// TestNoSecretsExported runs the task with content capture off and on and
// scans everything exported (spans and metrics) for the LLM API key and a
// downstream server's header token; with capture on, the prompts must be
// there (so the scan looked at content at all).
func TestNoSecretsExported(t *testing.T) {
	for _, capture := range []bool{false, true} {
		t.Run(map[bool]string{false: "capture off", true: "capture on"}[capture], func(t *testing.T) {
			tel, rcv := setup(t, capture)
			r := runTask(t)
			if err := tel.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			raw := rcv.Raw()
			if len(rcv.Spans()) == 0 || len(rcv.Metrics()) == 0 {
				t.Fatalf("nothing exported: %d spans, %d metric batches", len(rcv.Spans()), len(rcv.Metrics()))
			}
			for _, secret := range []string{teststack.SentinelKey, headerSecret, "SENTINEL"} {
				if bytes.Contains(raw, []byte(secret)) {
					t.Errorf("exported telemetry contains the secret %q", secret)
				}
			}
			hasPrompt := bytes.Contains(raw, []byte("gen_ai.input.messages"))
			hasArgs := bytes.Contains(raw, []byte(`{"text":"hello"}`))
			if hasPrompt != capture || hasArgs != capture {
				t.Errorf("content capture %v: prompts exported %v, tool arguments exported %v", capture, hasPrompt, hasArgs)
			}
			_ = r
		})
	}
}

// TestTraceSurvivesRestart: the task keeps its span's traceparent, so a
// step run after a restart still lands under the task span in the
// client's trace (no span is held open across the restart).
func TestTraceSurvivesRestart(t *testing.T) {
	tel, rcv := setup(t, false)
	r := runTask(t)
	r.Restart()
	if _, err := r.Sys.HumanSend(r.Sys.OperatorID(), engine.HumanMessage{TaskID: r.task, Receiver: []string{r.worker}, Content: "thanks"}); err != nil {
		t.Fatal(err)
	}
	var stepID string
	r.WaitFor("the worker's process_message after the restart", func() bool {
		a, _ := r.Sys.Agent(r.worker)
		for _, st := range a.AgentStep.StepList {
			if st.TaskID == r.task && st.Executor == "process_message" && st.ExecutionState == engine.StateFinished {
				stepID = st.StepID
				return true
			}
		}
		return false
	})
	if err := tel.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var task, step *otlptest.Span
	for _, s := range rcv.Spans() {
		switch {
		case s.Attrs["gen_ai.operation.name"] == "invoke_workflow" && s.Attrs["mas.task.id"] == r.task:
			task = &s
		case s.Attrs["mas.step.id"] == stepID:
			step = &s
		}
	}
	if task == nil || step == nil {
		t.Fatalf("task span %v, step span %v: missing", task, step)
	}
	if step.TraceID != clientTraceID || step.ParentID != task.SpanID {
		t.Errorf("step after restart: trace %s parent %s; want %s, the task span %s", step.TraceID, step.ParentID, clientTraceID, task.SpanID)
	}
}
