package telemetry_test

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/telemetry"
	"github.com/mas-mcp/mas-mcp/llm"
	"github.com/mas-mcp/mas-mcp/prompts"
	"github.com/mas-mcp/mas-mcp/skills"
)

// discard is a span exporter that drops what the SDK hands it: the SDK
// (sampling, attributes, batching) runs in full, the wire does not.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkStepTelemetry measures the engine's cost per step (as engine's
// BenchmarkStepOverhead: an instant in-process LLM, one agent running a
// stage of planned quick_think steps) with telemetry off, and on with the
// SDK recording every span (task, step, chat) and metric into a discarding
// exporter and a manual reader. Each iteration runs one stage off and one
// on, so a busy machine weighs on both alike. Reported per step: the
// process's CPU time (user+sys, the robust figure on a shared machine) and
// the median wall time between step completions, off and on, and the
// CPU overhead in percent.
func BenchmarkStepTelemetry(b *testing.B) {
	const steps = 50
	var wall [2][]time.Duration
	var cpu [2]time.Duration
	var n [2]int
	for b.Loop() {
		for mode := range 2 {
			var tel *telemetry.Telemetry
			if mode == 1 {
				var err error
				tel, err = telemetry.Setup(context.Background(), telemetry.Config{
					Getenv: func(string) string { return "" }, SpanExporter: discard{}, MetricReader: sdkmetric.NewManualReader(),
				})
				if err != nil || tel == nil {
					b.Fatal("setup:", err)
				}
			}
			ds, c := stageSteps(b, steps)
			cpu[mode] += c
			n[mode] += len(ds) + 1
			wall[mode] = append(wall[mode], ds...)
			_ = tel.Shutdown(context.Background())
		}
	}
	for mode, name := range []string{"off", "on"} {
		slices.Sort(wall[mode])
		b.ReportMetric(float64(wall[mode][len(wall[mode])/2].Nanoseconds())/1e3, "p50-µs/step-"+name)
		b.ReportMetric(float64(cpu[mode].Nanoseconds())/1e3/float64(n[mode]), "cpu-µs/step-"+name)
	}
	b.ReportMetric(100*(float64(cpu[1])/float64(n[1])/(float64(cpu[0])/float64(n[0]))-1), "cpu-%-added")
}

// cpuTime is the process's CPU time so far (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// answer is an llm.Client that always gives the same response.
type answer llm.Response

func (a answer) Complete(context.Context, *llm.Request) (*llm.Response, error) {
	r := llm.Response(a)
	return &r, nil
}

// BenchmarkStepHooks measures what telemetry adds to one step in
// isolation: the step span and metrics, and one chat call's span and
// metrics through the LLM observer (the next step's LLM answer costs
// nothing here), with the SDK on.
func BenchmarkStepHooks(b *testing.B) {
	tel, err := telemetry.Setup(context.Background(), telemetry.Config{
		Getenv: func(string) string { return "" }, SpanExporter: discard{}, MetricReader: sdkmetric.NewManualReader(),
	})
	if err != nil || tel == nil {
		b.Fatal("setup:", err)
	}
	defer func() { _ = tel.Shutdown(context.Background()) }()
	parent := telemetry.StartTask("", "3f1c5b8e-0000-4000-8000-000000000001", "bench")
	// A constant answer: fakellm keeps a log of every call, which would
	// weigh on a long loop.
	bare := answer{Content: "ok", Model: "fakellm", Usage: llm.Usage{PromptTokens: 1000, CompletionTokens: 50, CachedTokens: 512, Calls: 1}}
	fake := llm.Observed(bare, "openai", "fakellm")
	req := &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "- executor: quick_think\n- name: w\nthink"}}}
	b.Run("bare-chat", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = bare.Complete(context.Background(), req)
		}
	})
	b.Run("step+chat", func(b *testing.B) {
		b.ReportAllocs()
		c0, n := cpuTime(), 0
		defer func() { b.ReportMetric(float64((cpuTime()-c0).Nanoseconds())/float64(n), "cpu-ns/op") }()
		for b.Loop() {
			n++
			ctx, sp := telemetry.StartStep(context.Background(), telemetry.Step{
				TaskID: "t", StageID: "s", StepID: "st", TaskTraceParent: parent, AgentID: "a", AgentName: "w", Type: "skill", Executor: "quick_think",
			})
			_, _ = fake.Complete(ctx, req)
			sp.End(telemetry.OutcomeOK, nil)
		}
	})
}

