package engine

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/prompts"
)

// BenchmarkMessageHop measures the engine's message hop: from applying a
// send_message output (validation, conversation log, delivery) to the
// receiver's step being queued. Target: p99 under 1 ms.
func BenchmarkMessageHop(b *testing.B) {
	set, err := prompts.Load("en", "")
	if err != nil {
		b.Fatal(err)
	}
	// The receiver digests instantly and says so: each hop is measured with
	// the receiver keeping up, as agents do, not with a queue thousands deep
	// competing for the same two cores.
	digested := make(chan struct{}, 1)
	instant := ExecutorFunc(func(context.Context, *ExecInput) *Output {
		digested <- struct{}{}
		return &Output{}
	})
	sys, err := New(Config{Texts: set, Skills: map[string]Executor{SkillProcessMessage: instant}})
	if err != nil {
		b.Fatal(err)
	}
	// The base task's manager comes from a template.
	sys.cfg.Templates = []AgentConfig{{Template: "manager", Name: "manager", Role: "manager", Skills: []string{SkillTaskManager}}}
	if err := sys.Start(); err != nil {
		b.Fatal(err)
	}
	defer sys.Close()
	from, _ := sys.CreateAgent(AgentConfig{Name: "from", Role: "r"})
	to, _ := sys.CreateAgent(AgentConfig{Name: "to", Role: "r"})
	for _, id := range []string{from, to} {
		sys.joinTask(sys.baseTaskID, id)
	}
	sender, _ := sys.agent(from)
	step := &StepState{TaskID: sys.baseTaskID, StageID: sys.baseStageID, AgentID: from}
	om := &OutgoingMessage{Receiver: StringList{to}, Message: "hello", StageRelative: NoRelative}
	// Each iteration sends a burst, so that even -benchtime=1x gives a
	// distribution.
	const burst = 2000
	var hops []time.Duration
	for b.Loop() {
		for range burst {
			// Each send is a step of its own: its message ID derives from
			// the step's, and a receiver takes an ID once.
			step.StepID = newID()
			start := time.Now()
			if _, _, err := sys.sendFromAgent(sender, step, om); err != nil {
				b.Fatal(err)
			}
			hops = append(hops, time.Since(start))
			<-digested
		}
	}
	slices.Sort(hops)
	b.ReportMetric(float64(hops[len(hops)/2].Nanoseconds())/1000, "p50-µs/hop")
	b.ReportMetric(float64(hops[len(hops)*99/100].Nanoseconds())/1000, "p99-µs/hop")
}
