package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/mas-mcp/mas-mcp/llm"
)

// runStep executes one step and applies its output (spec §6.1 step_action:
// route to the executor, execute, sync state).
func (a *agent) runStep(ctx context.Context, step StepState, view AgentState) {
	s := a.sys
	var out *Output
	ctx, span := s.traceStep(ctx, &view, &step)
	exec, err := s.route(&view, &step)
	if err != nil {
		out = &Output{Err: err}
	} else {
		// An LLM outage the call waits out shows on the agent.
		ctx = llm.WithOutageObserver(ctx, &stepOutage{a: a, step: &step})
		out = exec.Execute(ctx, &ExecInput{Agent: view, Step: step, View: s, Operator: s})
		if out == nil {
			out = &Output{Err: errors.New("executor returned no output")}
		}
	}
	out, cancelled := a.stepReturned(&step, out, ctx.Err() != nil)
	endStep(span, out, cancelled)
	s.apply(a, step, out, cancelled)
	s.meter(a.id, &step, &view, out)
	a.notRunning()
}

// route finds a step's executor, refusing skills the agent lacks and tools
// outside its tools (spec §8.2 Router).
func (s *System) route(ag *AgentState, step *StepState) (Executor, error) {
	switch step.Type {
	case StepSkill:
		if !slices.Contains(SkillNames, step.Executor) {
			return nil, errf(ErrInvalid, "executor %q: no such skill", step.Executor)
		}
		if !slices.Contains(ag.Skills, step.Executor) {
			return nil, errf(ErrForbidden, "executor %q: agent %s lacks this skill (its skills: %s)",
				step.Executor, ag.AgentID, strings.Join(ag.Skills, ", "))
		}
		exec := s.cfg.Skills[step.Executor]
		if exec == nil {
			return nil, errf(ErrInvalid, "executor %q: no executor is registered for this skill", step.Executor)
		}
		return exec, nil
	case StepTool:
		if !slices.Contains(ag.Tools, step.Executor) {
			return nil, errf(ErrForbidden, "executor %q: tool is not in agent %s's tools (%s)",
				step.Executor, ag.AgentID, strings.Join(ag.Tools, ", "))
		}
		if s.cfg.Tool == nil {
			return nil, errf(ErrInvalid, "executor %q: no downstream MCP tool servers are configured, so tool steps cannot run", step.Executor)
		}
		return s.cfg.Tool, nil
	default:
		return nil, errf(ErrInvalid, "type %q: must be %q or %q", step.Type, StepSkill, StepTool)
	}
}

// apply turns an executor's Output into changes of the owners (spec §2.5),
// finishes the step and keeps the agent moving in its stage.
func (s *System) apply(a *agent, step StepState, out *Output, cancelled bool) {
	// Everything an executor produced is bounded as it is taken in.
	// (the step's result is bounded as it is stored, in finishStepLocked)
	result := map[string]any{}
	for k, v := range out.Result {
		result[k] = v
	}
	if out.Completion != nil {
		c := s.clipText(*out.Completion)
		out.Completion = &c
	}
	if m := out.SendMessage; m != nil {
		m.Message = s.clipText(m.Message)
	}
	failure := out.Err
	if failure == nil && out.Usage.Calls > 0 {
		s.refused.answered()
	}

	// Agent-local effects first: memory, usage, planned steps.
	applies, failure := a.applyOwn(&step, out, cancelled, failure, result)
	if !applies {
		s.addTaskUsage(step.TaskID, out)
		return
	}

	// Effects on other owners (SyncState).
	var notices []Message
	if failure == nil {
		failure = s.applyShared(a, &step, out, result)
	}

	state := StateFinished
	if failure != nil {
		state = StateFailed
		result["error"] = failure.Error()
	}
	agentState := AgentWorking
	completion := out.Completion
	if failure != nil {
		agentState = AgentFailed
		completion = nil
	} else if completion != nil {
		agentState = AgentFinished
	}

	summaryGaveUp, role := a.tally(&step, failure)
	if summaryGaveUp {
		text := s.text("summary_failed", map[string]any{"Reason": failure.Error()})
		completion = &text
	}

	// The task learns the outcome first, then the step is marked done: a
	// crash in between leaves the step running, to be run again (and the
	// task takes a step's report once, by its step ID).
	if t, ok := s.task(step.TaskID); ok {
		report := func() error {
			why := ""
			if failure != nil {
				why = Truncate(failure.Error(), 300)
			}
			info := s.text("shared_info_step", map[string]any{"Executor": step.Executor, "State": state, "Reason": why})
			var err error
			notices, err = t.report(stepReport{
				StageID: step.StageID, AgentID: a.id, Role: role, StepID: step.StepID,
				AgentState: agentState, SharedInfo: info, Completion: completion, Usage: out.Usage,
			})
			return err
		}
		if err := report(); err != nil {
			// The task could not store the outcome: the step fails
			// visibly, and the task learns that instead.
			failure = fmt.Errorf("the step's outcome could not be stored in its task: %w", err)
			state, agentState, completion, summaryGaveUp = StateFailed, AgentFailed, nil, false
			result = map[string]any{"error": failure.Error()}
			if err := report(); err != nil {
				s.log.Error("store: step report refused twice", "task", step.TaskID, "step", step.StepID, "err", err)
			}
		}
	}
	lost := a.finishStep(&step, state, result)
	s.log.Debug("step done", "agent", a.id, "step", step.StepID, "executor", step.Executor, "state", state, "err", failure)
	s.deliver(notices...)
	s.releaseLost(a, lost...)
	if failure != nil {
		s.refusal(a, &step, failure)
	}
	if summaryGaveUp {
		return
	}
	s.keepMoving(a, &step, failure)
}

