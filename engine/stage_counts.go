package engine

import "slices"

// An agent's stage counts (AgentState.StageCounts) are what it ran in each
// stage it works in, and the chain of the last message it took there: the
// stage budgets and the message-chain limit read them (beyond the spec).
//
// An entry goes when its stage or task ends for the agent (finish_stage,
// finish_task). It is made again by a message the agent takes in a stage
// that has ended, and by the steps that message queues: the limits hold
// there as anywhere (a reply goes in the stage of the message it answers,
// spec §6.2.1, and two agents answering each other in an ended stage would
// otherwise go on for ever). Such an entry goes when the task ends, which
// may be long: an agent taking messages in many ended stages of a
// long-lived task (or of stages it was never allocated to, whose end it is
// not told of) would grow its list, and its stored document, with no
// bound of its own. So the list holds at most Config.MaxStageCounts
// entries. A message that would make one more sheds first those of stages
// and tasks that have ended and that no step or wait of the agent is in
// (endedCounts asks the tasks, shedCountsLocked drops them), then one of
// an ended stage still in use; only when no entry of an ended stage or
// task is left does a live one go (makeRoomLocked), and a warning, once
// per agent, says so.

// count returns the agent's count of a stage, made when it has none (at
// MaxStageCounts another goes first, makeRoomLocked). The pointer is into
// st.StageCounts: it holds until the list changes (the next count made,
// an entry dropped). a.mu must be held.
func (a *agent) count(k stageKey) *StageCount {
	i, ok := a.countAt(k)
	if !ok {
		if len(a.st.StageCounts) >= a.sys.cfg.MaxStageCounts {
			a.makeRoomLocked()
			i, _ = a.countAt(k)
		}
		a.st.StageCounts = slices.Insert(a.st.StageCounts, i, StageCount{TaskID: k.task, StageID: k.stage})
	}
	return &a.st.StageCounts[i]
}

// countOf returns the agent's count of a stage, nil when it has none.
// a.mu must be held.
func (a *agent) countOf(k stageKey) *StageCount {
	if i, ok := a.countAt(k); ok {
		return &a.st.StageCounts[i]
	}
	return nil
}

// countAt finds a stage's count in st.StageCounts, which is kept sorted
// by task and stage (CompareStageCounts): a manager of a hundred tasks
// looks its counts up at every step, and the store tells the list
// against an older copy of it by walking both in that order.
func (a *agent) countAt(k stageKey) (int, bool) {
	return slices.BinarySearchFunc(a.st.StageCounts, StageCount{TaskID: k.task, StageID: k.stage}, CompareStageCounts)
}

// dropCountsLocked forgets the counts of the stages that ended for the
// agent. a.mu must be held.
func (a *agent) dropCountsLocked(ended func(*StageCount) bool) {
	a.st.StageCounts = slices.DeleteFunc(a.st.StageCounts, func(c StageCount) bool { return ended(&c) })
}

// keyOf is the stage a count is of.
func keyOf(c *StageCount) stageKey { return stageKey{c.TaskID, c.StageID} }

// endedCounts returns, when the agent's counts are at MaxStageCounts and
// k is not among them (a message in k is about to make its count there),
// those of its counts whose stage or task has ended; nil otherwise. It
// asks their tasks, so the caller holds no lock (no path holds two
// owners' locks); what it finds stays true, since nothing that ended
// starts again.
func (a *agent) endedCounts(k stageKey) map[stageKey]bool {
	a.mu.lockToRead()
	var keys []stageKey
	if len(a.st.StageCounts) >= a.sys.cfg.MaxStageCounts {
		if _, ok := a.countAt(k); !ok {
			keys = make([]stageKey, len(a.st.StageCounts))
			for i := range a.st.StageCounts {
				keys[i] = keyOf(&a.st.StageCounts[i])
			}
		}
	}
	a.mu.unlockRead()
	if len(keys) == 0 {
		return nil
	}
	return a.sys.endedStages(keys)
}

