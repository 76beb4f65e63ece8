package engine

import (
	"errors"
	"slices"
	"strings"
	"time"
)

// shiftWaitsLocked moves the deadlines of the waits in a task by d (the
// time the task was paused). a.mu must be held.
func (a *agent) shiftWaitsLocked(taskID string, d time.Duration) {
	changed := false
	for i := range a.st.Waits {
		if w := &a.st.Waits[i]; w.TaskID == taskID {
			w.Deadline = w.Deadline.Add(d)
			changed = true
		}
	}
	if changed {
		a.changedLocked(Event{TaskID: taskID, Detail: "step_lock_deadlines"})
	}
}

// lockHoldsLocked reports whether the step lock holds the agent (spec
// §9.1.2): it does while one of its waits is in a task that is not paused.
// A wait in a paused task is held with its task, its timeout suspended,
// and the agent runs its other tasks' steps meanwhile (pause.go): held
// whole, it would leave those tasks idle for as long as the pause lasts,
// with nobody told (their supervision counts the agent's queued steps as
// work in progress). On resume the lock holds again. An entry without its
// wait holds. a.mu must be held.
func (a *agent) lockHoldsLocked() bool {
	for _, id := range a.st.StepLock {
		i := slices.IndexFunc(a.st.Waits, func(w Wait) bool { return w.WaitingID == id })
		if i < 0 || !a.sys.isPaused(a.st.Waits[i].TaskID) {
			return true
		}
	}
	return false
}

