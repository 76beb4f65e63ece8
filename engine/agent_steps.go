package engine

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"time"
)

// stepOpts carries what a new step inherits beyond its spec.
type stepOpts struct {
	replyTo         string
	returnWaitingID string
}

// plannedStepID is the ID addStepsLocked gives the i-th step origin plans
// (a new one when origin is "").
func plannedStepID(origin string, i int) string {
	return derivedID(origin, strconv.Itoa(i))
}

// addStepsLocked creates steps from specs in (taskID, stageID) and either
// appends them (add_step, spec §5.7, §6.3.1) or inserts them, in order,
// before the next pending step (add_next_step, spec §5.8, §6.3.2). Each is
// recorded in working memory, its stage opened there if need be (see
// followStepsLocked for steps that must not reopen a stage). An
// instruction_generation step is linked to
// the first tool step after it in the same list.
//
// origin (the step or message that plans them; "" for none) makes the step
// IDs derived: steps an origin adds again after a restart already exist and
// are not added twice.
func (a *agent) addStepsLocked(taskID, stageID string, specs []StepSpec, next bool, origin string, opts ...stepOpts) []string {
	return a.queueStepsLocked(true, taskID, stageID, specs, next, origin, opts...)
}

// followStepsLocked is addStepsLocked for steps that follow from what the
// agent has in a stage already (a step's plan, a wait's end, a guard's
// reflection or summary, an interrupt's instruction) or from a message in
// a stage that is over: they are recorded in working memory only under a
// stage it holds (recordStepsLocked), never reopening one that ended.
func (a *agent) followStepsLocked(taskID, stageID string, specs []StepSpec, next bool, origin string, opts ...stepOpts) []string {
	return a.queueStepsLocked(false, taskID, stageID, specs, next, origin, opts...)
}

// queueStepsLocked is addStepsLocked (open: the stage is opened in working
// memory if need be) and followStepsLocked (not).
func (a *agent) queueStepsLocked(open bool, taskID, stageID string, specs []StepSpec, next bool, origin string, opts ...stepOpts) []string {
	if len(specs) == 0 {
		return nil
	}
	now := a.sys.now()
	steps := make([]StepState, 0, len(specs))
	ids := make([]string, 0, len(specs))
	for i, sp := range specs {
		id := plannedStepID(origin, i)
		if origin != "" && a.stepLocked(id) != nil {
			continue
		}
		st := StepState{
			TaskID:         taskID,
			StageID:        stageID,
			AgentID:        a.id,
			StepID:         id,
			StepIntention:  sp.StepIntention,
			Type:           sp.Type,
			Executor:       sp.Executor,
			ExecutionState: StateInit,
			TextContent:    sp.TextContent,
			CreatedAt:      now,
		}
		if i < len(opts) {
			st.ReplyTo = opts[i].replyTo
			st.ReturnWaitingID = opts[i].returnWaitingID
		}
		steps = append(steps, st)
		ids = append(ids, id)
	}
	if len(steps) == 0 {
		return nil
	}
	for i := range steps {
		if steps[i].Executor != SkillInstructionGeneration {
			continue
		}
		for j := i + 1; j < len(steps); j++ {
			if steps[j].Type == StepTool {
				steps[i].TargetStepID = steps[j].StepID
				break
			}
		}
	}

	as := &a.st.AgentStep
	at := len(as.StepList)
	if next && len(as.TodoList) > 0 {
		// Insert before the step that was next, keeping step_list in
		// execution order.
		if p := a.stepPosLocked(as.TodoList[0]); p >= 0 {
			at = p
		}
		as.TodoList = slices.Insert(as.TodoList, 0, ids...)
	} else {
		as.TodoList = append(as.TodoList, ids...)
	}
	whole := a.indexWholeLocked()
	as.StepList = slices.Insert(as.StepList, at, steps...)
	a.reindexFromLocked(whole, at, nil) // the steps from at on are new or moved
	if open {
		a.rememberLocked(taskID, stageID, ids...)
	} else {
		a.recordStepsLocked(taskID, stageID, ids)
	}
	for i := range steps {
		a.changedLocked(Event{Kind: EventStepChanged, StepID: ids[i], TaskID: taskID, StageID: stageID, Detail: StateInit})
	}
	a.mu.wakeLocked()
	return ids
}

// rememberLocked records step IDs (or just the task and stage) in working
// memory: {task_id: {stage_id: [step_id…]}} (spec §2.4.1).
func (a *agent) rememberLocked(taskID, stageID string, stepIDs ...string) {
	wm := a.st.WorkingMemory
	if wm[taskID] == nil {
		wm[taskID] = map[string][]string{}
	}
	if stageID == "" {
		return
	}
	// A task's map of stages is replaced, never changed in place, and a
	// stage's list only grows at its end or is replaced: the committed
	// copies share them (AgentState.commitCopy), each seeing its own
	// length of a list (an append writes past the end of what they see,
	// or into a new array).
	stages := maps.Clone(wm[taskID])
	list := stages[stageID]
	if list == nil {
		list = []string{}
	}
	stages[stageID] = append(list, stepIDs...)
	wm[taskID] = stages
}

