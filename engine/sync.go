package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

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
		// An LLM outage the call waits out shows on the agent (a tool
		// step's too: a server's sampling request is an LLM call), and so
		// do an outage of a tool step's server (tool_outage.go) and a
		// question the step asks the operator (Ask).
		o := &stepOutage{a: a, step: &step}
		ctx = context.WithValue(llm.WithOutageObserver(ctx, o), askingStepKey{}, o)
		in := &ExecInput{Agent: view, Step: step, View: s, Operator: s}
		if step.Type == StepTool {
			in.ServerOutage = &stepServerOutage{a: a, step: &step}
		}
		out = exec.Execute(ctx, in)
		if out == nil {
			out = &Output{Err: errors.New("executor returned no output")}
		}
		if step.Type == StepTool && out.Err == nil {
			s.servers.answered(s, step.Executor)
		}
		// What a model or a tool produced is scrubbed before anything
		// (the step's span, a log line, the state) sees it.
		out = s.scrubOutput(out)
	}
	out, cancelled := a.stepReturned(&step, out, ctx.Err() != nil)
	endStep(span, out, cancelled)
	if !cancelled && step.Type == StepSkill && errors.Is(out.Err, llm.ErrUnavailable) && s.holdOutage(a, &step, out) {
		// Outages pause, not destroy: the step runs again when its task
		// resumes (endpoint.go). A tool step is not: its call may have
		// acted, and is not made twice.
		s.meter(a.id, &step, &view, out)
		a.notRunning()
		return
	}
	s.apply(a, step, view.PersistentMemory, out, cancelled)
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
// finishes the step and keeps the agent moving in its stage. shown is the
// persistent memory the step was shown, the entries its memory ops may
// delete and the memory caps count.
func (s *System) apply(a *agent, step StepState, shown map[string]string, out *Output, cancelled bool) {
	// Everything an executor produced is bounded as it is taken in
	// (takeOutput); the step's result is bounded as it is stored, in
	// finishStepLocked.
	result := map[string]any{}
	for k, v := range out.Result {
		result[k] = v
	}
	taken := s.takeOutput(out)
	failure := out.Err
	if out.Usage.Calls > 0 {
		if failure == nil {
			s.refused.answered()
		}
		// An answer, even one the step then failed on (an output that
		// does not parse, a refusal), says the endpoint is back.
		if failure == nil || !llm.Unanswered(failure) {
			s.endpointAnswered()
		}
	}
	if failure == nil {
		// An instruction whose name, ID or list is past its bound: the
		// model's answer, not the endpoint, is at fault.
		failure = taken
	}

	// Agent-local effects first: memory, usage, planned steps.
	var view string
	if len(out.Memory) > 0 {
		view = s.memoryView(step.TaskID) // not under the agent's lock: it reads the task
	}
	applies, gone, failure := a.applyOwn(&step, view, shown, out, cancelled, failure, result)
	if !applies {
		s.addTaskUsage(step.TaskID, out)
		if gone {
			s.droppedWhileRunning(a, &step, out.Usage)
		}
		return
	}

	// Effects on other owners (SyncState).
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

	// The step's end is stored with the report its task takes from it,
	// in one write; the task then takes the report and stores it while
	// the agent goes on (a step costs one write on its way, not two in a
	// row). A crash between the two writes leaves the report with the
	// agent's document, and the restart gives it to the task; a crash
	// before the first leaves the step to run again, its report taken
	// once (by its step ID). Each agent has one report on its way to its
	// task at a time.
	t, hasTask := s.task(step.TaskID)
	report := func(st *StepState) *StepReport {
		if !hasTask {
			return nil
		}
		r := &StepReport{TaskID: step.TaskID, StageID: step.StageID, AgentID: a.id, Role: role, StepID: step.StepID,
			AgentState: agentState, Completion: completion, Usage: out.Usage}
		why := ""
		if failure != nil {
			why = failure.Error()
		}
		if st.ExecutionState == StateFailed && state != StateFailed {
			// The store refused the outcome: the step failed instead
			// (finishStepLocked).
			why, _ = st.ExecuteResult["error"].(string)
			r.AgentState, r.Completion = AgentFailed, nil
		}
		r.SharedInfo = s.text("shared_info_step", map[string]any{"Executor": step.Executor, "State": st.ExecutionState, "Reason": Truncate(why, 300)})
		return r
	}
	lost, stored := a.finishStep(&step, state, result, out.Usage, report)
	// The last step's report is stored first: the task takes the reports
	// in their order, and its write of the last one ran at the same time
	// as the agent's of this step's end.
	a.awaitReport()
	switch {
	case stored != nil:
		if stored.AgentState != agentState || (stored.Completion == nil) != (completion == nil) {
			// The store refused the outcome: the step failed instead,
			// without it (finishStepLocked), and the agent goes on in
			// its stage.
			if failure == nil {
				failure = errors.New("the step's outcome could not be stored")
			}
			summaryGaveUp = false
		}
		a.reporting = s.storeReport(t, a, *stored, t.take(*stored))
	case hasTask:
		// The step was cleaned up while it ran (finish_stage): its task
		// still learns how it ended, stored before it is told.
		r := report(&StepState{ExecutionState: state})
		if notices, err := t.report(*r); err != nil {
			s.log.Error("store: the report of a step cleaned up while it ran refused", "task", step.TaskID, "step", step.StepID, "err", err)
		} else {
			s.deliver(notices...)
		}
	}
	s.log.Debug("step done", "agent", a.id, "step", step.StepID, "executor", step.Executor, "state", state, "err", failure)
	s.releaseLost(a, lost...)
	if failure != nil {
		s.refusal(a, &step, failure)
	}
	if summaryGaveUp {
		return
	}
	s.keepMoving(a, &step, failure)
}

