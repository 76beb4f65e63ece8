package store

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/prompts"
	"github.com/mas-mcp/mas-mcp/skills"
)

// quickWorker answers a worker instantly: n quick_think steps, then summary.
func quickWorker(n int) func(*fakellm.Call) fakellm.Reply {
	plan := make([]map[string]string, n)
	for i := range plan {
		plan[i] = map[string]string{"step_intention": fmt.Sprint("step ", i), "type": "skill", "executor": "quick_think", "text_content": "go"}
	}
	planJSON := fakellm.JSON(plan)
	return func(c *fakellm.Call) fakellm.Reply {
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
		}
		return fakellm.Reply{Content: fakellm.Block("process_message", "ok")}
	}
}

// instantSystem starts a MAS on st (nil: memory only) whose LLM answers
// at once with h; mod adjusts the engine's config.
func instantSystem(b testing.TB, st engine.Store, h func(*fakellm.Call) fakellm.Reply, mod func(*engine.Config)) *engine.System {
	set, err := prompts.Load("en", "")
	if err != nil {
		b.Fatal(err)
	}
	execs, err := skills.Executors(skills.Config{LLM: fakellm.NewInstant(h), Prompts: set})
	if err != nil {
		b.Fatal(err)
	}
	cfg := engine.Config{Texts: set, Skills: execs, Templates: skills.Templates(set), Store: st}
	if mod != nil {
		mod(&cfg)
	}
	sys, err := engine.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := sys.Start(); err != nil {
		b.Fatal(err)
	}
	return sys
}

// stepTimes runs one worker through n steps on st (nil: memory only) and
// returns the gaps between its step completions.
func stepTimes(b testing.TB, st engine.Store, n int) []time.Duration {
	sys := instantSystem(b, st, quickWorker(n), func(c *engine.Config) {
		c.StageStepBudget, c.StageReflectionBudget = 1000, 1000
	})
	defer sys.Close()
	// One stage's events fit in a few thousand; a larger buffer would be
	// megabytes allocated, and collected, while steps are measured.
	sub := sys.Subscribe(1 << 12)
	defer sub.Close()
	runtime.GC() // what setting up left behind is collected before, not during
	op := sys.OperatorID()
	w, err := sys.CreateAgent(engine.AgentConfig{Template: "researcher", Name: "w"})
	if err != nil {
		b.Fatal(err)
	}
	task, err := sys.AddTask(op, engine.AddTaskRequest{TaskName: "bench", TaskIntention: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := sys.AgentInstruction(op, engine.AgentInstruction{Action: "add_task_participant", TaskID: task, Agents: []string{w}}); err != nil {
		b.Fatal(err)
	}
	if _, err := sys.TaskInstruction(op, engine.TaskInstruction{Action: "add_stage", TaskID: task,
		Stages: []engine.StageSpec{{StageIntention: "s", AgentAllocation: map[string]string{w: "work"}}}}); err != nil {
		b.Fatal(err)
	}
	var gaps []time.Duration
	var last time.Time
	for done := 0; done < n+3; {
		ev := <-sub.C
		if ev.Kind != engine.EventStepChanged || ev.AgentID != w || ev.Detail != engine.StateFinished {
			continue
		}
		if !last.IsZero() {
			gaps = append(gaps, ev.Time.Sub(last))
		}
		last = ev.Time
		done++
	}
	if d := sub.Dropped(); d > 0 {
		b.Fatalf("%d events dropped: the measured gaps are incomplete", d)
	}
	return gaps
}

func p50(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkStepOverheadDurable compares the time per step with the durable
// store (embedded NATS, fsync on every write) and in memory, with an
// instant LLM, and with --sync-interval (writes reach the OS at once, so a
// killed process loses nothing, but are fsynced every interval: an OS
// crash may lose the last one). Target: at most 0.5 ms added at p50.
func BenchmarkStepOverheadDurable(b *testing.B) {
	const steps = 50
	var mem, dur, interval []time.Duration
	durable := func(o Options) []time.Duration {
		o.DataDir = b.TempDir()
		st, err := Open(context.Background(), o)
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		return stepTimes(b, st, steps)
	}
	for b.Loop() {
		mem = append(mem, stepTimes(b, nil, steps)...)
		dur = append(dur, durable(Options{})...)
		interval = append(interval, durable(Options{SyncInterval: 100 * time.Millisecond})...)
	}
	b.ReportMetric(float64(p50(mem).Microseconds()), "mem-p50-µs/step")
	b.ReportMetric(float64(p50(dur).Microseconds()), "durable-p50-µs/step")
	b.ReportMetric(float64((p50(dur) - p50(mem)).Microseconds()), "added-p50-µs/step")
	b.ReportMetric(float64((p50(interval) - p50(mem)).Microseconds()), "interval-added-p50-µs/step")
}