// recordStepsLocked records new steps in working memory, in their stage
// when working memory holds it (or they belong to no stage). A stage it
// does not hold is not put back: it has ended for the agent (finish_stage
// dropped it). Only what starts work in a stage opens it there
// (rememberLocked, addStepsLocked): its start_stage instruction, an
// update_working_memory, a message in it while it runs (receive), an
// operator's step there. Otherwise a message taken in an ended stage
// (stage_relative names any stage of the task), and the steps its
// processing plans, would grow working memory again with stages that
// are over, bounded only by the agent document's size bound.
func (a *agent) recordStepsLocked(taskID, stageID string, ids []string) {
	if stageID != "" && stageID != NoRelative {
		if _, open := a.st.WorkingMemory[taskID][stageID]; !open {
			return
		}
	}
	a.rememberLocked(taskID, stageID, ids...)
}

// holdsStage reports whether the agent's working memory holds the stage
// of the task (a message outside stages, NoRelative, always counts).
func (a *agent) holdsStage(taskID, stageID string) bool {
	if stageID == "" || stageID == NoRelative {
		return true
	}
	a.mu.lockToRead()
	defer a.mu.unlockRead()
	_, open := a.st.WorkingMemory[taskID][stageID]
	return open
}

// forgetStageLocked drops a stage from the agent's working memory (a
// copy of the task's stages replaces them, as in rememberLocked).
func (a *agent) forgetStageLocked(taskID, stageID string) {
	if stages := a.st.WorkingMemory[taskID]; stages != nil {
		stages = maps.Clone(stages)
		delete(stages, stageID)
		a.st.WorkingMemory[taskID] = stages
	}
}

// removeStepsLocked deletes the steps matching drop from the step list and
// the todo list (spec §2.4.1 step cleanup). A running step that matches is
// cancelled. A todo list that lost steps wakes the loop, which works the
// agent's working state out again (popLocked): with the steps of a paused
// task gone, it would otherwise read "paused" with nothing held.
func (a *agent) removeStepsLocked(drop func(*StepState) bool) int {
	as := &a.st.AgentStep
	whole, from := a.indexWholeLocked(), -1
	removed := map[string]bool{}
	kept := as.StepList[:0]
	for i := range as.StepList {
		s := &as.StepList[i]
		if drop(s) {
			if from < 0 {
				from = i
			}
			removed[s.StepID] = true
			if s.StepID == a.running && a.cancelRun != nil {
				a.cancelRun()
			}
			continue
		}
		kept = append(kept, *s)
	}
	clear(as.StepList[len(kept):])
	as.StepList = kept
	if from >= 0 {
		a.reindexFromLocked(whole, from, removed)
	}
	queued := len(as.TodoList)
	as.TodoList = slices.DeleteFunc(as.TodoList, func(id string) bool { return removed[id] })
	if len(as.TodoList) < queued {
		a.mu.wakeLocked()
	}
	return len(removed)
}

// finishStepLocked records a step's outcome. It returns false when the step
// is gone (cleaned up by a finish_stage/finish_task while it ran). report,
// when set, makes the report the step's task is to take from the step as
// it ended: it is stored with the step's end, in the same write
// (docs/engine.md "A step's end").
func (a *agent) finishStepLocked(id, state string, result map[string]any, report func(*StepState) *StepReport) (*StepState, bool) {
	s := a.stepLocked(id)
	if s == nil {
		return nil, false
	}
	now := a.sys.now()
	a.sys.endStep(s, state, now, result)
	a.outboxLocked(report, s)
	a.changedLocked(Event{Kind: EventStepChanged, StepID: id, TaskID: s.TaskID, StageID: s.StageID, Detail: state})
	if err := a.mu.syncLocked(); err != nil {
		// The outcome was refused (and taken back): the step fails
		// visibly instead, without the result that could not be stored.
		if s = a.stepLocked(id); s == nil {
			return nil, false
		}
		s.ExecutionState = StateFailed
		s.FinishedAt = now
		s.ExecuteResult = map[string]any{"error": "the step's outcome could not be stored: " + err.Error()}
		a.outboxLocked(report, s)
		a.changedLocked(Event{Kind: EventStepChanged, StepID: id, TaskID: s.TaskID, StageID: s.StageID, Detail: StateFailed})
		// If the store refuses this too (an outage), the failed outcome
		// is kept in memory, unannounced, and written by the owner's
		// retries once the store is back (owner.go); the agent starts no
		// step meanwhile. Withdrawn, it would leave the step as stored:
		// "running" (a tool step's start is stored) or queued (an LLM
		// step's is not), marked running again here with nobody to run
		// it, and no one told (the liveness promise). Putting it back to
		// run again instead would repeat a tool call that may not be safe
		// to repeat: only a restart decides that, by the crash rules,
		// which still apply to what the store holds if the process dies
		// before a retry succeeds.
		a.mu.keepLocked()
		if err := a.mu.syncLocked(); err != nil {
			a.sys.log.Error("store: a step's failed outcome refused too: kept until the store takes it", "agent", a.id, "step", id, "err", err)
			if s = a.stepLocked(id); s == nil {
				return nil, false
			}
		}
	}
	a.sys.trailStep(s)
	if s.TaskID == a.sys.baseTaskID {
		a.pruneBaseLocked()
		s = a.stepLocked(id)
	}
	return s, s != nil
}