// endedStages returns which of keys, sorted by task, are of a task that
// has ended (isEnded) or that the MAS does not know, or of a stage that
// has ended (finished or failed). Each task's stages are looked at once,
// in its readers' snapshot.
func (s *System) endedStages(keys []stageKey) map[stageKey]bool {
	ended := map[stageKey]bool{}
	for rest := keys; len(rest) > 0; {
		n := 1
		for n < len(rest) && rest[n].task == rest[0].task {
			n++
		}
		of := rest[:n]
		rest = rest[n:]
		t, ok := s.task(of[0].task)
		if !ok || s.isEnded(of[0].task) {
			for _, k := range of {
				ended[k] = true
			}
			continue
		}
		t.mu.peek(func(ts *TaskState) {
			for _, k := range of {
				i := slices.IndexFunc(ts.StageList, func(st StageState) bool { return st.StageID == k.stage })
				if i >= 0 && stateEnded(ts.StageList[i].ExecutionState) {
					ended[k] = true
				}
			}
		})
	}
	return ended
}

// stageOver reports whether a stage of a task is over for working memory
// (recordStepsLocked): the task has ended or the MAS does not know it, or
// the stage has ended (endedStages). It asks the task, so the caller holds
// no lock; what it finds over stays over.
func (s *System) stageOver(taskID, stageID string) bool {
	k := stageKey{taskID, stageID}
	return s.endedStages([]stageKey{k})[k]
}

// shedCountsLocked makes room for one more count at MaxStageCounts with
// ended (endedCounts): the counts of ended stages and tasks that no step
// or wait of the agent is in go, all of them (the next few messages find
// room without asking the tasks again); when none is, the first of an
// ended stage still in use goes (a conversation there starts its chain
// again, once). a.mu must be held.
func (a *agent) shedCountsLocked(ended map[stageKey]bool) {
	if len(ended) == 0 || len(a.st.StageCounts) < a.sys.cfg.MaxStageCounts {
		return
	}
	inUse := a.inUseLocked()
	a.dropCountsLocked(func(c *StageCount) bool { return ended[keyOf(c)] && !inUse[keyOf(c)] })
	if len(a.st.StageCounts) < a.sys.cfg.MaxStageCounts {
		return
	}
	if i := slices.IndexFunc(a.st.StageCounts, func(c StageCount) bool { return ended[keyOf(&c)] }); i >= 0 {
		a.st.StageCounts = slices.Delete(a.st.StageCounts, i, i+1)
	}
}

// makeRoomLocked drops counts until one more fits under MaxStageCounts,
// when none of an ended stage or task is known to be left: the first that
// no step or wait of the agent is in, else the first. What the dropped
// count held starts again (the stage's step budget, a conversation's
// chain), so the agent's first such drop is logged, naming the limit.
// a.mu must be held.
func (a *agent) makeRoomLocked() {
	limit := a.sys.cfg.MaxStageCounts
	inUse := a.inUseLocked()
	for len(a.st.StageCounts) >= limit && len(a.st.StageCounts) > 0 {
		i := slices.IndexFunc(a.st.StageCounts, func(c StageCount) bool { return !inUse[keyOf(&c)] })
		if i < 0 {
			i = 0
		}
		c := a.st.StageCounts[i]
		a.st.StageCounts = slices.Delete(a.st.StageCounts, i, i+1)
		if !a.countsShed {
			a.countsShed = true
			a.sys.log.Warn("stage counts: the agent holds its limit of them, none of a stage or task known to have ended: a live one is dropped, and what it counted (the stage's step budget, the chain of its last message) starts again; logged once for the agent",
				"agent", a.id, "limit", limit, "task", c.TaskID, "stage", c.StageID)
		}
	}
}

// inUseLocked is the set of stages the agent has a step in (running or
// to run) or waits in. a.mu must be held.
func (a *agent) inUseLocked() map[stageKey]bool {
	in := map[stageKey]bool{}
	if a.running != "" {
		in[a.runningKey] = true
	}
	for _, id := range a.st.AgentStep.TodoList {
		if s := a.stepLocked(id); s != nil {
			in[stageKey{s.TaskID, s.StageID}] = true
		}
	}
	for _, w := range a.st.Waits {
		in[stageKey{w.TaskID, w.StageID}] = true
	}
	return in
}