// nextRunnableLocked returns the index in the todo list of the first step
// the agent may start now, skipping steps of paused tasks; -1 with paused
// true when only such steps are left. a.mu must be held.
func (a *agent) nextRunnableLocked() (at int, paused bool) {
	if a.st.Paused {
		return -1, true
	}
	for i, id := range a.st.AgentStep.TodoList {
		s := a.stepLocked(id)
		if s != nil && a.sys.isPaused(s.TaskID) {
			paused = true
			continue
		}
		return i, paused
	}
	return -1, paused
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
// queued, unless the step is gone: its stage or task ended while it
// returned (finish_stage, cancel_task), and with it the work the
// instruction was to redirect. dropped reports that: the caller tells the
// operator (interruptDropped) once a.mu is released. a.mu must be held.
func (a *agent) stoppedLocked(step *StepState, r *stopRequest, out *Output) (_ *Output, dropped bool) {
	what := "cancelled by the operator"
	if r.instruction != "" {
		what = "interrupted by the operator"
	}
	if r.reason != "" {
		what += ": " + r.reason
	}
	if r.instruction != "" && a.stepLocked(step.StepID) == nil {
		dropped = true
	} else if r.instruction != "" {
		data := map[string]any{"Reason": r.reason, "Instruction": r.instruction}
		a.freshInputLocked(step.TaskID, step.StageID) // the operator's, as a message is
		a.followStepsLocked(step.TaskID, step.StageID, []StepSpec{{
			StepIntention: a.sys.text("interrupt_intention", data),
			Type:          StepSkill,
			Executor:      SkillProcessMessage,
			TextContent:   a.sys.text("interrupt_text", data),
		}}, true, "")
	}
	if out.Err == nil {
		return out, dropped
	}
	return &Output{Err: errors.New(what), Usage: out.Usage, Result: map[string]any{"interrupted": true}}, dropped
}

// interruptDropped tells the operator who interrupted step that its
// instruction went nowhere: the step's stage or task ended before the
// step returned (stoppedLocked), and no step follows the instruction. The
// notice names the agent, the step, why and the instruction; its ID
// derives from the step's (one notice per interrupt). a.mu must not be
// held: the notice is delivered to the operator's inbox.
func (s *System) interruptDropped(a *agent, step *StepState, r *stopRequest) {
	taskEnded := s.endedOrGone(step.TaskID)
	s.log.Info("interrupt's instruction dropped: the interrupted step's stage or task ended; operator told", "operator", r.operatorID, "agent", a.id, "task", step.TaskID, "stage", step.StageID, "step", step.StepID, "task_ended", taskEnded)
	s.tellOperatorAs(derivedID(step.StepID, "interrupt_dropped"), r.operatorID, "interrupt_dropped", map[string]any{
		"Agent": s.nameOf(a.id), "StepID": step.StepID, "TaskID": step.TaskID,
		"TaskEnded": taskEnded, "Instruction": Truncate(r.instruction, 500),
	})
}

// setPaused pauses or resumes the agent (pause_agent, resume_agent) and
// reports whether that changed it; a refused write is returned.
func (a *agent) setPaused(pause bool) (bool, error) {
	a.mu.Lock()
	changed := false
	if a.st.Paused != pause {
		a.st.Paused = pause
		if pause && a.running == "" {
			a.st.WorkingState = WorkingPaused
		}
		a.changedLocked(Event{Detail: map[bool]string{true: "paused", false: "resumed"}[pause]})
		if err := a.mu.syncLocked(); err != nil {
			a.mu.Unlock()
			return false, err
		}
		changed = true
	}
	a.mu.Unlock()
	a.signal()
	return changed, nil
}

// shiftWaits moves the agent's waits in a task being resumed by held, the
// time the task was paused (pauseTask calls it before the task reads as
// resumed).
func (a *agent) shiftWaits(taskID string, held time.Duration) {
	a.mu.Lock()
	a.shiftWaitsLocked(taskID, held)
	a.mu.Unlock()
}

// taskPaused takes a task's pause or resume: the wait timer is armed again
// (a paused task's waits do not time out) and the loop looks again at what
// it may run.
func (a *agent) taskPaused() {
	a.mu.Lock()
	a.armTimerLocked()
	a.mu.Unlock()
	a.signal()
}

// runningStep is the ID and task of the step the agent runs now ("" when
// none).
func (a *agent) runningStep() (stepID, taskID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.running, a.runningKey.task
}

// requestStop stops the agent's running step for operatorID, if it is
// still runID (and stepID, when given), and returns the step's ID.
func (a *agent) requestStop(operatorID, runID, stepID, reason, instruction string) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.running != runID {
		return "", errf(ErrInvalid, "agent_id %q: its running step changed meanwhile; try again", a.id)
	}
	running := a.stepLocked(a.running)
	switch {
	case running == nil:
		return "", errf(ErrInvalid, "agent_id %q: runs no step now (send_message reaches it)", a.id)
	case stepID != "" && stepID != running.StepID:
		return "", errf(ErrInvalid, "step_id %q: is not the step agent %s runs now (%s)", stepID, a.id, running.StepID)
	case stepID != "" && running.Type != StepTool:
		return "", errf(ErrInvalid, "step_id %q: is a %s step, not a tool call: interrupt the agent instead", stepID, running.Executor)
	case a.stopRun != nil:
		return "", errf(ErrInvalid, "agent_id %q: its step %s is being stopped already", a.id, running.StepID)
	}
	a.stopRun = &stopRequest{operatorID: operatorID, stepID: running.StepID, reason: strings.TrimSpace(reason), instruction: strings.TrimSpace(instruction)}
	if a.cancelRun != nil {
		a.cancelRun()
	}
	return running.StepID, nil
}

