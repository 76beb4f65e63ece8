package telemetry

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Attributes of our own (the semantic conventions have none for them).
const (
	KeyTaskID       = attribute.Key("mas.task.id")
	KeyStageID      = attribute.Key("mas.stage.id")
	KeyStepID       = attribute.Key("mas.step.id")
	KeyStepType     = attribute.Key("mas.step.type")
	KeyStepExecutor = attribute.Key("mas.step.executor")
	KeyOutcome      = attribute.Key("mas.outcome")
	KeyToolServer   = attribute.Key("mas.tool.server")
	KeyAgentState   = attribute.Key("mas.agent.state")
)

// Outcomes of steps, tool calls and LLM calls (KeyOutcome).
const (
	OutcomeOK        = "ok"
	OutcomeError     = "error"
	OutcomeCancelled = "cancelled"
)

// Metric names. Those of the semantic conventions keep their names; ours
// start with "mas.".
const (
	MetricLLMDuration   = "gen_ai.client.operation.duration"
	MetricLLMTokenUsage = "gen_ai.client.token.usage"
	MetricLLMCalls      = "mas.llm.calls"
	MetricLLMTokens     = "mas.llm.tokens"
	MetricSteps         = "mas.steps"
	MetricStepDuration  = "mas.step.duration"
	MetricToolCalls     = "mas.tool.calls"
	MetricMCPClient     = "mcp.client.operation.duration"
	MetricMCPServer     = "mcp.server.operation.duration"
	MetricQueueDepth    = "mas.queue.depth"
	MetricAgents        = "mas.agents"
)

// Token types of MetricLLMTokens (gen_ai.token.type): the conventions'
// input and output, and the part of the input served from the endpoint's
// prompt cache.
const (
	TokenInput  = "input"
	TokenOutput = "output"
	TokenCached = "cached_input"
)

// durationBuckets are the conventions' advice for GenAI and MCP durations
// (seconds).
var durationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}

// instruments are created once per Setup.
type instruments struct {
	meter         metric.Meter
	llmDuration   metric.Float64Histogram
	llmTokenUsage metric.Int64Histogram
	llmCalls      metric.Int64Counter
	llmTokens     metric.Int64Counter
	steps         metric.Int64Counter
	stepDuration  metric.Float64Histogram
	toolCalls     metric.Int64Counter
	mcpClient     metric.Float64Histogram
	mcpServer     metric.Float64Histogram
	sets          sets
}

func newInstruments(m metric.Meter) (*instruments, error) {
	in := &instruments{meter: m}
	var err error
	seconds := func(name, desc string) metric.Float64Histogram {
		h, e := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(durationBuckets...))
		if e != nil && err == nil {
			err = fmt.Errorf("telemetry: instrument %s: %w", name, e)
		}
		return h
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, e := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if e != nil && err == nil {
			err = fmt.Errorf("telemetry: instrument %s: %w", name, e)
		}
		return c
	}
	in.llmDuration = seconds(MetricLLMDuration, "Duration of LLM chat calls, retries included.")
	var e error
	in.llmTokenUsage, e = m.Int64Histogram(MetricLLMTokenUsage, metric.WithUnit("{token}"), metric.WithDescription("Tokens used per LLM call, by gen_ai.token.type."),
		metric.WithExplicitBucketBoundaries(1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576))
	if e != nil {
		err = fmt.Errorf("telemetry: instrument %s: %w", MetricLLMTokenUsage, e)
	}
	in.llmCalls = counter(MetricLLMCalls, "{call}", "LLM chat calls by model, agent and outcome.")
	in.llmTokens = counter(MetricLLMTokens, "{token}", "LLM tokens by model, agent and gen_ai.token.type (input, output, cached_input).")
	in.steps = counter(MetricSteps, "{step}", "Agent steps run, by executor (skill or tool server), type and outcome.")
	in.stepDuration = seconds(MetricStepDuration, "Duration of agent steps.")
	in.toolCalls = counter(MetricToolCalls, "{call}", "Downstream MCP tool calls by server and outcome.")
	in.mcpClient = seconds(MetricMCPClient, "Duration of MCP requests sent to downstream servers.")
	in.mcpServer = seconds(MetricMCPServer, "Duration of MCP requests served.")
	return in, err
}

// Queue is what the engine reports for its gauges.
type Queue struct {
	// Queued counts the steps waiting in the agents' todo lists.
	Queued int
	// Agents counts agents by working state (idle, working, waiting, paused).
	Agents map[string]int
}

// ObserveQueue reports read() as the queue-depth and agents gauges at
// every collection. It returns the function that stops it (a no-op when
// metrics are off).
func ObserveQueue(read func() Queue) (stop func()) {
	st := load()
	if st == nil || st.inst == nil {
		return func() {}
	}
	m := st.inst.meter
	depth, err1 := m.Int64ObservableGauge(MetricQueueDepth, metric.WithUnit("{step}"), metric.WithDescription("Steps waiting in the agents' todo lists."))
	agents, err2 := m.Int64ObservableGauge(MetricAgents, metric.WithUnit("{agent}"), metric.WithDescription("Agents by working state (waiting: held by a step lock)."))
	if err1 != nil || err2 != nil {
		return func() {}
	}
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		q := read()
		o.ObserveInt64(depth, int64(q.Queued))
		for state, n := range q.Agents {
			o.ObserveInt64(agents, int64(n), metric.WithAttributes(KeyAgentState.String(state)))
		}
		return nil
	}, depth, agents)
	if err != nil {
		return func() {}
	}
	return func() { _ = reg.Unregister() }
}

func secondsSince(t time.Time) float64 { return time.Since(t).Seconds() }

// sets caches the attribute sets of metric recordings: building a set
// sorts and copies its attributes, and an LLM call records seven
// measurements with a handful of sets that repeat across calls.
type sets struct{ m sync.Map } // string -> attribute.Set

// of returns the set of kvs, built once per key (a string that determines
// kvs).
func (c *sets) of(key string, kvs ...attribute.KeyValue) metric.MeasurementOption {
	if s, ok := c.m.Load(key); ok {
		return metric.WithAttributeSet(s.(attribute.Set))
	}
	s := attribute.NewSet(kvs...)
	c.m.Store(key, s)
	return metric.WithAttributeSet(s)
}