// droppedWhileRunning ends a step that its stage's or task's end dropped
// from the step list while it ran, before its output applied (none of it
// applies): the trail records its end, failed, saying why, with the usage
// of what it ran. A reply it was to send can no longer come, and an
// operator who waits for it is told (an agent's wait is released by the
// stage's end). After a task's end nobody is: the end released every wait
// on the task and took its messages out of the operator's conversations.
func (s *System) droppedWhileRunning(a *agent, step *StepState, usage Usage) {
	ended := s.endedOrGone(step.TaskID)
	why := reasonStageEndedWhileRunning
	if ended {
		why = reasonTaskEndedWhileRunning
	}
	a.mu.Lock()
	a.trailDroppedLocked(step, StateFailed, map[string]any{"error": why}, usage)
	var lost []lostReply
	if !ended {
		lost = a.stageEndedReplyLocked(step)
	}
	a.mu.Unlock()
	s.releaseLost(a, lost...)
}

// Why a step its stage's or task's end dropped while it ran ended failed
// (droppedWhileRunning).
const (
	reasonStageEndedWhileRunning = "its stage ended while it ran: its output was not applied"
	reasonTaskEndedWhileRunning  = "its task ended while it ran: its output was not applied"
)

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
		m := s.instruction(step.StepID+"/tool_decision", req.TaskID, req.StageID, a.id, "", &Instruction{AddToolDecision: &req})
		m.NotNewInput = true
		s.deliver(m)
	}
	return nil
}

// storeReport has the task store a report it took (task.take), trying
// again while the store refuses (an outage pauses the reporting agent at
// its next step's end, and loses nothing: the report is stored with the
// agent's document), then delivers the notices it brought (a completed
// stage's, to the task's manager) and drops the report from the agent's.
// The returned channel is closed when it is done.
func (s *System) storeReport(t *task, a *agent, r StepReport, notices []Message) chan struct{} {
	done := make(chan struct{})
	s.reportsOnTheirWay.Add(1)
	s.goTracked(func() {
		defer close(done)
		defer s.reportsOnTheirWay.Add(-1)
		backoff, since := time.Duration(0), time.Now()
		for err := t.stored(false); err != nil; err = t.stored(true) {
			backoff = min(max(2*backoff, retryFirst), retryMax)
			s.log.Error("store: a step's report refused by its task: tried again", "task", r.TaskID, "step", r.StepID, "in", backoff, "err", err)
			// Past the first retries (~6 s): an outage, or a refusal
			// that will not pass. The task's operator is told, once
			// until the task stores a report again: its agents wait for
			// the store, nobody else would know why.
			if backoff == retryMax {
				if _, told := s.storeRefusing.LoadOrStore(r.TaskID, true); !told {
					s.tellOperator(s.operatorOf(r.TaskID), "store_refusing", map[string]any{
						"TaskID": r.TaskID, "TaskName": t.brief().TaskName, "Duration": time.Since(since).Round(time.Second), "Reason": err.Error()})
				}
			}
			select {
			case <-s.ctx.Done():
				return // the restart gives it to the task
			case <-time.After(backoff):
			}
		}
		s.storeRefusing.Delete(r.TaskID)
		s.deliver(notices...)
		a.reportStored(r.StepID)
	})
	return done
}