// callWaits records on the asking tool step that its call waits for the
// operator's answer to question messageID, when q says so (BeforeCall),
// and returns the func that drops the record once the wait is over. Both
// are stored before Ask goes on: the question is asked, and its answer
// used, only then. A question of no running tool step of q's agent is
// not recorded: a restart then takes its call as possibly made.
func (s *System) callWaits(q OperatorQuestion, messageID string) (settle func() error, err error) {
	none := func() error { return nil }
	a, ok := s.agent(q.AgentID)
	if !q.BeforeCall || q.StepID == "" || !ok || a.kind != KindLLM {
		return none, nil
	}
	// mark sets the record (waits) or drops it.
	mark := func(waits bool) error {
		if err := a.mu.lockDurable(); err != nil {
			return err
		}
		defer a.mu.Unlock()
		var detail string
		step := a.stepLocked(q.StepID)
		if !waits && a.st.CallWaitsOn != messageID {
			return errNotMarked
		}
		if waits && (step == nil || a.running != q.StepID || step.Type != StepTool) {
			return errNotMarked
		}
		// Dropped also when the step is gone (its stage or task ended
		// while the question waited): the record is the agent's, and left
		// behind it would be read as a later tool step's at a restart.
		a.st.CallWaitsOn, detail = "", "call_waiting_over"
		if waits {
			a.st.CallWaitsOn, detail = messageID, "call_waiting_on_operator"
		}
		ev := Event{TaskID: q.TaskID, Detail: detail}
		if step != nil {
			ev = Event{Kind: EventStepChanged, StepID: step.StepID, TaskID: step.TaskID, StageID: step.StageID, Detail: detail}
		}
		a.changedLocked(ev)
		return a.mu.syncLocked()
	}
	switch err := mark(true); {
	case errors.Is(err, errNotMarked):
		return none, nil
	case err != nil:
		return nil, err
	}
	return func() error {
		if err := mark(false); !errors.Is(err, errNotMarked) {
			return err
		}
		return nil // the step ended meanwhile (its stage or task did)
	}, nil
}

// errNotMarked is callWaits' finding that the step is not (or no longer)
// the agent's running tool step asking the question.
var errNotMarked = errors.New("not the running tool step asking")

// showOutage shows the agent waiting out an LLM outage in step's call,
// with the reason.
func (a *agent) showOutage(step *StepState, since time.Time, reason string) {
	text := a.sys.text("llm_waiting", map[string]any{"Since": since.Format(time.DateTime), "Reason": Truncate(reason, 300)})
	a.showWaiting(step, PausedOutage, text)
}

// showWaiting shows the agent waiting, for text, on what step's call waits
// on (WaitingOn).
func (a *agent) showWaiting(step *StepState, on, text string) {
	a.mu.Lock()
	a.st.WorkingState = WorkingWaiting
	a.st.WaitingFor, a.st.WaitingOn, a.st.WaitingIn = text, on, step.TaskID
	a.changedLocked(Event{TaskID: step.TaskID, StepID: step.StepID, Detail: on + "_waiting"})
	a.mu.Unlock()
}

// waitingOver shows the agent working again after step's call waited.
func (a *agent) waitingOver(step *StepState, on string) {
	a.mu.Lock()
	if a.st.WaitingFor != "" {
		a.st.WaitingFor, a.st.WaitingOn, a.st.WaitingIn = "", "", ""
		a.st.WorkingState = WorkingWorking
		a.changedLocked(Event{TaskID: step.TaskID, StepID: step.StepID, Detail: on + "_waiting_over"})
	}
	a.mu.Unlock()
}

// putBack takes back the running step, to run again from its start (its
// LLM call gave up on the endpoint, endpoint.go): its calls count, and it
// is queued first, unstarted.
func (a *agent) putBack(step *StepState, u Usage) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.st.Usage.Add(u)
	if cur := a.stepLocked(step.StepID); cur != nil {
		cur.Usage.Add(u)
	}
	a.notStartedLocked(step.StepID)
	a.changedLocked(Event{Kind: EventStepChanged, StepID: step.StepID, TaskID: step.TaskID, StageID: step.StageID, Detail: StateInit})
	// Kept through a refused write, to be stored by the owner's retries:
	// withdrawn, the step would read "running" with nothing running it.
	a.mu.keepLocked()
}

// stepReturned takes back a step its executor returned: the step's cancel
// func is released, and an operator's stop of it turns its output into the
// stop's (not a shutdown: cancelled is false then, its outcome applies).
func (a *agent) stepReturned(step *StepState, out *Output, cancelled bool) (*Output, bool) {
	a.mu.Lock()
	if a.cancelRun != nil {
		a.cancelRun()
		a.cancelRun = nil
	}
	var dropped *stopRequest
	if r := a.takeStopLocked(step.StepID); r != nil && !a.stopped {
		var lost bool
		out, lost = a.stoppedLocked(step, r, out)
		cancelled = false
		if lost {
			dropped = r
		}
	}
	a.mu.Unlock()
	if dropped != nil {
		a.sys.interruptDropped(a, step, dropped)
	}
	return out, cancelled
}
