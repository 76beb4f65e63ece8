package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/mas-mcp/mas-mcp/llm"
)

// opInvokeWorkflow is the GenAI operation of a task span. The conventions
// name it (gen_ai.operation.name "invoke_workflow") after the Go semconv
// package we use was generated, so it is spelled out here.
var opInvokeWorkflow = semconv.GenAIOperationNameKey.String("invoke_workflow")

// w3c is the one propagation format: W3C trace context (traceparent,
// tracestate), in MCP _meta and in the task's stored trace_parent.
var w3c = propagation.TraceContext{}

type agentKey struct{}

type agentInfo struct{ id, name string }

// withAgent marks ctx as running for an agent, so the chat calls and tool
// calls under it are counted by agent.
func withAgent(ctx context.Context, id, name string) context.Context {
	return context.WithValue(ctx, agentKey{}, agentInfo{id, name})
}

func agentFrom(ctx context.Context) agentInfo {
	a, _ := ctx.Value(agentKey{}).(agentInfo)
	return a
}

// TraceParent is the W3C traceparent of the span in ctx, or "" when there
// is none (telemetry off, or no span).
func TraceParent(ctx context.Context) string {
	if load() == nil {
		return ""
	}
	c := propagation.MapCarrier{}
	w3c.Inject(ctx, c)
	return c["traceparent"]
}

// parentContext returns ctx under the remote span a traceparent names
// (ctx itself when it names none).
func parentContext(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return w3c.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}

// StartTask records a task's span (invoke_workflow) as a child of the span
// parent names (the add_task request's, or none) and returns the task
// span's traceparent, which the task keeps: every step span of the task is
// its child, in the same trace, for as long as the task lives.
//
// The span ends at once. A task may last days and outlive the process,
// and a span is exported only when it ends: a span held open for the
// task's life would be lost at a restart, taking the steps' parent with
// it. So the task span marks the task's creation, and the steps link to
// it through the stored traceparent, across restarts. It returns "" when
// traces are off.
func StartTask(parent, taskID, name string) string {
	st := load()
	if st == nil || st.tracer == nil {
		return ""
	}
	ctx := parentContext(context.Background(), parent)
	ctx, span := st.tracer.Start(ctx, "invoke_workflow "+name, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(opInvokeWorkflow, semconv.GenAIConversationID(taskID), KeyTaskID.String(taskID),
			attribute.String("gen_ai.workflow.name", name)))
	span.End()
	return TraceParent(ctx)
}

// Step describes an agent step to StartStep.
type Step struct {
	TaskID, StageID, StepID string
	// TaskTraceParent is the task span's traceparent ("" when the task has
	// none, e.g. the base task: each of its steps is a trace of its own).
	TaskTraceParent string
	AgentID         string
	AgentName       string
	// Type is "skill" or "tool"; Executor the skill or the tool server.
	Type, Executor string
}

// StepSpan is a running step's span and metrics; nil when telemetry is off.
type StepSpan struct {
	st    *state
	span  trace.Span
	start time.Time
	// executor and typ are the step's, for its metrics.
	executor, typ string
}

// StartStep starts an agent step's span (invoke_agent) under the task's
// span and returns the context the step runs under.
func StartStep(ctx context.Context, s Step) (context.Context, *StepSpan) {
	st := load()
	if st == nil {
		return ctx, nil
	}
	ctx = withAgent(ctx, s.AgentID, s.AgentName)
	sp := &StepSpan{st: st, start: time.Now(), executor: s.Executor, typ: s.Type}
	if st.tracer != nil {
		pctx := parentContext(ctx, s.TaskTraceParent)
		if s.TaskTraceParent == "" {
			pctx = trace.ContextWithSpanContext(ctx, trace.SpanContext{})
		}
		var span trace.Span
		_, span = st.tracer.Start(pctx, "invoke_agent "+s.AgentName, trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithAttributes(
				semconv.GenAIOperationNameInvokeAgent,
				semconv.GenAIAgentID(s.AgentID), semconv.GenAIAgentName(s.AgentName),
				semconv.GenAIConversationID(s.TaskID),
				KeyTaskID.String(s.TaskID), KeyStageID.String(s.StageID), KeyStepID.String(s.StepID),
				KeyStepType.String(s.Type), KeyStepExecutor.String(s.Executor)))
		sp.span = span
		ctx = trace.ContextWithSpan(ctx, span)
	}
	return ctx, sp
}

// End ends the step: outcome is OutcomeOK, OutcomeError or
// OutcomeCancelled; err (may be nil) says why it failed. Safe on nil.
func (sp *StepSpan) End(outcome string, err error) {
	if sp == nil {
		return
	}
	if sp.span != nil {
		sp.span.SetAttributes(KeyOutcome.String(outcome))
		if outcome == OutcomeError {
			sp.span.SetAttributes(semconv.ErrorTypeKey.String("step_failed"))
			msg := ""
			if err != nil {
				msg = err.Error()
			}
			sp.span.SetStatus(codes.Error, clip(msg, 500))
		}
		sp.span.End()
	}
	if in := sp.st.inst; in != nil {
		attrs := in.sets.of("step\x00"+sp.executor+"\x00"+sp.typ+"\x00"+outcome,
			KeyStepExecutor.String(sp.executor), KeyStepType.String(sp.typ), KeyOutcome.String(outcome))
		ctx := context.Background()
		in.steps.Add(ctx, 1, attrs)
		in.stepDuration.Record(ctx, secondsSince(sp.start), attrs)
	}
}

// chatObserver is the llm.Observer Setup installs: a chat span and the
// LLM metrics per call.
type chatObserver struct{}

