package telemetry

import (
	"context"
	"encoding/json"
	"maps"
	"reflect"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// The MCP conventions carry W3C trace context in a request's params._meta
// (keys "traceparent" and "tracestate"); metaCarrier reads and writes it.
type metaCarrier map[string]any

func (c metaCarrier) Get(key string) string {
	s, _ := c[key].(string)
	return s
}

func (c metaCarrier) Set(key, value string) { c[key] = value }

func (c metaCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// mcpTarget is the span name's target and the attributes naming what a
// request is about (tool, prompt, resource).
func mcpTarget(method string, p mcp.Params) (string, []attribute.KeyValue) {
	attrs := []attribute.KeyValue{semconv.McpMethodNameKey.String(method)}
	if nilParams(p) {
		return "", attrs
	}
	switch p := p.(type) {
	case *mcp.CallToolParams:
		attrs = append(attrs, semconv.GenAIToolName(p.Name), semconv.GenAIOperationNameExecuteTool)
		return p.Name, attrs
	case *mcp.CallToolParamsRaw:
		attrs = append(attrs, semconv.GenAIToolName(p.Name), semconv.GenAIOperationNameExecuteTool)
		return p.Name, attrs
	case *mcp.GetPromptParams:
		attrs = append(attrs, semconv.GenAIPromptName(p.Name))
		return p.Name, attrs
	case *mcp.ReadResourceParams:
		// The URI is an attribute, never part of the span name (its
		// cardinality is unbounded).
		attrs = append(attrs, semconv.McpResourceURIKey.String(p.URI))
	}
	return "", attrs
}

func spanName(method, target string) string {
	if target == "" {
		return method
	}
	return method + " " + target
}

// mcpErrorType is error.type of a finished MCP request ("" when it
// succeeded): a JSON-RPC error, or a tool result flagged isError.
func mcpErrorType(res mcp.Result, err error) string {
	if err != nil {
		return "_OTHER"
	}
	if r, ok := res.(*mcp.CallToolResult); ok && r != nil && r.IsError {
		return "tool_error"
	}
	return ""
}

// nilParams reports whether p is absent: nil, or a nil pointer in the
// interface (whose GetMeta would dereference it).
func nilParams(p mcp.Params) bool {
	if p == nil {
		return true
	}
	v := reflect.ValueOf(p)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// ServerMiddleware is a receiving middleware for the MCP server: a SERVER
// span per incoming request or notification, continuing the trace whose
// context the client put in params._meta, and mcp.server.operation.duration.
// The session ID is left out of spans: on HTTP it grants the session.
func ServerMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		st := load()
		if st == nil {
			return next(ctx, method, req)
		}
		start := time.Now()
		p := req.GetParams()
		target, attrs := mcpTarget(method, p)
		var span trace.Span
		if st.tracer != nil {
			if !nilParams(p) {
				if meta := p.GetMeta(); meta != nil {
					ctx = w3c.Extract(ctx, metaCarrier(meta))
				}
			}
			ctx, span = st.tracer.Start(ctx, spanName(method, target), trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
		}
		res, err := next(ctx, method, req)
		if st.inst != nil {
			endMCP(span, st.inst.mcpServer, attrs, start, res, err)
		} else {
			endMCP(span, nil, attrs, start, res, err)
		}
		return res, err
	}
}

// ClientMiddleware is a sending middleware for the MCP client of one
// downstream server: a CLIENT span per outgoing request, whose trace
// context goes into the request's params._meta, and
// mcp.client.operation.duration.
func ClientMiddleware(server string) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			st := load()
			if st == nil {
				return next(ctx, method, req)
			}
			start := time.Now()
			p := req.GetParams()
			target, attrs := mcpTarget(method, p)
			attrs = append(attrs, KeyToolServer.String(server))
			var span trace.Span
			if st.tracer != nil {
				ctx, span = st.tracer.Start(ctx, spanName(method, target), trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
				if !nilParams(p) {
					// A copy: the caller's map is not ours to change.
					meta := maps.Clone(p.GetMeta())
					if meta == nil {
						meta = map[string]any{}
					}
					w3c.Inject(ctx, metaCarrier(meta))
					p.SetMeta(meta)
				}
			}
			res, err := next(ctx, method, req)
			if st.inst != nil {
				endMCP(span, st.inst.mcpClient, attrs, start, res, err)
			} else {
				endMCP(span, nil, attrs, start, res, err)
			}
			return res, err
		}
	}
}

func endMCPSpan(span trace.Span, errType string, err error) {
	if errType != "" {
		span.SetAttributes(semconv.ErrorTypeKey.String(errType))
		msg := errType
		if err != nil {
			msg = clip(err.Error(), 500)
		}
		span.SetStatus(codes.Error, msg)
	}
	span.End()
}

// lowCardinality drops the attributes that do not belong on metrics
// (resource URIs).
func lowCardinality(attrs []attribute.KeyValue) []attribute.KeyValue {
	out := attrs[:0:0]
	for _, a := range attrs {
		if a.Key != semconv.McpResourceURIKey {
			out = append(out, a)
		}
	}
	return out
}

// ToolSpan is a running tool call's span and metrics; nil when telemetry
// is off.
type ToolSpan struct {
	st     *state
	span   trace.Span
	server string
}

// StartTool starts an execute_tool span for a call of tool on a
// downstream server; args are recorded only with content capture on.
func StartTool(ctx context.Context, server, tool string, args any) (context.Context, *ToolSpan) {
	st := load()
	if st == nil {
		return ctx, nil
	}
	ts := &ToolSpan{st: st, server: server}
	if st.tracer != nil {
		attrs := []attribute.KeyValue{semconv.GenAIOperationNameExecuteTool, semconv.GenAIToolName(tool),
			semconv.GenAIToolType("extension"), KeyToolServer.String(server)}
		if st.capture {
			attrs = append(attrs, semconv.GenAIToolCallArgumentsKey.String(clip(jsonText(args), 16000)))
		}
		ctx, ts.span = st.tracer.Start(ctx, "execute_tool "+tool, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	}
	return ctx, ts
}

// End ends the tool call; result is recorded only with content capture on.
func (ts *ToolSpan) End(result any, err error) {
	if ts == nil {
		return
	}
	outcome := OutcomeOK
	if err != nil {
		outcome = OutcomeError
	}
	if ts.span != nil {
		if ts.st.capture && result != nil {
			ts.span.SetAttributes(semconv.GenAIToolCallResultKey.String(clip(jsonText(result), 16000)))
		}
		if err != nil {
			ts.span.SetAttributes(semconv.ErrorTypeKey.String("tool_error"))
			ts.span.SetStatus(codes.Error, clip(err.Error(), 500))
		}
		ts.span.End()
	}
	if in := ts.st.inst; in != nil {
		in.toolCalls.Add(context.Background(), 1, metric.WithAttributes(KeyToolServer.String(ts.server), KeyOutcome.String(outcome)))
	}
}

func jsonText(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// endMCP ends an MCP request's span (nil: tracing off) and records its
// duration in hist (nil: metrics off), with its error type if it failed.
func endMCP(span trace.Span, hist metric.Float64Histogram, attrs []attribute.KeyValue, start time.Time, res mcp.Result, err error) {
	et := mcpErrorType(res, err)
	if span != nil {
		endMCPSpan(span, et, err)
	}
	if hist == nil {
		return
	}
	if et != "" {
		attrs = append(attrs[:len(attrs):len(attrs)], semconv.ErrorTypeKey.String(et))
	}
	hist.Record(context.Background(), secondsSince(start), metric.WithAttributes(lowCardinality(attrs)...))
}
