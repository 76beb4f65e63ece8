package engine

import (
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
	operatorID  string // who stopped it: told if its instruction goes nowhere
	stepID      string
	reason      string
	instruction string // "" for a plain cancel
}

// Interrupt cancels the agent's running step and queues the operator's
// instruction as its next step. It returns the interrupted step's ID.
func (s *System) Interrupt(operatorID, agentID, reason, instruction string) (string, error) {
	reason, instruction = s.Scrub(reason), s.Scrub(instruction)
	if strings.TrimSpace(instruction) == "" {
		return "", errf(ErrInvalid, "instruction: is empty; say what the agent should do instead")
	}
	return operatorAction[string](s, operatorID, s.runningTask(agentID), "interrupt", stopInput{agentID, "", reason, instruction})(s.stopStep(operatorID, agentID, "", reason, instruction))
}

// CancelStep cancels one running tool step of an agent without steering
// it: the step fails with "cancelled by the operator".
func (s *System) CancelStep(operatorID, agentID, stepID, reason string) error {
	stepID, reason = s.Scrub(stepID), s.Scrub(reason)
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
	runID, runTask := a.runningStep()
	if runID != "" {
		if err := s.MayOperate(operatorID, runTask); err != nil {
			if !s.Visible(operatorID, runTask) {
				// Another operator's task: its ID and owner are not the
				// caller's to learn.
				return "", errf(ErrForbidden, "agent_id %q: its running step belongs to a task you may not operate (a task is operated by its owner, operators it is shared with and admins)", agentID)
			}
			return "", err
		}
	}
	stepID, err := a.requestStop(operatorID, runID, stepID, reason, instruction)
	if err != nil {
		return "", err
	}
	s.log.Info("step stopped by the operator", "agent", agentID, "step", stepID, "operator", operatorID, "steer", instruction != "")
	return stepID, nil
}
