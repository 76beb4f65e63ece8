package engine

import "slices"

// receive handles a delivered message (spec §6.2 for LLM agents, §7.3 for
// HumanAgents). It reports false when the agent does not take it: a
// message of a task that has ended (lateLocked).
func (a *agent) receive(m Message) bool {
	if a.kind == KindHuman {
		return a.receiveHuman(m)
	}
	// Read other owners before taking our own mutex: no path holds two.
	data := a.sys.senderData(m)
	data["Message"] = m.Message
	var ts *TaskState
	if in := m.Instruction; in != nil && (in.StartTask != nil || in.StartStage != nil) {
		id := m.TaskID
		if in.StartTask != nil {
			id = in.StartTask.TaskID
		}
		if t, ok := a.sys.task(id); ok {
			snap := t.snapshot()
			ts = &snap
		}
	}

	// The message makes the agent's count of its stage: at the bound,
	// those of ended stages and tasks go first (stage_counts.go).
	var ended map[stageKey]bool
	if !m.NotNewInput {
		ended = a.endedCounts(stageKey{m.TaskID, m.StageRelative})
	}

	// A message in a stage the agent's working memory does not hold
	// opens it there while the stage runs (a peer's message may come
	// before the stage's start_stage instruction); one in a stage that is
	// over is taken all the same, but leaves working memory as it is
	// (recordStepsLocked). Asked before taking our own mutex.
	var opening, over bool
	if m.Instruction == nil && !a.holdsStage(m.TaskID, m.StageRelative) {
		opening, over = true, a.sys.stageOver(m.TaskID, m.StageRelative)
	}

	a.mu.Lock()
	if a.lateLocked(m) {
		a.mu.Unlock()
		a.late(m)
		return false
	}
	if a.seenLocked(m.MessageID) {
		a.mu.Unlock()
		return true
	}
	if !m.NotNewInput {
		a.freshInputLocked(m.TaskID, m.StageRelative)
		a.shedCountsLocked(ended)
		a.count(stageKey{m.TaskID, m.StageRelative}).Chain = m.Chain
	}
	var released *Wait
	if m.ReturnWaitingID != "" {
		if w, ok := a.releaseWaitLocked(m.ReturnWaitingID); ok {
			released = &w
			a.changedLocked(Event{TaskID: w.TaskID, Detail: "step_lock_released"})
		}
	}
	if opening && !over {
		a.rememberLocked(m.TaskID, m.StageRelative)
	}
	var lost []lostReply
	switch {
	case m.Instruction != nil:
		lost = a.instructionLocked(m, ts)
	case m.NeedReply && m.SenderID != SystemSender:
		// spec §6.2.1: a send_message step answers the sender; when the
		// sender waits it runs next.
		waitID := m.waitingIDFor(a.id)
		data["Waiting"] = waitID != ""
		a.followStepsLocked(m.TaskID, m.StageRelative, []StepSpec{{
			StepIntention: a.sys.text("reply_intention", data),
			Type:          StepSkill,
			Executor:      SkillSendMessage,
			TextContent:   a.sys.text("reply_text", data),
		}}, waitID != "", m.MessageID, stepOpts{replyTo: m.SenderID, returnWaitingID: waitID})
	default:
		// spec §6.2.2: a process_message step digests it; a reply to a
		// wait of ours is digested next (spec §9.1.3).
		a.followStepsLocked(m.TaskID, m.StageRelative, []StepSpec{{
			StepIntention: a.sys.text("process_intention", data),
			Type:          StepSkill,
			Executor:      SkillProcessMessage,
			TextContent:   a.sys.text("process_text", data),
		}}, released != nil, m.MessageID)
	}
	// The message is stored and delivered: nobody can be told if the
	// agent's document is refused now. Withdrawn, the step it queued and
	// its "received" record would be lost until a restart delivers the
	// message again, and the work it carries would stop (an instruction
	// to start a stage, a reply awaited). It is kept in memory instead and
	// committed once the store takes writes again (owner.go).
	a.mu.keepLocked()
	a.mu.Unlock()
	a.sys.releaseLost(a, lost...)
	if opening && !over {
		a.closeIfOver(m.TaskID, m.StageRelative)
	}
	return true
}

