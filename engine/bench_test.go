package engine_test

import (
	"fmt"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/prompts"
	"github.com/mas-mcp/mas-mcp/skills"
)

// benchSystem is the whole stack on an in-process fake LLM (no HTTP), so
// what is measured is the engine and the skills: prompt assembly, parsing,
// state changes, message delivery.
func benchSystem(b *testing.B, h func(*fakellm.Call) fakellm.Reply) *engine.System {
	return benchSystemOn(b, fakellm.NewInstant(h))
}

// benchSystemOn is benchSystem on a given fake LLM.
func benchSystemOn(b *testing.B, fake *fakellm.Instant) *engine.System {
	b.Helper()
	set, err := prompts.Load("en", "")
	if err != nil {
		b.Fatal(err)
	}
	execs, err := skills.Executors(skills.Config{LLM: fake, Prompts: set})
	if err != nil {
		b.Fatal(err)
	}
	sys, err := engine.New(engine.Config{
		Texts: set, Skills: execs, SkillGuides: set.SkillGuides(), Templates: skills.Templates(set),
		StageStepBudget: 1000, StageReflectionBudget: 1000,
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

// workerBrain answers every worker skill instantly (after delay): a plan of
// n quick_think steps, then a reflection that ends with summary.
func workerBrain(n int, delay time.Duration) func(*fakellm.Call) fakellm.Reply {
	plan := make([]engine.StepSpec, n)
	for i := range plan {
		plan[i] = engine.StepSpec{StepIntention: fmt.Sprintf("step %d", i), Type: "skill", Executor: "quick_think", TextContent: "go"}
	}
	planJSON := fakellm.JSON(plan)
	return func(c *fakellm.Call) fakellm.Reply {
		r := fakellm.Reply{Delay: delay}
		switch c.Skill {
		case "planning":
			if c.AgentName == "manager" {
				r.Content = fakellm.Block("planned_step", "[]")
			} else {
				r.Content = fakellm.Block("planned_step", planJSON)
			}
		case "quick_think":
			r.Content = fakellm.Block("quick_think", "ok")
		case "reflection":
			r.Content = fakellm.Block("reflection_step", "[]")
		case "summary":
			r.Content = fakellm.Block("summary", "done")
		case "process_message":
			r.Content = fakellm.Block("process_message", "ok")
		default:
			r.Status = 500
		}
		return r
	}
}

// stageWith creates n worker agents and runs one stage allocated to all of
// them, as the operator would through its management actions.
func stageWith(b *testing.B, sys *engine.System, n int) (taskID string, agents []string) {
	op := sys.OperatorID()
	for i := range n {
		res, err := sys.AgentInstruction(op, engine.AgentInstruction{Action: "init_new_agent",
			AgentConfig: &engine.AgentConfig{Template: "researcher", Name: fmt.Sprintf("w%03d", i)}})
		if err != nil {
			b.Fatal(err)
		}
		agents = append(agents, res.InitNewAgent.AgentID)
	}
	taskID, err := sys.AddTask(op, engine.AddTaskRequest{TaskName: "bench", TaskIntention: "benchmark"})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := sys.AgentInstruction(op, engine.AgentInstruction{Action: "add_task_participant", TaskID: taskID, Agents: agents}); err != nil {
		b.Fatal(err)
	}
	alloc := map[string]string{}
	for _, a := range agents {
		alloc[a] = "work"
	}
	if _, err := sys.TaskInstruction(op, engine.TaskInstruction{Action: "add_stage", TaskID: taskID,
		Stages: []engine.StageSpec{{StageIntention: "bench stage", AgentAllocation: alloc}}}); err != nil {
		b.Fatal(err)
	}
	return taskID, agents
}

// waitStageDone blocks until every allocated agent submitted its summary.
// It counts "finished" stage events rather than reading snapshots: a task
// snapshot copies the task's whole log, and waiting must not cost what it
// measures.
func waitStageDone(b *testing.B, sys *engine.System, sub *engine.Subscription, taskID string, agents int) {
	deadline := time.After(5 * time.Minute)
	t0, _ := sys.Task(taskID)
	stageID := t0.StageList[0].StageID
	done := 0
	for done < agents {
		select {
		case ev := <-sub.C:
			if ev.Kind == engine.EventStageChanged && ev.TaskID == taskID && ev.StageID == stageID && ev.Detail == engine.AgentFinished {
				done++
			}
		case <-deadline:
			b.Fatal("stage did not complete")
		}
	}
	if t, _ := sys.Task(taskID); len(t.StageList[0].CompletionSummary) != agents {
		b.Fatalf("stage completions: %d, want %d", len(t.StageList[0].CompletionSummary), agents)
	}
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p)
	return s[i]
}

// BenchmarkStepOverhead measures the engine's time per step with an instant
// LLM: from one step's end to the next one's end on the same agent (pop,
// snapshot, prompt assembly, parsing, applying, events). Reported as p50
// and p99 in microseconds over the stage's planned steps, and apart from
// them the stage's last two steps (reflection over the whole stage, then
// the summary that completes the agent's part and tells the manager): they
// are 2 of every 52 steps, so mixed in they would be the p99 by
// themselves, a different kind of step rather than a tail.
func BenchmarkStepOverhead(b *testing.B) {
	const steps, rounds = 50, 10
	var planned, last []time.Duration
	// The first stage in a process pays for what is made once (templates
	// parsed, pools filled): not a step's cost.
	stepIntervals(b, steps)
	for b.Loop() {
		for range rounds {
			gaps := stepIntervals(b, steps)
			planned = append(planned, gaps[:len(gaps)-2]...)
			last = append(last, gaps[len(gaps)-2:]...)
		}
	}
	b.ReportMetric(float64(percentile(planned, 0.5).Microseconds()), "p50-µs/step")
	b.ReportMetric(float64(percentile(planned, 0.99).Microseconds()), "p99-µs/step")
	b.ReportMetric(float64(percentile(last, 0.5).Microseconds()), "stage-end-p50-µs/step")
	b.ReportMetric(float64(percentile(append(planned, last...), 0.99).Microseconds()), "p99-all-µs/step")
}

// stepIntervals runs one agent through a stage of n planned steps and
// returns the time between consecutive step completions.
func stepIntervals(b *testing.B, n int) []time.Duration {
	return stepIntervalsOn(b, n, benchSystem(b, workerBrain(n, 0)))
}

// stepIntervalsOn is stepIntervals on a given System (built on
// workerBrain(n, 0)).
func stepIntervalsOn(b *testing.B, n int, sys *engine.System) []time.Duration {
	defer sys.Close()
	// A stage's events fit in a few thousand; a larger buffer would be
	// megabytes allocated, and collected, while steps are measured.
	sub := sys.Subscribe(1 << 12)
	defer sub.Close()
	// What setting up left behind is collected before, not during.
	runtime.GC()
	taskID, agents := stageWith(b, sys, 1)
	var out []time.Duration
	var last time.Time
	// The stage learns of the summary before the summary step is marked
	// finished (a crash in between re-runs the step): watch for both here.
	stageDone := false
	deadline := time.After(5 * time.Minute)
	for finished := 0; finished < n+3 || !stageDone; { // planning, n steps, reflection, summary
		var ev engine.Event
		select {
		case ev = <-sub.C:
		case <-deadline:
			b.Fatalf("%d of %d steps finished, stage done: %v", finished, n+3, stageDone)
		}
		if ev.Kind == engine.EventStageChanged && ev.TaskID == taskID && ev.AgentID == agents[0] && ev.Detail == engine.AgentFinished {
			stageDone = true
		}
		if ev.Kind != engine.EventStepChanged || ev.AgentID != agents[0] || ev.Detail != engine.StateFinished {
			continue
		}
		if !last.IsZero() {
			out = append(out, ev.Time.Sub(last))
		}
		last = ev.Time
		finished++
	}
	if d := sub.Dropped(); d > 0 {
		b.Fatalf("%d events dropped: the measured gaps are incomplete", d)
	}
	if t, _ := sys.Task(taskID); len(t.StageList[0].CompletionSummary) != 1 {
		b.Fatalf("stage completions: %d, want 1", len(t.StageList[0].CompletionSummary))
	}
	return out
}

// BenchmarkIdleAgents creates 1,000 agents that have nothing to do and
// reports the memory each costs and the CPU the idle MAS uses in a second.
func BenchmarkIdleAgents(b *testing.B) {
	const n = 1000
	for b.Loop() {
		sys := benchSystem(b, workerBrain(0, 0))
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := range n {
			if _, err := sys.CreateAgent(engine.AgentConfig{Template: "researcher", Name: fmt.Sprintf("idle%d", i)}); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		used := (after.HeapAlloc + after.StackInuse) - (before.HeapAlloc + before.StackInuse)
		b.ReportMetric(float64(used)/n/1024, "KiB/agent")

		cpu0 := cpuTime()
		time.Sleep(time.Second)
		b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/1000, "idle-cpu-ms/s")
		_ = sys.Close()
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkParallelAgents runs 100 agents × 50 steps against a fake LLM that
// takes 50 ms per call, and reports wall time over the ideal (the longest
// agent's step count × 50 ms, since agents run in parallel and each runs its
// steps one at a time).
func BenchmarkParallelAgents(b *testing.B) {
	const agents, planned, delay = 100, 47, 50 * time.Millisecond
	// planning + 47 steps + reflection + summary = 50 LLM steps per agent
	const stepsPerAgent = planned + 3
	for b.Loop() {
		sys := benchSystem(b, workerBrain(planned, delay))
		sub := sys.Subscribe(1 << 16)
		start := time.Now()
		taskID, _ := stageWith(b, sys, agents)
		waitStageDone(b, sys, sub, taskID, agents)
		wall := time.Since(start)
		ideal := time.Duration(stepsPerAgent) * delay
		b.ReportMetric(wall.Seconds(), "wall-s")
		b.ReportMetric(wall.Seconds()/ideal.Seconds(), "x-ideal")
		sub.Close()
		_ = sys.Close()
	}
}
