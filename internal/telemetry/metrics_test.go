package telemetry_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"

	"github.com/mas-mcp/mas-mcp/internal/telemetry"
	"github.com/mas-mcp/mas-mcp/server"
)

// point is one exported data point: its attributes and its value (a sum's
// or a gauge's value, a histogram's count).
type point struct {
	attrs map[string]string
	value float64
}

// points flattens what was exported, by metric name; with cumulative
// temporality the last batch holds the totals.
func points(batches []*metricspb.ResourceMetrics) map[string][]point {
	out := map[string][]point{}
	if len(batches) == 0 {
		return out
	}
	last := batches[len(batches)-1]
	attrs := func(kvs []*commonpb.KeyValue) map[string]string {
		m := map[string]string{}
		for _, kv := range kvs {
			m[kv.GetKey()] = kv.GetValue().GetStringValue()
		}
		return m
	}
	for _, sm := range last.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case *metricspb.Metric_Sum:
				for _, p := range d.Sum.DataPoints {
					out[m.Name] = append(out[m.Name], point{attrs(p.Attributes), float64(p.GetAsInt()) + p.GetAsDouble()})
				}
			case *metricspb.Metric_Gauge:
				for _, p := range d.Gauge.DataPoints {
					out[m.Name] = append(out[m.Name], point{attrs(p.Attributes), float64(p.GetAsInt()) + p.GetAsDouble()})
				}
			case *metricspb.Metric_Histogram:
				for _, p := range d.Histogram.DataPoints {
					out[m.Name] = append(out[m.Name], point{attrs(p.Attributes), float64(p.Count)})
				}
			}
		}
	}
	return out
}

// sum adds the values of the points whose attributes include want.
func sum(ps []point, want map[string]string) float64 {
	total := 0.0
next:
	for _, p := range ps {
		for k, v := range want {
			if p.attrs[k] != v {
				continue next
			}
		}
		total += p.value
	}
	return total
}

// TestMetrics runs the scripted task and checks what the OTLP export and
// the Prometheus endpoint (behind /api's token) report: LLM calls and
// tokens by model and agent, steps by executor and outcome, tool calls by
// server, MCP requests both ways, the queue gauges.
func TestMetrics(t *testing.T) {
	tel, rcv := setupWith(t, false, telemetry.Config{ServiceVersion: "test", Prometheus: true})
	r := runTask(t)
	if err := tel.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	ps := points(rcv.Metrics())
	calls := r.LLM.Calls()
	worker := 0
	for _, c := range calls {
		if c.AgentName == "worker" {
			worker++
		}
	}
	checks := []struct {
		metric string
		attrs  map[string]string
		want   float64 // -1: any positive value
	}{
		{telemetry.MetricLLMCalls, map[string]string{"gen_ai.request.model": "fake-model", "mas.outcome": "ok"}, float64(len(calls))},
		{telemetry.MetricLLMCalls, map[string]string{"gen_ai.agent.name": "worker"}, float64(worker)},
		{telemetry.MetricLLMDuration, map[string]string{"gen_ai.request.model": "fake-model"}, float64(len(calls))},
		{telemetry.MetricLLMTokens, map[string]string{"gen_ai.agent.name": "worker", "gen_ai.token.type": "input"}, -1},
		{telemetry.MetricLLMTokens, map[string]string{"gen_ai.agent.name": "worker", "gen_ai.token.type": "output"}, -1},
		{telemetry.MetricSteps, map[string]string{"mas.step.executor": "fx", "mas.step.type": "tool", "mas.outcome": "ok"}, 1},
		{telemetry.MetricSteps, map[string]string{"mas.step.executor": "summary", "mas.outcome": "ok"}, -1},
		{telemetry.MetricToolCalls, map[string]string{"mas.tool.server": "fx", "mas.outcome": "ok"}, 1},
		{telemetry.MetricMCPServer, map[string]string{"mcp.method.name": "tools/call", "gen_ai.tool.name": "add_task"}, 1},
		{telemetry.MetricMCPClient, map[string]string{"mcp.method.name": "tools/call", "gen_ai.tool.name": "echo", "mas.tool.server": "fx"}, 1},
		{telemetry.MetricAgents, map[string]string{"mas.agent.state": "idle"}, 2}, // the manager and the worker
	}
	for _, c := range checks {
		got := sum(ps[c.metric], c.attrs)
		if c.want < 0 && got <= 0 || c.want >= 0 && got != c.want {
			t.Errorf("%s%v = %v, want %v (points: %v)", c.metric, c.attrs, got, c.want, ps[c.metric])
		}
	}
	if _, ok := ps[telemetry.MetricQueueDepth]; !ok {
		t.Errorf("no %s exported", telemetry.MetricQueueDepth)
	}
	cached := false
	for _, p := range ps[telemetry.MetricLLMTokens] {
		cached = cached || p.attrs["gen_ai.token.type"] == telemetry.TokenCached && p.attrs["gen_ai.agent.name"] == "worker"
	}
	if !cached {
		t.Errorf("no cached-token count for the worker: %v", ps[telemetry.MetricLLMTokens])
	}

	// /metrics: the same figures, behind the token /api asks for.
	srv, err := server.New(server.Config{System: r.Sys, Logger: r.Log, HTTP: server.HTTPConfig{
		Tokens: map[string]string{"op-token-0123456789abcdef": r.Sys.OperatorID()}, Metrics: tel.MetricsHandler(),
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	get := func(token string) (int, string) {
		req, _ := http.NewRequest("GET", hs.URL+"/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := hs.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, _ := get(""); code != http.StatusUnauthorized {
		t.Errorf("/metrics without a token: %d, want 401", code)
	}
	if code, _ := get("wrong"); code != http.StatusUnauthorized {
		t.Errorf("/metrics with a wrong token: %d, want 401", code)
	}
	code, body := get("op-token-0123456789abcdef")
	if code != http.StatusOK {
		t.Fatalf("/metrics with the operator's token: %d %s", code, body)
	}
	for _, want := range []string{"mas_llm_calls_total{", `gen_ai_agent_name="worker"`, "mas_tool_calls_total{", "gen_ai_client_operation_duration_seconds_bucket{", "mas_queue_depth"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