// closeIfOver takes the stage out of the agent's working memory again if
// it is over, and reports whether it was: asked whether it was over before
// a record opened it (receive, humanSend), the stage may have ended since,
// and its finish_stage instruction, sent once its end is stored, may have
// been taken before the record opened it; nothing else would close it.
// a.mu must not be held.
func (a *agent) closeIfOver(taskID, stageID string) bool {
	if !a.sys.stageOver(taskID, stageID) {
		return false
	}
	a.mu.Lock()
	a.forgetStageLocked(taskID, stageID)
	a.changedLocked(Event{TaskID: taskID, StageID: stageID, Detail: "stage_over"})
	a.mu.keepLocked()
	a.mu.Unlock()
	return true
}

// lateLocked reports whether m is a message of a task that has ended, not
// one of its instructions: sent as the task ended, it would queue a step
// there (or wait in an operator's inbox for a reply) after the task's
// finish_task instruction dropped its steps, and nothing in an ended task
// runs or is answered: the agent does not take it (a restart delivering
// it again finds it late as well). Read under a.mu: a task is marked
// ended before its finish_task instructions are delivered (endTask), so a
// message taken before the mark is dropped by the instruction that
// follows it. a.mu must be held.
func (a *agent) lateLocked(m Message) bool {
	return m.Instruction == nil && a.sys.isEnded(m.TaskID)
}

// late logs a message the agent did not take (lateLocked).
func (a *agent) late(m Message) {
	a.sys.log.Info("message of an ended task not taken", "agent", a.id, "task", m.TaskID, "message", m.MessageID, "sender", m.SenderID)
}

// receivedKept is how many message IDs an agent remembers for deduplication:
// redelivery after a restart concerns the newest messages only.
const receivedKept = 512

// seenLocked reports whether the message was delivered already, and
// records it when not. a.mu must be held.
func (a *agent) seenLocked(id string) bool {
	if id == "" {
		return false
	}
	if a.received == nil || len(a.received) != len(a.st.Received) {
		// Made again after a restore (a trim deletes the IDs it drops,
		// as task.record does, rather than make it again with its
		// growth at every 512th message): looking through the list
		// itself cost a compare of each of up to a thousand IDs per
		// message. The list holds each ID once (a damaged document's
		// second copies are dropped, or the index would be made again at
		// every message).
		a.received = make(map[string]struct{}, len(a.st.Received)+1)
		kept := a.st.Received[:0:0]
		for _, r := range a.st.Received {
			if _, twice := a.received[r]; !twice {
				a.received[r] = struct{}{}
				kept = append(kept, r)
			}
		}
		if len(kept) < len(a.st.Received) {
			a.st.Received = kept
		}
	}
	if _, ok := a.received[id]; ok {
		return true
	}
	a.st.Received = append(a.st.Received, id)
	a.received[id] = struct{}{}
	if len(a.st.Received) > 2*receivedKept {
		drop := len(a.st.Received) - receivedKept
		for _, r := range a.st.Received[:drop] {
			delete(a.received, r)
		}
		a.st.Received = slices.Clone(a.st.Received[drop:])
	}
	return false
}

// senderData is the template data naming a message's sender.
func (s *System) senderData(m Message) map[string]any {
	name := m.SenderID
	if m.SenderID != SystemSender {
		if b, ok := s.AgentBrief(m.SenderID); ok {
			name = b.Name
		}
	}
	return map[string]any{"SenderID": m.SenderID, "SenderName": name}
}