// stageSteps runs one agent through a stage of n planned steps and returns
// the times between consecutive step completions and the CPU time the
// process spent from the stage's start to its last step's end.
func stageSteps(b *testing.B, n int) ([]time.Duration, time.Duration) {
	plan := make([]engine.StepSpec, n)
	for i := range plan {
		plan[i] = engine.StepSpec{StepIntention: fmt.Sprintf("step %d", i), Type: "skill", Executor: "quick_think", TextContent: "go"}
	}
	planJSON := fakellm.JSON(plan)
	fake := fakellm.NewInstant(func(c *fakellm.Call) fakellm.Reply {
		switch c.Skill {
		case "planning":
			if c.AgentName == "manager" {
				return fakellm.Reply{Content: fakellm.Block("planned_step", "[]")}
			}
			return fakellm.Reply{Content: fakellm.Block("planned_step", planJSON)}
		case "quick_think":
			return fakellm.Reply{Content: fakellm.Block("quick_think", "ok")}
		case "reflection":
			return fakellm.Reply{Content: fakellm.Block("reflection_step", "[]")}
		case "summary":
			return fakellm.Reply{Content: fakellm.Block("summary", "done")}
		case "process_message":
			return fakellm.Reply{Content: fakellm.Block("process_message", "ok")}
		}
		return fakellm.Reply{Status: 500}
	})
	set, err := prompts.Load("en", "")
	if err != nil {
		b.Fatal(err)
	}
	execs, err := skills.Executors(skills.Config{LLM: llm.Observed(fake, "openai", "fakellm"), Prompts: set})
	if err != nil {
		b.Fatal(err)
	}
	sys, err := engine.New(engine.Config{Texts: set, Skills: execs, SkillGuides: set.SkillGuides(), Templates: skills.Templates(set),
		StageStepBudget: 1000, StageReflectionBudget: 1000})
	if err != nil {
		b.Fatal(err)
	}
	if err := sys.Start(); err != nil {
		b.Fatal(err)
	}
	defer sys.Close()
	sub := sys.Subscribe(1 << 16)
	defer sub.Close()
	op := sys.OperatorID()
	res, err := sys.AgentInstruction(op, engine.AgentInstruction{Action: "init_new_agent", AgentConfig: &engine.AgentConfig{Template: "researcher", Name: "w"}})
	if err != nil {
		b.Fatal(err)
	}
	w := res.InitNewAgent.AgentID
	task, err := sys.AddTask(op, engine.AddTaskRequest{TaskName: "bench", TaskIntention: "benchmark"})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := sys.AgentInstruction(op, engine.AgentInstruction{Action: "add_task_participant", TaskID: task, Agents: []string{w}}); err != nil {
		b.Fatal(err)
	}
	c0 := cpuTime()
	if _, err := sys.TaskInstruction(op, engine.TaskInstruction{Action: "add_stage", TaskID: task,
		Stages: []engine.StageSpec{{StageIntention: "bench stage", AgentAllocation: map[string]string{w: "work"}}}}); err != nil {
		b.Fatal(err)
	}
	var out []time.Duration
	var last time.Time
	deadline := time.After(5 * time.Minute)
	for finished := 0; finished < n+3; { // planning, n steps, reflection, summary
		var ev engine.Event
		select {
		case ev = <-sub.C:
		case <-deadline:
			b.Fatalf("%d of %d steps finished", finished, n+3)
		}
		if ev.Kind != engine.EventStepChanged || ev.AgentID != w || ev.Detail != engine.StateFinished {
			continue
		}
		if !last.IsZero() {
			out = append(out, ev.Time.Sub(last))
		}
		last = ev.Time
		finished++
	}
	return out, cpuTime() - c0
}
