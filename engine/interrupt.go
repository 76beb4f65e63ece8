package engine

import (
	"errors"
	"strings"
)

// Interrupting (beyond the spec; seed 003's handle_interrupt, spec §6.2):
// an operator stops an agent's running step and steers it. The step's
// context is cancelled — an LLM call ends, a downstream tool call is
// cancelled (the MCP client sends notifications/cancelled) — and the step
// is recorded failed with "interrupted" and the operator's reason. The
// operator's instruction becomes the agent's next step, a process_message
// in the same task and stage, so the agent re-plans with it. Cancelling a
// single running tool call fails that step with "cancelled by the
// operator" and lets the agent carry on as after any failed step.

// stopRequest is an operator's stop of an agent's running step.
type stopRequest struct {
	stepID      string
	reason      string
	instruction string // "" for a plain cancel
}

// Interrupt cancels the agent's running step and queues the operator's
// instruction as its next step. It returns the interrupted step's ID.
func (s *System) Interrupt(operatorID, agentID, reason, instruction string) (string, error) {
	if strings.TrimSpace(instruction) == "" {
		return "", errf(ErrInvalid, "instruction: is empty; say what the agent should do instead")
	}
	return operatorAction[string](s, operatorID, s.runningTask(agentID), "interrupt", stopInput{agentID, "", reason, instruction})(s.stopStep(operatorID, agentID, "", reason, instruction))
}

// CancelStep cancels one running tool step of an agent without steering
// it: the step fails with "cancelled by the operator".
func (s *System) CancelStep(operatorID, agentID, stepID, reason string) error {
	if strings.TrimSpace(stepID) == "" {
		return errf(ErrInvalid, "step_id: is empty")
	}
	_, err := operatorAction[string](s, operatorID, s.runningTask(agentID), "cancel_step", stopInput{agentID, stepID, reason, ""})(s.stopStep(operatorID, agentID, stepID, reason, ""))
	return err
}

func (s *System) stopStep(operatorID, agentID, stepID, reason, instruction string) (string, error) {
	op, ok := s.agent(operatorID)
	if !ok || op.kind != KindHuman {
		return "", errf(ErrForbidden, "only operators may interrupt agents")
	}
	a, ok := s.agent(agentID)
	if !ok {
		return "", errf(ErrNotFound, "agent_id %q: no such agent", agentID)
	}
	if a.kind != KindLLM {
		return "", errf(ErrInvalid, "agent_id %q: is a HumanAgent, which runs no steps", agentID)
	}
	// The operator must be allowed on the running step's task (read
	// before taking the agent's mutex: no path holds two owners').
	a.mu.Lock()
	runID, runTask := a.running, a.runningKey.task
	a.mu.Unlock()
	if runID != "" {
		if err := s.MayOperate(operatorID, runTask); err != nil {
			return "", err
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.running != runID {
		return "", errf(ErrInvalid, "agent_id %q: its running step changed meanwhile; try again", agentID)
	}
	running := a.stepLocked(a.running)
	switch {
	case running == nil:
		return "", errf(ErrInvalid, "agent_id %q: runs no step now (send_message reaches it)", agentID)
	case stepID != "" && stepID != running.StepID:
		return "", errf(ErrInvalid, "step_id %q: is not the step agent %s runs now (%s)", stepID, agentID, running.StepID)
	case stepID != "" && running.Type != StepTool:
		return "", errf(ErrInvalid, "step_id %q: is a %s step, not a tool call: interrupt the agent instead", stepID, running.Executor)
	case a.stopRun != nil:
		return "", errf(ErrInvalid, "agent_id %q: its step %s is being stopped already", agentID, running.StepID)
	}
	a.stopRun = &stopRequest{stepID: running.StepID, reason: strings.TrimSpace(reason), instruction: strings.TrimSpace(instruction)}
	if a.cancelRun != nil {
		a.cancelRun()
	}
	s.log.Info("step stopped by the operator", "agent", agentID, "step", running.StepID, "operator", operatorID, "steer", instruction != "")
	return running.StepID, nil
}

// takeStopLocked returns and clears an operator's stop of the step that
// just ran, if any. a.mu must be held.
func (a *agent) takeStopLocked(stepID string) *stopRequest {
	r := a.stopRun
	if r == nil || r.stepID != stepID {
		return nil
	}
	a.stopRun = nil
	return r
}

// stoppedLocked turns an executor's output into the operator's stop: the
// step fails with the reason, and an interrupt queues the instruction
// next. A step that completed before the stop reached it keeps its
// outcome (a tool call may have acted already); the instruction is still
// queued. a.mu must be held.
func (a *agent) stoppedLocked(step *StepState, r *stopRequest, out *Output) *Output {
	what := "cancelled by the operator"
	if r.instruction != "" {
		what = "interrupted by the operator"
	}
	if r.reason != "" {
		what += ": " + r.reason
	}
	if r.instruction != "" {
		data := map[string]any{"Reason": r.reason, "Instruction": r.instruction}
		a.addStepsLocked(step.TaskID, step.StageID, []StepSpec{{
			StepIntention: a.sys.text("interrupt_intention", data),
			Type:          StepSkill,
			Executor:      SkillProcessMessage,
			TextContent:   a.sys.text("interrupt_text", data),
		}}, true, "")
	}
	if out.Err == nil {
		return out
	}
	return &Output{Err: errors.New(what), Usage: out.Usage, Result: map[string]any{"interrupted": true}}
}