// instructionLocked carries out an engine instruction (spec §6.2.2); ts is
// the instruction's task, read beforehand. It returns the waits the reply
// steps a finish_stage drops leave without an answer (releaseLost, once
// a.mu is released). a.mu must be held.
func (a *agent) instructionLocked(m Message, ts *TaskState) (lost []lostReply) {
	in := m.Instruction
	switch {
	case in.StartTask != nil:
		if ts == nil {
			return nil
		}
		data := map[string]any{"TaskID": ts.TaskID, "TaskName": ts.TaskName, "TaskIntention": ts.TaskIntention}
		a.addStepsLocked(ts.TaskID, NoRelative, []StepSpec{{
			StepIntention: a.sys.text("start_task_intention", data),
			Type:          StepSkill,
			Executor:      SkillPlanning,
			TextContent:   a.sys.text("start_task_text", data),
		}}, false, m.MessageID)
	case in.StartStage != nil:
		// Inject the stage goal and this agent's allocation into the
		// stage's first planning step (spec §3.2, §6.2.2).
		ss := in.StartStage
		if ts == nil {
			return nil
		}
		var alloc map[string]string
		for _, st := range ts.StageList {
			if st.StageID == ss.StageID {
				alloc = st.AgentAllocation
			}
		}
		data := map[string]any{
			"TaskID": ts.TaskID, "TaskName": ts.TaskName, "TaskIntention": ts.TaskIntention,
			"StageID": ss.StageID, "StageIntention": ss.StageIntention, "Goal": ss.Goal,
			"Allocation": formatMap(alloc),
		}
		a.rememberLocked(ss.TaskID, ss.StageID)
		a.addStepsLocked(ss.TaskID, ss.StageID, []StepSpec{{
			StepIntention: a.sys.text("start_stage_intention", data),
			Type:          StepSkill,
			Executor:      SkillPlanning,
			TextContent:   a.sys.text("start_stage_text", data),
		}}, false, m.MessageID)
	case in.FinishStage != nil:
		// spec §2.4.1: the stage's steps and working memory go.
		ref := *in.FinishStage
		keep := a.endingStepLocked(ref)
		lost = a.dropStageStepsLocked(func(s *StepState) bool {
			return s.TaskID == ref.TaskID && s.StageID == ref.StageID && !keep(s)
		})
		a.forgetStageLocked(ref.TaskID, ref.StageID)
		a.dropCountsLocked(func(c *StageCount) bool { return c.TaskID == ref.TaskID && c.StageID == ref.StageID })
		a.changedLocked(Event{TaskID: ref.TaskID, StageID: ref.StageID, Detail: "finish_stage"})
	case in.FinishTask != nil:
		a.dropTaskLocked(in.FinishTask.TaskID)
	case in.UpdateWorkingMemory != nil:
		ref := in.UpdateWorkingMemory
		a.rememberLocked(ref.TaskID, ref.StageID)
		a.changedLocked(Event{TaskID: ref.TaskID, StageID: ref.StageID, Detail: "update_working_memory"})
	case in.AddToolDecision != nil:
		td := in.AddToolDecision
		a.followStepsLocked(td.TaskID, td.StageID, []StepSpec{{
			StepIntention: td.StepIntention,
			Type:          StepSkill,
			Executor:      SkillToolDecision,
			TextContent:   td.TextContent,
		}}, true, m.MessageID)
	}
	return lost
}

// dropTaskLocked drops what the agent holds of an ended task (spec §2.4.1,
// finish_task): its steps (a running one is cancelled), its working memory
// and its stage counts. a.mu must be held.
func (a *agent) dropTaskLocked(id string) {
	a.removeStepsLocked(func(s *StepState) bool { return s.TaskID == id })
	delete(a.st.WorkingMemory, id)
	a.dropCountsLocked(func(c *StageCount) bool { return c.TaskID == id })
	a.changedLocked(Event{TaskID: id, Detail: "finish_task"})
}

// endingStepLocked returns which steps of a stage that just ended the
// agent keeps: when the stage was ended by the agent's running step (the
// manager's finish_stage or retry_stage), that step and the steps queued
// since it started (what it planned, e.g. telling the operator) run on
// and stay in the record. a.mu must be held.
func (a *agent) endingStepLocked(ref StageRef) func(*StepState) bool {
	none := func(*StepState) bool { return false }
	if ref.EndedBy == "" {
		return none
	}
	run := a.stepLocked(ref.EndedBy)
	if run == nil {
		return none
	}
	since := run.StartedAt
	if a.running != ref.EndedBy {
		if run.ExecutionState != StateInit || !run.StartedAt.IsZero() {
			return none
		}
		// A restore, before the loops run (StartFrom): the step that
		// ended the stage was found running and runs again
		// (recoverStepsLocked). It stays, and so do the steps queued
		// since it was made.
		since = run.CreatedAt
	}
	return func(s *StepState) bool {
		return s.StepID == ref.EndedBy || (s.ExecutionState == StateInit && !s.CreatedAt.Before(since))
	}
}