func (s *System) addTaskUsage(taskID string, out *Output) {
	if out.Usage.Calls == 0 {
		return
	}
	if t, ok := s.task(taskID); ok {
		t.addUsage(out.Usage)
	}
}

// keepMovingHook, set by tests only, runs between keepMoving's look at the
// stage and its taking the agent's mutex (the window a stage can end in).
var keepMovingHook func(a *agent, step *StepState)

// keepMoving is the progress guard (beyond the spec): an agent allocated to
// a running stage, not finished in it, with no pending step and no wait in
// it, gets a reflection (or, past the reflection budget, a summary), so a
// failed step or an empty plan never leaves a stage stuck.
func (s *System) keepMoving(a *agent, step *StepState, failure error) {
	if step.StageID == NoRelative {
		return
	}
	t, ok := s.task(step.TaskID)
	if !ok {
		return
	}
	st := t.status(step.StageID, a.id)
	if st.base || !st.running || !st.allocated || st.state == AgentFinished {
		return
	}
	if hook := keepMovingHook; hook != nil {
		hook(a, step)
	}
	a.guardStage(step, failure)
}

// applyShared applies the parts of an output that change other owners:
// messages, task and agent management, queries (spec §2.5).
func (s *System) applyShared(a *agent, step *StepState, out *Output, result map[string]any) error {
	if om := out.SendMessage; om != nil {
		m, note, err := s.sendFromAgent(a, step, om)
		if err != nil {
			return err
		}
		result["message_id"] = m.MessageID
		if m.Waiting != nil {
			result["waiting"] = m.Waiting
		}
		if note != "" {
			result["note"] = note
		}
	}
	if ti := out.TaskInstruction; ti != nil {
		ti.AgentID = a.id
		res, err := s.taskInstruction(a.id, *ti, step.StepID)
		if err != nil {
			return err
		}
		result["instruction_result"] = res
	}
	if ai := out.AgentInstruction; ai != nil {
		ai.AgentID = a.id
		res, err := s.agentInstruction(a.id, *ai, step.StepID)
		if err != nil {
			return err
		}
		result["instruction_result"] = res
	}
	if q := out.AskInfo; q != nil {
		if err := s.askFromAgent(a, step, *q); err != nil {
			return err
		}
	}
	if td := out.NeedToolDecision; td != nil {
		req := *td
		req.AgentID = a.id
		if req.TaskID == "" {
			req.TaskID, req.StageID = step.TaskID, step.StageID
		}
		s.deliver(s.instruction(step.StepID+"/tool_decision", req.TaskID, req.StageID, a.id, "", &Instruction{AddToolDecision: &req}))
	}
	return nil
}
