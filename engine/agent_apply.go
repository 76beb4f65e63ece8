package engine

// The agent's own side of applying an executor's output (sync.go's apply,
// spec §2.5): what changes the agent itself, each under its lock.

import "slices"

// applyPlanLocked adds the steps an output plans and writes a tool
// instruction onto its tool step. a.mu must be held.
func (a *agent) applyPlanLocked(step *StepState, out *Output, result map[string]any) error {
	var rejected []Rejection
	add := func(specs []StepSpec, next bool, kind string) {
		kept, rej := a.sys.checkPlan(&a.st, step.Executor, specs)
		rejected = append(rejected, rej...)
		a.followStepsLocked(step.TaskID, step.StageID, kept, next, step.StepID+"/"+kind)
	}
	if out.AddSteps != nil {
		add(out.AddSteps, false, "plan")
	}
	if out.AddNextSteps != nil {
		add(out.AddNextSteps, true, "next")
	}
	if sp := out.GetMoreInfo; sp != nil {
		// spec §3.7: a decision step to gather what is missing, then the
		// same send_message again (still answering the same message).
		dec := StepSpec{StepIntention: sp.StepIntention, Type: StepSkill, Executor: SkillDecision, TextContent: sp.TextContent}
		again := StepSpec{StepIntention: step.StepIntention, Type: StepSkill, Executor: SkillSendMessage, TextContent: step.TextContent}
		a.followStepsLocked(step.TaskID, step.StageID, []StepSpec{dec, again}, true, step.StepID+"/more_info",
			stepOpts{}, stepOpts{replyTo: step.ReplyTo, returnWaitingID: step.ReturnWaitingID})
	}
	if sp := out.ReactAction; sp != nil {
		// spec §3.8, §10.2: a decision step reacts to the message.
		dec := StepSpec{StepIntention: sp.StepIntention, Type: StepSkill, Executor: SkillDecision, TextContent: sp.TextContent}
		a.followStepsLocked(step.TaskID, step.StageID, []StepSpec{dec}, true, step.StepID+"/react")
	}
	if len(rejected) > 0 {
		result["rejected_steps"] = rejected
	}
	if ti := out.ToolInstruction; ti != nil {
		target := a.stepLocked(ti.StepID)
		switch {
		case target == nil:
			return errf(ErrNotFound, "tool step %q: no such step of this agent", ti.StepID)
		case target.Type != StepTool:
			return errf(ErrInvalid, "tool step %q: is a %s step, not a tool step", ti.StepID, target.Type)
		case target.ExecutionState != StateInit && target.ExecutionState != StatePending:
			return errf(ErrInvalid, "tool step %q: already %s", ti.StepID, target.ExecutionState)
		}
		target.InstructionContent = ti.Instruction
		a.changedLocked(Event{Kind: EventStepChanged, StepID: target.StepID, TaskID: target.TaskID, StageID: target.StageID, Detail: "instruction"})
	}
	return nil
}

// applyOwn applies an executor's output to the agent itself: usage,
// memory, planned steps (spec §2.5), and returns the step's failure so
// far. It reports false when nothing else applies: the step's stage or
// task ended while it ran (its steps were cleaned up: gone), or the MAS is
// shutting down. A step interrupted by shutdown stays "running", so a
// durable store can run it again after a restart. view and shown are the
// step's view of the persistent memory and its entries (applyMemoryLocked).
func (a *agent) applyOwn(step *StepState, view string, shown map[string]string, out *Output, cancelled bool, failure error, result map[string]any) (applies, gone bool, _ error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	cur := a.stepLocked(step.StepID)
	a.st.Usage.Add(out.Usage)
	if cur == nil || cancelled {
		if cur != nil {
			cur.Usage.Add(out.Usage)
		}
		// The step's task names who may be told of it (EventVisible).
		a.changedLocked(Event{Kind: EventLLMCall, TaskID: step.TaskID, StageID: step.StageID, StepID: step.StepID})
		return false, cur == nil, failure
	}
	cur.Usage.Add(out.Usage)
	if len(out.Memory) > 0 {
		result["persistent_memory"] = a.applyMemoryLocked(step.TaskID, view, shown, out.Memory)
	}
	if failure == nil {
		failure = a.applyPlanLocked(step, out, result)
	}
	return true, false, failure
}

