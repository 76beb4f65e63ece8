package engine

import (
	"context"

	"github.com/mas-mcp/mas-mcp/internal/telemetry"
)

// The engine's OpenTelemetry hooks (internal/telemetry; all of them do
// nothing when telemetry is off). A task's span is recorded once, when the
// task is created, and its traceparent is kept in TaskState.TraceParent;
// each step's span (invoke_agent) is its child, so one trace holds the
// whole task however long it lasts and across restarts (telemetry.StartTask
// says why no span stays open for a task's life).

// traceTask records a new task's span under parent (the add_task
// request's traceparent, or "") and returns the traceparent to keep.
func (s *System) traceTask(parent, taskID, name string) string {
	return telemetry.StartTask(parent, taskID, name)
}

// traceStep starts a step's span under its task's span; the returned
// context is the one the step runs under.
func (s *System) traceStep(ctx context.Context, ag *AgentState, step *StepState) (context.Context, *telemetry.StepSpan) {
	if !telemetry.Enabled() {
		return ctx, nil
	}
	parent := ""
	if t, ok := s.task(step.TaskID); ok {
		parent = t.traceParent()
	}
	return telemetry.StartStep(ctx, telemetry.Step{
		TaskID: step.TaskID, StageID: step.StageID, StepID: step.StepID, TaskTraceParent: parent,
		AgentID: ag.AgentID, AgentName: ag.Name, Type: step.Type, Executor: step.Executor,
	})
}

// endStep ends a step's span with the executor's outcome.
func endStep(sp *telemetry.StepSpan, out *Output, cancelled bool) {
	switch {
	case sp == nil:
	case cancelled:
		sp.End(telemetry.OutcomeCancelled, nil)
	case out.Err != nil:
		sp.End(telemetry.OutcomeError, out.Err)
	default:
		sp.End(telemetry.OutcomeOK, nil)
	}
}

// observeQueue reports the agents' todo lists and working states as
// gauges until the System closes.
func (s *System) observeQueue() {
	if !telemetry.Enabled() {
		return
	}
	stop := telemetry.ObserveQueue(func() telemetry.Queue {
		q := telemetry.Queue{Agents: map[string]int{}}
		for _, a := range s.allAgents() {
			if a.kind != KindLLM {
				continue
			}
			n, ws := a.queued()
			q.Queued += n
			q.Agents[ws]++
		}
		return q
	})
	s.goTracked(func() {
		<-s.ctx.Done()
		stop()
	})
}
