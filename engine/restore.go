package engine

import (
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Rerunner is implemented by a tool executor that can tell whether a tool
// step interrupted by a crash may simply run again (its tool declares
// readOnlyHint or idempotentHint). Without it, interrupted tool steps fail.
type Rerunner interface {
	SafeToRerun(step StepState) bool
}

// StartFrom starts the MAS from a store's image: a first start (empty image)
// is Start; otherwise every task and agent comes back as it was stored and
// the agents carry on (ARCHITECTURE.md "Crash semantics"):
//   - a step found running is run again when it is an LLM skill (what it
//     creates has IDs derived from the step, so its effects apply once;
//     a wait it engaged on a message the crash lost is dropped); a
//     tool step only when the tool executor says it is safe (Rerunner),
//     else it fails with a reason the agent's next reflection sees;
//   - step locks keep their deadlines; the wait graph is rebuilt; a wait
//     whose reply step is stored ended without its reply is released,
//     the release a crash lost (releaseLostReplies), and the asking step,
//     if it runs again, does not wait for that reply anew; an operator
//     who waited is sent the notice of it if the store lacks it;
//   - messages a receiver has not taken yet are delivered again (receivers
//     take each message once, by its ID), but for the answers to
//     AskOperator questions, which went to the waiting calls (askAnswers);
//   - instructions and notices a task's stored state implies, lost by a
//     crash between the task's write and theirs, are sent again, and the
//     waits in an ended task released; no step of an ended task runs
//     meanwhile (popLocked), nor is a message of it taken (receive); an
//     ended stage's finish_stage instructions go before any loop runs,
//     and the waits in it are released then (stageEnded's release);
//   - the tasks' conversations are rebuilt from the stored messages;
//   - an operator's questions of a stage that ended no longer await a
//     reply (stageEnded expires them; a crash may have come before);
//   - an operator told of an LLM outage that a lost call waited out is
//     told when the endpoint answers again, a promise stored until kept
//     (keepOutagePromises).
func (s *System) StartFrom(img *Image) error {
	if img.Empty() {
		return s.Start()
	}
	if err := s.begin(); err != nil {
		return err
	}

	var base *TaskState
	for i := range img.Tasks {
		if img.Tasks[i].Base {
			base = &img.Tasks[i]
		}
	}
	if base == nil || len(base.StageList) == 0 {
		return errors.New("engine: restore: the stored state has no base task")
	}
	s.baseTaskID, s.baseStageID = base.TaskID, base.StageList[0].StageID
	s.managerID, s.operatorID = base.TaskManager, base.Operator

	// Tasks, with their conversations rebuilt from the messages.
	pools := map[string][]Message{}
	for _, m := range img.Messages {
		pools[m.TaskID] = append(pools[m.TaskID], m)
	}
	for _, ts := range img.Tasks {
		st := ts.clone()
		st.SharedConversationPool = dedupMessages(pools[st.TaskID])
		if st.Base && len(st.SharedConversationPool) > baseLogLimit {
			st.SharedConversationPool = slices.Clone(st.SharedConversationPool[len(st.SharedConversationPool)-baseLogLimit:])
		}
		if st.SharedInfoPool == nil {
			st.SharedInfoPool = []SharedInfo{}
		}
		if st.CommunicationQueue == nil {
			st.CommunicationQueue = []Message{}
		}
		switch {
		case stateEnded(st.ExecutionState):
			// Ended: its agents start no step of it, whether the crash
			// lost its finish_task instructions (sent again below) or
			// not; a pause an older document kept holds nobody.
			s.ended.Store(st.TaskID, struct{}{})
		case st.Paused:
			s.paused.Store(st.TaskID, struct{}{})
		}
		if !stateEnded(st.ExecutionState) {
			for _, sg := range st.StageList {
				if stateEnded(sg.ExecutionState) {
					s.stagesEnded.Store(stageKey{st.TaskID, sg.StageID}, struct{}{})
				}
			}
		}
		if err := s.registerTask(newTaskOwner(s, st)); err != nil {
			return fmt.Errorf("engine: restore: %w", err)
		}
	}

	stored := make(map[string]bool, len(img.Messages))
	for _, m := range img.Messages {
		stored[m.MessageID] = true
	}
	// The stages that ended: an operator's questions of them that await a
	// reply expired with them (a crash may have come before the expiry
	// was stored: stageEnded).
	endedStages := map[[2]string]bool{}
	for _, ts := range img.Tasks {
		for _, sg := range ts.StageList {
			if stateEnded(sg.ExecutionState) {
				endedStages[[2]string{ts.TaskID, sg.StageID}] = true
			}
		}
	}
	answered := storedAnswers(img)

	// Agents: interrupted steps first, then the owners (LLM agents start).
	rerun, _ := s.cfg.Tool.(Rerunner)
	var restored []*agent
	for _, as := range img.Agents {
		// Ended steps keep the image's maps (never changed in place), so
		// a store knows them as unchanged and does not write them again.
		st := as.commitCopy(nil)
		if st.WorkingMemory == nil {
			st.WorkingMemory = map[string]map[string][]string{}
		}
		if st.PersistentMemory == nil {
			st.PersistentMemory = map[string]string{}
		}
		// The counts are looked up as sorted (agent.countAt): a document
		// that lists them in another order (written by hand, or damaged)
		// is sorted first.
		slices.SortFunc(st.StageCounts, CompareStageCounts)
		// The entries' tasks go with their entries.
		maps.DeleteFunc(st.MemoryTasks, func(k, _ string) bool { _, ok := st.PersistentMemory[k]; return !ok })
		// Full where a view is: a notice stored before notices were a
		// view's names none, and the next refusal tells it again.
		st.MemoryFull = len(st.MemoryFullIn) > 0
		a := newAgentOwner(s, st)
		a.recoverStepsLocked(rerun, stored)
		if a.kind == KindHuman {
			a.settleQuestionsLocked(answered)
			a.expireStageLocked(func(task, stage string) bool { return endedStages[[2]string{task, stage}] })
		}
		restored = append(restored, a)
	}
	s.keepOutagePromises(restored, stored)
	// Reports stored with their steps' ends that the tasks lack: a crash
	// came between the agent's write and the task's. The tasks take them
	// before anything runs; the notices they imply (a completed stage's)
	// are sent with the others below.
	for _, a := range restored {
		s.replayReports(a)
	}
	// Every agent is enrolled before any loop runs: a re-run step may
	// message an agent restored after its own.
	for _, a := range restored {
		if err := s.enroll(a, false); err != nil {
			return fmt.Errorf("engine: restore agent %s: %w", a.id, err)
		}
	}
	for _, a := range restored {
		a.rejoinWaits()
	}
	s.releaseLostReplies(restored, stored)

	// Messages some receiver has not taken: deliver them to it. Each
	// message's position and each agent's received set are looked up, not
	// searched: the restore is linear in the messages.
	pos := make(map[string]int, len(img.Messages))
	for i, m := range img.Messages {
		if _, dup := pos[m.MessageID]; !dup {
			pos[m.MessageID] = i
		}
	}
	taken := map[string]func(Message) bool{}
	redelivered := 0
	asks := askAnswers(img)
	redeliver := func(only func(Message) bool) {
		for _, m := range img.Messages {
			if !only(m) || asks(m) {
				// An answer to an AskOperator question went to the
				// waiting call (answered), never to the asker's steps;
				// only the dead process waited for it.
				continue
			}
			for _, r := range m.Receiver {
				a, ok := s.agent(r)
				if !ok {
					continue
				}
				took, ok := taken[r]
				if !ok {
					took = a.takenBefore(pos)
					taken[r] = took
				}
				if took(m) {
					continue
				}
				if a.receive(m) {
					redelivered++
				}
			}
		}
	}
	// Instructions and notices a stored task implies but the store lacks:
	// a crash came between the task's write and theirs. Delivered with
	// the IDs they had, they are taken once.
	var implied []Message
	for _, ts := range img.Tasks {
		if t, ok := s.task(ts.TaskID); ok {
			for _, m := range t.implied() {
				if !stored[m.MessageID] {
					implied = append(implied, m)
				}
			}
		}
	}
	// The ends of stages first, before any loop runs: a crash between the
	// write of a stage's end and its agents' kept their steps of it and
	// their waits in it. Their finish_stage instructions (stored or not)
	// drop the steps, as they did before the crash, and the waits are
	// released, as the stage's end released them (stageEnded): no step of
	// an ended stage runs after a restart, and nobody waits in one.
	redeliver(isFinishStage)
	early, missing := splitFunc(implied, isFinishStage)
	s.deliver(early...)
	s.releaseWaits(func(w Wait) bool { return endedStages[[2]string{w.TaskID, w.StageID}] })
	if err := s.runLoops(restored); err != nil {
		return fmt.Errorf("engine: restore: %w", err)
	}
	redeliver(func(m Message) bool { return !isFinishStage(m) })
	s.deliver(missing...)
	// Waits in ended tasks that a crash kept (it came before the waiters'
	// documents were written without them): released as the task's end
	// released them, after its instructions (endTask).
	s.releaseWaits(func(w Wait) bool { return s.isEnded(w.TaskID) })
	s.reaskBudgets()
	s.resumeReleased()
	s.rewatchOutage()
	s.log.Info("mas restored", "tasks", len(img.Tasks), "agents", len(img.Agents),
		"messages", len(img.Messages), "redelivered", redelivered, "recreated", len(implied), "base_task", s.baseTaskID)
	return nil
}

// isFinishStage reports whether m is a finish_stage instruction.
func isFinishStage(m Message) bool {
	return m.Instruction != nil && m.Instruction.FinishStage != nil
}

// splitFunc splits ms into those in matches and the others, each in order.
func splitFunc(ms []Message, in func(Message) bool) (yes, no []Message) {
	for _, m := range ms {
		if in(m) {
			yes = append(yes, m)
		} else {
			no = append(no, m)
		}
	}
	return yes, no
}

// replayReports gives the reports an agent stored with its steps' ends to
// their tasks, each task taking those it lacks (task.replay); those a task
// stored are dropped from the agent's (its next write goes without them).
func (s *System) replayReports(a *agent) {
	var tasks []string
	byTask := map[string][]StepReport{}
	for _, r := range a.st.Reports {
		if _, ok := byTask[r.TaskID]; !ok {
			tasks = append(tasks, r.TaskID)
		}
		byTask[r.TaskID] = append(byTask[r.TaskID], r)
	}
	var kept []StepReport
	for _, id := range tasks {
		t, ok := s.task(id)
		if !ok {
			continue // the task is gone: nobody to tell
		}
		if err := t.replay(a.id, byTask[id]); err != nil {
			s.log.Error("store: restore: step reports refused by their task: kept for the next start", "task", id, "agent", a.id, "err", err)
			kept = append(kept, byTask[id]...)
		}
	}
	a.st.Reports = kept
}

// dedupMessages keeps the first of messages with the same ID.
func dedupMessages(ms []Message) []Message {
	seen := map[string]bool{}
	out := make([]Message, 0, len(ms))
	for _, m := range ms {
		if seen[m.MessageID] {
			continue
		}
		seen[m.MessageID] = true
		out = append(out, m)
	}
	return out
}