// tally counts a step that ran in its stage (steps, reflections, failed
// summaries) and reports whether the stage's summary gave up (it failed
// SummaryAttempts times), with the agent's role.
func (a *agent) tally(step *StepState, failure error) (summaryGaveUp bool, role string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.count(stageKey{step.TaskID, step.StageID})
	c.Steps++
	if step.Executor == SkillReflection {
		c.Reflections++
	}
	if step.Executor == SkillSummary && failure != nil {
		c.SummaryFailures++
		summaryGaveUp = c.SummaryFailures >= a.sys.cfg.SummaryAttempts
	}
	return summaryGaveUp, a.st.Role
}

// finishStep marks the step done, with the report report makes for its
// task (finishStepLocked), and returns the wait it leaves without a reply,
// if any, and the report stored with the step's end (nil when the step was
// gone: its stage's or task's end dropped it while its output applied —
// the manager's step that finishes the task — and the trail alone records
// its end, with usage, the step's).
func (a *agent) finishStep(step *StepState, state string, result map[string]any, usage Usage, report func(*StepState) *StepReport) ([]lostReply, *StepReport) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.finishStepLocked(step.StepID, state, result, report); !ok {
		a.trailDroppedLocked(step, state, result, usage)
	}
	var stored *StepReport
	if i := slices.IndexFunc(a.st.Reports, func(r StepReport) bool { return r.StepID == step.StepID }); i >= 0 {
		r := a.st.Reports[i]
		stored = &r
	}
	return a.replyLostLocked(step, result), stored
}

// guardStage is the agent's side of keepMoving: a reflection (or, past the
// reflection budget, a summary) when it has no pending step and no wait
// left in the step's stage.
func (a *agent) guardStage(step *StepState, failure error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, open := a.st.WorkingMemory[step.TaskID][step.StageID]; !open {
		// The stage ended (finish_stage, finish_task or retry_stage cleaned
		// it) between keepMoving's look at the stage and this lock.
		return
	}
	if a.pendingInLocked(step.TaskID, step.StageID) || a.waitsInLocked(step.TaskID, step.StageID) {
		return
	}
	if !a.stageStartedLocked(step.TaskID, step.StageID) {
		// The agent has not taken the stage's start_stage instruction
		// yet: a peer's message of the stage came first (the task sends
		// the instructions one agent at a time, each written before the
		// next). Its plan is still to come. A reflection now would have
		// it summarise, and submit its completion, before it read its
		// goal, and the stage could end with its part never done. The
		// instruction always comes (a restart sends it again), and its
		// planning step keeps the stage moving.
		return
	}
	// The guard's step is what keeps the stage moving, and nobody could
	// be told if the store refused it: kept through an outage rather than
	// withdrawn (owner.go).
	a.mu.keepLocked()
	c := a.count(stageKey{step.TaskID, step.StageID})
	reason := a.sys.text("stage_no_step_left", nil)
	if failure != nil {
		reason = a.sys.text("stage_step_failed", map[string]any{"StepID": step.StepID, "Executor": step.Executor, "Reason": Truncate(failure.Error(), 300)})
	}
	if step.Executor == SkillSummary || c.Reflections >= a.sys.cfg.StageReflectionBudget || c.Steps >= a.sys.cfg.StageStepBudget {
		a.ensureSummaryLocked(step.TaskID, step.StageID, reason)
		return
	}
	a.followStepsLocked(step.TaskID, step.StageID, []StepSpec{a.sys.reflectionSpec(reason)}, false, "")
}

// stageStartedLocked reports whether the agent took the start_stage
// instruction of a stage: the planning step it queues is among its steps
// (a stage's steps stay until it ends). a.mu must be held.
func (a *agent) stageStartedLocked(taskID, stageID string) bool {
	for i := range a.st.AgentStep.StepList {
		if s := &a.st.AgentStep.StepList[i]; s.TaskID == taskID && s.StageID == stageID && s.Executor == SkillPlanning {
			return true
		}
	}
	return false
}
