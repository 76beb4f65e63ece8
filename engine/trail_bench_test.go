package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/prompts"
	"github.com/mas-mcp/mas-mcp/skills"
	"github.com/mas-mcp/mas-mcp/store"
)

// BenchmarkTrailStepOverhead is BenchmarkStepOverhead with the trail off,
// in memory, and durable (the store's trail on an embedded NATS server in
// a temporary directory, fsync on every write): what recording every LLM
// call, message and step end adds to the engine's time per step.
func BenchmarkTrailStepOverhead(b *testing.B) {
	const steps, rounds = 50, 10
	for _, mode := range []string{"off", "memory", "durable"} {
		b.Run(mode, func(b *testing.B) {
			var tr engine.Trail
			switch mode {
			case "memory":
				tr = engine.NewMemoryTrail()
			case "durable":
				st, err := store.Open(context.Background(), store.Options{DataDir: b.TempDir()})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { st.Close() })
				t, err := st.OpenTrail(context.Background(), store.TrailOptions{})
				if err != nil {
					b.Fatal(err)
				}
				tr = t
			}
			var all []time.Duration
			for b.Loop() {
				for range rounds {
					all = append(all, stepIntervalsOn(b, steps, trailBenchSystem(b, fakellm.NewInstant(workerBrain(steps, 0)), tr))...)
				}
			}
			b.ReportMetric(float64(percentile(all, 0.5).Microseconds()), "p50-µs/step")
			b.ReportMetric(float64(percentile(all, 0.99).Microseconds()), "p99-µs/step")
		})
	}
}

// trailBenchSystem is benchSystemOn with tr (nil: off) given to the skills
// and the engine.
func trailBenchSystem(b *testing.B, fake *fakellm.Instant, tr engine.Trail) *engine.System {
	b.Helper()
	set, err := prompts.Load("en", "")
	if err != nil {
		b.Fatal(err)
	}
	execs, err := skills.Executors(skills.Config{LLM: fake, Prompts: set, Trail: tr})
	if err != nil {
		b.Fatal(err)
	}
	sys, err := engine.New(engine.Config{
		Texts: set, Skills: execs, SkillGuides: set.SkillGuides(), Templates: skills.Templates(set),
		StageStepBudget: 1000, StageReflectionBudget: 1000, Trail: tr,
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := sys.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sys.Close() })
	return sys
}