func (chatObserver) Chat(ctx context.Context, call llm.ChatCall, next func(context.Context, *llm.Request) (*llm.Response, error)) (*llm.Response, error) {
	st := load()
	if st == nil {
		return next(ctx, call.Request)
	}
	start := time.Now()
	var span trace.Span
	if st.tracer != nil {
		attrs := []attribute.KeyValue{
			semconv.GenAIOperationNameChat, semconv.GenAIProviderNameKey.String(call.Provider),
			semconv.GenAIRequestModel(call.Model),
		}
		if t := call.Request.Temperature; t != nil {
			attrs = append(attrs, semconv.GenAIRequestTemperature(float64(*t)))
		}
		if call.Request.MaxTokens > 0 {
			attrs = append(attrs, semconv.GenAIRequestMaxTokens(call.Request.MaxTokens))
		}
		if st.capture {
			attrs = append(attrs, semconv.GenAIInputMessagesKey.String(inputMessages(call.Request.Messages, call.Scrub)))
		}
		ctx, span = st.tracer.Start(ctx, "chat "+call.Model, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	}
	resp, err := next(ctx, call.Request)
	errType := llmErrorType(err)
	if span != nil {
		if resp != nil {
			span.SetAttributes(
				semconv.GenAIResponseModel(resp.Model),
				semconv.GenAIUsageInputTokens(resp.Usage.PromptTokens),
				semconv.GenAIUsageOutputTokens(resp.Usage.CompletionTokens),
				semconv.GenAIUsageCacheReadInputTokens(resp.Usage.CachedTokens))
			if st.capture && err == nil {
				span.SetAttributes(semconv.GenAIOutputMessagesKey.String(outputMessage(resp.Content, call.Scrub)))
			}
		}
		if err != nil {
			span.SetAttributes(semconv.ErrorTypeKey.String(errType))
			// llm.Client's contract: its errors hold no secret.
			span.SetStatus(codes.Error, clip(err.Error(), 500))
		}
		span.End()
	}
	if in := st.inst; in != nil {
		ag := agentFrom(ctx)
		base := []attribute.KeyValue{semconv.GenAIOperationNameChat, semconv.GenAIProviderNameKey.String(call.Provider),
			semconv.GenAIRequestModel(call.Model), semconv.GenAIAgentName(ag.name)}
		key := call.Provider + "\x00" + call.Model + "\x00" + ag.name + "\x00"
		with := func(k string, kv attribute.KeyValue) metric.MeasurementOption {
			return in.sets.of(key+k, append(base[:len(base):len(base)], kv)...)
		}
		bg := context.Background()
		if err != nil {
			in.llmDuration.Record(bg, secondsSince(start), with("error.type="+errType, semconv.ErrorTypeKey.String(errType)))
			in.llmCalls.Add(bg, 1, with("outcome=error", KeyOutcome.String(OutcomeError)))
			return resp, err
		}
		in.llmDuration.Record(bg, secondsSince(start), in.sets.of(key, base...))
		in.llmCalls.Add(bg, 1, with("outcome=ok", KeyOutcome.String(OutcomeOK)))
		if resp != nil {
			u := resp.Usage
			in.llmTokens.Add(bg, int64(u.PromptTokens), with(TokenInput, semconv.GenAITokenTypeKey.String(TokenInput)))
			in.llmTokens.Add(bg, int64(u.CompletionTokens), with(TokenOutput, semconv.GenAITokenTypeKey.String(TokenOutput)))
			in.llmTokens.Add(bg, int64(u.CachedTokens), with(TokenCached, semconv.GenAITokenTypeKey.String(TokenCached)))
			in.llmTokenUsage.Record(bg, int64(u.PromptTokens), with(TokenInput, semconv.GenAITokenTypeKey.String(TokenInput)))
			in.llmTokenUsage.Record(bg, int64(u.CompletionTokens), with(TokenOutput, semconv.GenAITokenTypeKey.String(TokenOutput)))
		}
	}
	return resp, err
}

// llmErrorType is error.type for a failed chat call: the llm package's
// error class, low-cardinality.
func llmErrorType(err error) string {
	if err == nil {
		return ""
	}
	for _, c := range []struct {
		err  error
		name string
	}{
		{llm.ErrRateLimited, "rate_limited"}, {llm.ErrServer, "server_error"}, {llm.ErrTimeout, "timeout"},
		{llm.ErrRefused, "refused"}, {llm.ErrUnauthorized, "unauthorized"}, {llm.ErrForbidden, "forbidden"},
		{llm.ErrModelNotFound, "model_not_found"}, {llm.ErrContextLength, "context_length_exceeded"},
		{context.Canceled, "cancelled"}, {context.DeadlineExceeded, "timeout"},
	} {
		if errors.Is(err, c.err) {
			return c.name
		}
	}
	return "_OTHER"
}

// message is the conventions' shape of gen_ai.input.messages and
// gen_ai.output.messages entries (role and text parts).
type message struct {
	Role         string `json:"role"`
	Parts        []part `json:"parts"`
	FinishReason string `json:"finish_reason,omitempty"`
}

type part struct {
	Type    string `json:"type"`
	Content string `json:"content"`
}

func inputMessages(msgs []llm.Message, scrub func(string) string) string {
	out := make([]message, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, message{Role: m.Role, Parts: []part{{Type: "text", Content: scrubbed(scrub, m.Content)}}})
	}
	b, _ := json.Marshal(out)
	return string(b)
}

func outputMessage(content string, scrub func(string) string) string {
	b, _ := json.Marshal([]message{{Role: llm.RoleAssistant, Parts: []part{{Type: "text", Content: scrubbed(scrub, content)}}, FinishReason: "stop"}})
	return string(b)
}

func scrubbed(scrub func(string) string, s string) string {
	if scrub == nil {
		return s
	}
	return scrub(s)
}

// clip bounds a text recorded in a span.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