// trailDroppedLocked records in the trail the end of a step its stage's or
// task's end dropped from the step list while it ran: finishStepLocked,
// which records every other step's end, finds it gone. step is the step as
// it started; it ended in state with result, having used usage. a.mu must
// be held.
func (a *agent) trailDroppedLocked(step *StepState, state string, result map[string]any, usage Usage) {
	st := step.clone()
	a.sys.endStep(&st, state, a.sys.now(), result)
	st.Usage.Add(usage)
	a.sys.trailStep(&st)
}

// endStep ends s in state at now: result merged over what its result held,
// clipped to MaxTextChars.
func (s *System) endStep(st *StepState, state string, now time.Time, result map[string]any) {
	st.ExecutionState = state
	st.FinishedAt = now
	merged := make(map[string]any, len(st.ExecuteResult)+len(result))
	maps.Copy(merged, st.ExecuteResult)
	maps.Copy(merged, result)
	st.ExecuteResult, _ = s.clipValue(jsonShaped(merged), s.cfg.MaxTextChars).(map[string]any)
}

// outboxLocked puts the report made from a step as it ends with the
// agent's reports, in place of one made before for the same step (whose
// write the store refused). a.mu is held.
func (a *agent) outboxLocked(report func(*StepState) *StepReport, s *StepState) {
	if report == nil {
		return
	}
	r := report(s)
	if r == nil {
		return
	}
	a.st.Reports = slices.DeleteFunc(a.st.Reports, func(o StepReport) bool { return o.StepID == r.StepID })
	a.st.Reports = append(a.st.Reports, *r)
}

// reportStored drops a report its task has stored: the agent's next write
// goes without it (none is made for this alone).
func (a *agent) reportStored(stepID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.st.Reports = slices.DeleteFunc(a.st.Reports, func(r StepReport) bool { return r.StepID == stepID })
}

// baseHistory is how many finished steps of the base task an agent keeps.
// The base task never ends (spec §1.1), so the spec's cleanup on
// finish_stage/finish_task never reaches its steps: the oldest finished ones
// are dropped instead, keeping memory and each step's work bounded.
const baseHistory = 100

// pruneBaseLocked drops the oldest finished steps of the base task, keeping
// baseHistory of them.
func (a *agent) pruneBaseLocked() {
	done := 0
	for i := range a.st.AgentStep.StepList {
		s := &a.st.AgentStep.StepList[i]
		if s.TaskID == a.sys.baseTaskID && stateEnded(s.ExecutionState) {
			done++
		}
	}
	// In batches: prune only past twice the limit, down to the limit.
	if done <= 2*baseHistory {
		return
	}
	excess := done - baseHistory
	dropped := map[string]bool{}
	a.removeStepsLocked(func(s *StepState) bool {
		if excess > 0 && s.TaskID == a.sys.baseTaskID && stateEnded(s.ExecutionState) {
			excess--
			dropped[s.StepID] = true
			return true
		}
		return false
	})
	if stages := a.st.WorkingMemory[a.sys.baseTaskID]; stages != nil {
		kept := make(map[string][]string, len(stages)) // replaced, as in rememberLocked
		for stage, ids := range stages {
			kept[stage] = slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return dropped[id] })
		}
		a.st.WorkingMemory[a.sys.baseTaskID] = kept
	}
}

// jsonShaped returns m as it reads after a JSON round trip: only maps,
// slices, strings, float64s, bools and nils. Results are stored that way so
// that snapshots can deep-copy them structurally, and so that they look the
// same before and after the durable store.
func jsonShaped(m map[string]any) map[string]any {
	b, err := json.Marshal(m)
	if err != nil {
		return map[string]any{"error": "execute_result is not JSON: " + err.Error()}
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		return map[string]any{"error": "execute_result is not JSON: " + err.Error()}
	}
	return out
}
