package engine

import (
	"context"
	"slices"
	"time"
)

// stageKey names one (task, stage) pair of an agent's work.
type stageKey struct{ task, stage string }

// agent owns one AgentState. LLM agents run their steps on their own
// goroutine; HumanAgents have none (spec §7: their actions are recorded as
// finished steps). Every mutation happens under mu, and nothing under mu
// calls another owner.
type agent struct {
	sys  *System
	id   string
	kind string
	// wake is signalled (never blocking) whenever the agent may have work.
	wake chan struct{}

	mu ownerMu[AgentState] // the single writer's lock (owner.go)
	st AgentState          // guarded by mu
	// running is the step being executed, and cancelRun cancels it.
	running    string
	runningKey stageKey
	cancelRun  context.CancelFunc
	// lastTask is the task of the step the agent started last: a change of
	// its working state that follows (idle, waiting, paused) is that
	// task's, and its event names it (setWorkingLocked).
	lastTask  string
	stopRun   *stopRequest // an operator's stop of the running step
	waitTimer *time.Timer
	stopped   bool
	// passwordHash is a HumanAgent's login secret (spec §7.4.1); it is never
	// part of AgentState.
	passwordHash []byte
	// ended caches the estimated stored size of ended steps, which do not
	// change but when boundLocked shortens them (bounds.go); endedAt holds
	// the same by the steps' positions in the list, as last sized.
	ended   map[string]endedStep
	endedAt []endedMemo
	// pending caches the estimated stored size of steps not ended yet,
	// whose texts are written once (bounds.go): a manager of a hundred
	// tasks holds hundreds of them, sized at every commit.
	pending map[string]pendingSize
	// received indexes st.Received (seenLocked); nil when it must be
	// made again. stepIndex indexes the step list (stepPosLocked).
	received  map[string]struct{}
	stepIndex map[string]int
	stepDups  int // IDs the list holds twice (a damaged document's)
	// reporting is closed once the task of the agent's last step has
	// stored its report (storeReport); nil when none is on its way. Only
	// the agent's loop uses it.
	reporting chan struct{}
	// viewSteps is the array the running step's view lists its steps in,
	// reused by the next step's view (viewLocked). Guarded by mu.
	viewSteps []StepState
	// countsShed is set once a live stage count was dropped for room
	// (makeRoomLocked), which is logged once. Guarded by mu.
	countsShed bool
	// answering holds the IDs of the questions a HumanAgent's answer is
	// being stored for (humanSend, without the lock): no second answer
	// takes them meanwhile. Not part of the state.
	answering map[string]bool
}

func newAgentOwner(s *System, st AgentState) *agent {
	a := &agent{
		sys:  s,
		id:   st.AgentID,
		kind: st.Kind,
		wake: make(chan struct{}, 1),
		st:   st,
	}
	a.mu.ops = ownerOps[AgentState]{
		copy:     a.st.commitCopy,
		reuses:   true,
		clone:    (*AgentState).clone,
		restore:  a.restoreLocked,
		announce: s.publish,
		wake:     a.signal,
		refused: func(err error) {
			s.log.Error("store: put agent refused: change withdrawn or kept for a retry", "agent", a.id, "err", err)
		},
		tightened: func(err error) {
			s.log.Warn("store: the agent's document is too large for the store: bounded harder and written again", tooLargeAttrs("agent", a.id, err)...)
		},
		withdrawn: func(err error, changes int) {
			s.log.Error("store: the agent's document is too large for the store even bounded harder: its changes since the last write are withdrawn, not retried",
				append(tooLargeAttrs("agent", a.id, err), "changes", changes)...)
		},
	}
	if store := s.cfg.Store; store != nil {
		a.mu.ops.put = func(doc *AgentState) error { return store.PutAgent(s.storeCtx, doc) }
		// The document is bounded as it is copied to be written, once per
		// commit (a commit may hold many changes; sizing it walks every
		// step, a thousand for a manager of a hundred tasks).
		a.mu.ops.bound = a.boundLocked
		// A refused commit is retried until the store takes one: changes
		// kept in memory through an outage (a message taken, a wait
		// released) must reach the store, and the agent's loop, held
		// meanwhile, must be woken when they do.
		a.mu.ops.retry = true
		if r, ok := store.(StoreReader); ok {
			a.mu.ops.readBack = func() (AgentState, error) { return r.ReadAgent(s.storeCtx, a.id) }
		}
		// Readers see the state as created or restored until the first
		// commit replaces it.
		first := st.clone()
		a.mu.snap.Store(&first)
	}
	return a
}

// signal wakes the agent's loop without blocking.
func (a *agent) signal() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// stop ends the loop; the running step's context is cancelled.
func (a *agent) stop() {
	a.mu.Lock()
	a.stopped = true
	a.mu.closeLocked()
	if a.cancelRun != nil {
		a.cancelRun()
	}
	if a.waitTimer != nil {
		a.waitTimer.Stop()
	}
	a.mu.Unlock()
	a.signal()
}

// announceLocked stamps a change that needs no store write of its own (an
// LLM step started: after a crash it just runs again) and announces it
// once every change before it is stored. mu must be held.
func (a *agent) announceLocked(ev Event) {
	a.st.UpdatedAt = a.sys.now()
	a.mu.change(a.event(ev), false)
}

// changedLocked stamps a change and records it, to be stored and then
// announced when mu is released (owner.go). A change the store refuses is
// withdrawn: the agent takes back the document the store holds, so memory
// never runs ahead of the store; callers whose change must not vanish
// silently learn of it from mu.syncLocked and turn it into a failed step,
// and changes nobody could be told of are kept for the retries instead
// (mu.keepLocked, owner.go).
func (a *agent) changedLocked(ev Event) {
	a.st.UpdatedAt = a.sys.now()
	a.mu.change(a.event(ev), true)
}

// event completes an event about the agent.
func (a *agent) event(ev Event) Event {
	if ev.Kind == "" {
		ev.Kind = EventAgentChanged
	}
	ev.AgentID = a.id
	return ev
}

// restoreLocked takes back the document the store holds after a refused
// write.
func (a *agent) restoreLocked(got AgentState) {
	// The reports stay as they are in memory: those the stored document
	// still lists but a task has stored since are not taken back
	// (reportStored dropped them, without a write of their own). So do
	// the stage counts: the steps counted ran, whatever the store holds
	// of their ends, and the next commit writes them.
	reports, counts := a.st.Reports, a.st.StageCounts
	a.st = got
	a.st.Reports, a.st.StageCounts = reports, counts
	a.ended, a.endedAt, a.received, a.stepIndex, a.stepDups = nil, nil, nil, nil, 0
	// An LLM step is not written when it starts (a restart just runs it
	// again): the stored document may still list the running step as
	// next. It is running here.
	if a.running != "" {
		a.st.AgentStep.TodoList = slices.DeleteFunc(a.st.AgentStep.TodoList, func(id string) bool { return id == a.running })
		if s := a.stepLocked(a.running); s != nil && s.ExecutionState == StateInit {
			s.ExecutionState = StateRunning
		}
	}
	// The refused write may have released waits (a reply, a timeout, a
	// reply that can no longer come) that are now back. Each must again
	// have a timer and its place in the wait graph, or the agent would
	// wait for ever with nobody told: the liveness promise says every
	// wait ends. The timer of a deadline already past fires at once and
	// tries the release again. The loop is woken because what it can run
	// may have changed both ways.
	a.sys.waits.reset(a.id, a.st.Waits)
	a.armTimerLocked()
	a.signal()
}

// snapshot returns a deep copy of the agent's state.
func (a *agent) snapshot() AgentState {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st.clone()
}

func (a *agent) brief() AgentBrief {
	a.mu.Lock()
	defer a.mu.Unlock()
	return briefOf(&a.st)
}

func briefOf(st *AgentState) AgentBrief {
	return AgentBrief{
		AgentID: st.AgentID, Name: st.Name, Role: st.Role, Profile: st.Profile,
		Kind: st.Kind, WorkingState: st.WorkingState,
		Skills: slices.Clone(st.Skills), Tools: slices.Clone(st.Tools),
	}
}

// loop runs the agent's steps one at a time until the MAS closes (spec §6.1).
// It blocks on wake when the todo list is empty or the step lock is engaged.
func (a *agent) loop() {
	for {
		ctx, step, view, ok := a.next()
		if !ok {
			return
		}
		a.runStep(ctx, step, view)
	}
}

// next waits for the next runnable step, marks it running and returns it
// with a snapshot of the agent and the context it runs under (cancelled if
// its stage or task ends meanwhile). ok is false once the agent is stopped.
func (a *agent) next() (context.Context, StepState, AgentState, bool) {
	for {
		a.mu.Lock()
		if a.stopped || a.sys.ctx.Err() != nil {
			a.mu.Unlock()
			return nil, StepState{}, AgentState{}, false
		}
		if step, ok := a.popLocked(); ok {
			ctx, cancel := context.WithCancel(a.sys.ctx)
			a.cancelRun = cancel
			view := a.viewLocked(&step)
			a.mu.Unlock()
			// Not under the agent's lock: it reads the tasks.
			a.sys.stepMemory(&view, step.TaskID)
			return ctx, step, view, true
		}
		a.mu.Unlock()
		<-a.wake
	}
}

// popLocked takes the next step to run, applying the step lock and the stage
// budgets. It returns false when there is nothing to run now.
func (a *agent) popLocked() (StepState, bool) {
	if a.mu.refusedLocked() {
		// The store refused the agent's last commit: memory may hold
		// changes it lacks (a message taken, a step queued), kept for the
		// owner's retries. A step started now would act on them before
		// they are durable, and a step whose start or outcome is then
		// refused again would only be run again: the agent pauses until
		// a commit succeeds, which wakes it (owner.go). Its working state
		// is left as it is, since changing it would be one more write the
		// store refuses.
		return StepState{}, false
	}
	for {
		if a.lockHoldsLocked() {
			a.setWorkingLocked(WorkingWaiting)
			return StepState{}, false
		}
		at, paused := a.nextRunnableLocked()
		if at < 0 {
			if paused || len(a.st.StepLock) > 0 { // its waits are in paused tasks
				a.setWorkingLocked(WorkingPaused)
			} else {
				a.setWorkingLocked(WorkingIdle)
			}
			return StepState{}, false
		}
		id := a.st.AgentStep.TodoList[at]
		a.st.AgentStep.TodoList = slices.Delete(a.st.AgentStep.TodoList, at, at+1)
		step := a.stepLocked(id)
		if step == nil {
			continue
		}
		if a.sys.isEnded(step.TaskID) {
			// Its task ended: the task's finish_task instruction drops
			// its steps, and may not have come yet (a restart sends
			// again one a crash lost, after the loops run). Nothing of
			// an ended task runs: they go now.
			a.dropTaskLocked(step.TaskID)
			continue
		}
		if a.budgetLocked(step) {
			continue
		}
		now := a.sys.now()
		step.ExecutionState = StateRunning
		step.StartedAt = now
		// A record of a call waiting on the operator is the running
		// step's: one left by an earlier step (its settle refused by the
		// store) must not be read as this one's at a restart.
		a.st.CallWaitsOn = ""
		a.running = step.StepID
		a.runningKey = stageKey{step.TaskID, step.StageID}
		a.lastTask = step.TaskID
		a.st.WorkingState = WorkingWorking
		ev := Event{Kind: EventStepChanged, StepID: step.StepID, TaskID: step.TaskID, StageID: step.StageID, Detail: StateRunning}
		if step.Type == StepTool {
			// Durable before the call: after a crash, a tool step found
			// running is not repeated unless it is safe to. A start the
			// store refuses is not run: the call would be made with the
			// store not knowing of it, and a crash would then repeat it.
			// The step waits for the store instead (the agent starts no
			// step until one of its commits succeeds).
			a.changedLocked(ev)
			id := step.StepID
			if err := a.mu.syncLocked(); err != nil {
				a.sys.log.Error("store: a tool step's start refused: the call waits for the store", "agent", a.id, "step", id, "err", err)
				a.notStartedLocked(id)
				return StepState{}, false
			}
			// The lock was released during the write: the step is
			// looked up again.
			if step = a.stepLocked(id); step == nil || a.running != id {
				return StepState{}, false
			}
		} else {
			// An LLM step found "init" after a crash just runs (again):
			// no write needed before it starts.
			a.announceLocked(ev)
		}
		return step.clone(), true
	}
}

// notStartedLocked puts back a step whose start was refused: queued first,
// to run once the store takes writes, as the store holds it.
func (a *agent) notStartedLocked(id string) {
	if a.running == id {
		a.running, a.runningKey = "", stageKey{}
	}
	s := a.stepLocked(id)
	if s == nil || s.ExecutionState != StateRunning {
		return
	}
	s.ExecutionState, s.StartedAt = StateInit, time.Time{}
	if !slices.Contains(a.st.AgentStep.TodoList, id) {
		a.st.AgentStep.TodoList = slices.Insert(a.st.AgentStep.TodoList, 0, id)
	}
}

// viewLocked is the executor's copy of the agent: everything, but of the step
// list only the steps of the running step's task and stage (all any skill
// reads, spec §5.6, §5.9, §10.3), so a long-lived agent's older work does
// not make every step slower.
func (a *agent) viewLocked(step *StepState) AgentState {
	// The view holds what the step is about, not the agent's whole
	// history: a manager with a hundred tasks in flight would otherwise
	// copy every task's steps and memory for each step it runs.
	all, wm, received := a.st.AgentStep.StepList, a.st.WorkingMemory, a.st.Received
	a.st.AgentStep.StepList, a.st.WorkingMemory, a.st.Received = nil, nil, nil
	view := a.st.clone()
	a.st.AgentStep.StepList, a.st.WorkingMemory, a.st.Received = all, wm, received
	if stages, ok := wm[step.TaskID]; ok {
		// Shared: a task's map of stages is replaced, never changed in
		// place, and a stage's list only grows past what a copy sees
		// (rememberLocked).
		view.WorkingMemory[step.TaskID] = stages
	}
	// The steps go into the array the previous step's view used: that
	// view is dead once its step returned (ExecInput.Agent), and a stage
	// of a hundred steps would otherwise allocate tens of kilobytes per
	// step, each allocation bringing the next garbage collection closer
	// (the collector is where the steps' and hops' slowest percent
	// comes from).
	list := a.viewSteps[:0]
	for i := range all {
		st := &all[i]
		if st.TaskID != step.TaskID || st.StageID != step.StageID {
			continue
		}
		if st.ended() {
			// Never changed in place (state.go, commitCopy), and
			// executors only read their view: shared, not copied, so a
			// step costs in proportion to what changed, not to the
			// stage's history.
			list = append(list, *st)
			continue
		}
		list = append(list, st.clone())
	}
	// What the array held past this view is let go of.
	clear(list[len(list):cap(list)])
	a.viewSteps = list
	view.AgentStep.StepList = slices.Clip(list)
	return view
}

// awaitReport waits until the task of the agent's last step has stored its
// report: one report at a time is on its way.
func (a *agent) awaitReport() {
	if a.reporting != nil {
		<-a.reporting
		a.reporting = nil
	}
}

func (a *agent) setWorkingLocked(ws string) {
	if a.st.WorkingState == ws {
		return
	}
	a.st.WorkingState = ws
	a.changedLocked(Event{TaskID: a.lastTask, Detail: ws})
}

// budgetLocked enforces the stage budgets (beyond the spec) on a step about
// to run. It returns true when the step was consumed (skipped or replaced).
func (a *agent) budgetLocked(step *StepState) bool {
	if step.StageID == NoRelative || step.TaskID == a.sys.baseTaskID {
		return a.unstagedBudgetLocked(step)
	}
	c := a.count(stageKey{step.TaskID, step.StageID})
	switch {
	case step.Executor == SkillSummary:
		return false
	case c.Steps >= a.sys.cfg.StageStepBudget && step.Type == StepSkill && isMessageStep(step):
		// Messages still get answered: others may be waiting on them.
		return false
	case c.Steps >= a.sys.cfg.StageStepBudget:
		reason := a.sys.text("budget_steps", map[string]any{"Budget": a.sys.cfg.StageStepBudget})
		a.skipLocked(step, reason)
		a.dropPlannedLocked(step.TaskID, step.StageID, reason)
		a.ensureSummaryLocked(step.TaskID, step.StageID, reason)
		return true
	case step.Executor == SkillReflection && c.Reflections >= a.sys.cfg.StageReflectionBudget:
		reason := a.sys.text("budget_reflections", map[string]any{"Budget": a.sys.cfg.StageReflectionBudget})
		a.skipLocked(step, reason)
		a.ensureSummaryLocked(step.TaskID, step.StageID, reason)
		return true
	}
	return false
}

// unstagedBudgetLocked bounds the steps an agent runs outside any stage
// (in the base task, or a task's no_relative steps), where no stage budget
// or stage end ever stops a plan that plans again: UnstagedStepBudget of
// them in a row without new input (freshInputLocked starts the count
// again). Past it the step and the planned steps queued there
// are skipped, with the reason; message steps still run. It reports
// whether the step was skipped. a.mu must be held.
func (a *agent) unstagedBudgetLocked(step *StepState) bool {
	c := a.count(stageKey{step.TaskID, step.StageID})
	if c.Steps < a.sys.cfg.UnstagedStepBudget || isMessageStep(step) {
		return false
	}
	reason := a.sys.text("budget_unstaged", map[string]any{"Budget": a.sys.cfg.UnstagedStepBudget})
	a.skipLocked(step, reason)
	a.dropPlannedLocked(step.TaskID, step.StageID, reason)
	a.sys.log.Warn("steps outside any stage skipped: their budget is spent until a message comes", "agent", a.id, "task", step.TaskID, "budget", a.sys.cfg.UnstagedStepBudget)
	return true
}

// freshInputLocked gives the steps outside any stage that new input leads
// to (a message from an agent, an operator or the engine, an operator's
// interrupt) their budget again (unstagedBudgetLocked). a.mu must be held.
func (a *agent) freshInputLocked(taskID, stageID string) {
	if taskID != a.sys.baseTaskID && stageID != NoRelative {
		return
	}
	if c := a.countOf(stageKey{taskID, stageID}); c != nil {
		c.Steps = 0
	}
}

// isMessageStep reports whether a step answers or digests a message.
func isMessageStep(s *StepState) bool {
	return s.Executor == SkillProcessMessage || (s.Executor == SkillSendMessage && s.ReplyTo != "")
}

// skipLocked fails a step that will not run.
func (a *agent) skipLocked(step *StepState, reason string) {
	now := a.sys.now()
	step.ExecutionState = StateFailed
	step.FinishedAt = now
	step.ExecuteResult = map[string]any{"error": reason, "skipped": true}
	a.changedLocked(Event{Kind: EventStepChanged, StepID: step.StepID, TaskID: step.TaskID, StageID: step.StageID, Detail: StateFailed})
}

// dropPlannedLocked skips the pending planned steps of a stage (not the
// message steps).
func (a *agent) dropPlannedLocked(taskID, stageID, reason string) {
	kept := a.st.AgentStep.TodoList[:0]
	for _, id := range a.st.AgentStep.TodoList {
		s := a.stepLocked(id)
		if s != nil && s.TaskID == taskID && s.StageID == stageID && !isMessageStep(s) && s.Executor != SkillSummary {
			a.skipLocked(s, reason)
			continue
		}
		kept = append(kept, id)
	}
	a.st.AgentStep.TodoList = kept
}

// ensureSummaryLocked appends a summary step to a stage unless one is pending.
func (a *agent) ensureSummaryLocked(taskID, stageID, reason string) {
	for _, id := range a.st.AgentStep.TodoList {
		if s := a.stepLocked(id); s != nil && s.TaskID == taskID && s.StageID == stageID && s.Executor == SkillSummary {
			return
		}
	}
	a.followStepsLocked(taskID, stageID, []StepSpec{a.sys.summarySpec(reason)}, false, "")
}

// stepLocked finds a step by ID.
func (a *agent) stepLocked(id string) *StepState {
	if i := a.stepPosLocked(id); i >= 0 {
		return &a.st.AgentStep.StepList[i]
	}
	return nil
}

// stepPosLocked is the position of step id in the step list, -1 when it
// is not there. It is found through an index of the list (a manager's
// list has hundreds of steps, and a step is looked up several times per
// change), made again whenever it does not hold one entry per step (a
// step added or removed without it) or gives a position where another
// step is. Steps added or removed keep it whole (addStepsLocked,
// removeStepsLocked).
func (a *agent) stepPosLocked(id string) int {
	list := a.st.AgentStep.StepList
	if !a.indexWholeLocked() {
		a.indexStepsLocked()
	}
	i, ok := a.stepIndex[id]
	if ok && (i >= len(list) || list[i].StepID != id) {
		a.indexStepsLocked()
		i, ok = a.stepIndex[id]
	}
	if !ok {
		return -1
	}
	return i
}

// indexWholeLocked reports whether the index holds one entry per step
// (an ID a damaged document lists twice counts once, stepDups).
func (a *agent) indexWholeLocked() bool {
	return a.stepIndex != nil && len(a.stepIndex)+a.stepDups == len(a.st.AgentStep.StepList)
}

// indexStepsLocked makes the index of the step list again. Of an ID listed
// twice, the first step is the one found, as a walk of the list finds it.
func (a *agent) indexStepsLocked() {
	list := a.st.AgentStep.StepList
	a.stepIndex, a.stepDups = make(map[string]int, len(list)), 0
	for i := range list {
		if _, twice := a.stepIndex[list[i].StepID]; twice {
			a.stepDups++
			continue
		}
		a.stepIndex[list[i].StepID] = i
	}
}

// reindexFromLocked brings a whole index up to date after steps were
// inserted or removed at position from: the steps from there on moved.
// Only an index without duplicates is brought up to date; another is
// made again at the next lookup. gone holds the IDs removed.
func (a *agent) reindexFromLocked(whole bool, from int, gone map[string]bool) {
	if !whole || a.stepDups > 0 {
		a.stepIndex = nil
		return
	}
	for id := range gone {
		delete(a.stepIndex, id)
	}
	list := a.st.AgentStep.StepList
	for j := from; j < len(list); j++ {
		a.stepIndex[list[j].StepID] = j
	}
}

// pendingInLocked reports whether the agent has a pending step in a stage.
func (a *agent) pendingInLocked(taskID, stageID string) bool {
	for _, id := range a.st.AgentStep.TodoList {
		if s := a.stepLocked(id); s != nil && s.TaskID == taskID && s.StageID == stageID {
			return true
		}
	}
	return false
}

// waitsInLocked reports whether a step-lock entry belongs to the stage.
func (a *agent) waitsInLocked(taskID, stageID string) bool {
	return slices.ContainsFunc(a.st.Waits, func(w Wait) bool { return w.TaskID == taskID && w.StageID == stageID })
}

// busyIn reports whether the agent runs a step of the task, has one in its
// todo list, or waits in it (supervision's busy).
func (a *agent) busyIn(taskID string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return (a.running != "" && a.runningKey.task == taskID) ||
		slices.ContainsFunc(a.st.Waits, func(w Wait) bool { return w.TaskID == taskID }) ||
		slices.ContainsFunc(a.st.AgentStep.TodoList, func(id string) bool {
			s := a.stepLocked(id)
			return s != nil && s.TaskID == taskID
		})
}

// endedIn is what supervision reads of an agent's ended steps in a task
// (endedStepsIn): the newest, the newest finished well, the newest failed,
// and how many failed (copies; nil when there is none).
type endedIn struct {
	last, good, failure *StepState
	failed              int
}

// endedStepsIn reads the agent's ended steps in the task.
func (a *agent) endedStepsIn(taskID string) endedIn {
	a.mu.Lock()
	defer a.mu.Unlock()
	var e endedIn
	newer := func(have *StepState, sp *StepState) bool { return have == nil || sp.FinishedAt.After(have.FinishedAt) }
	for i := range a.st.AgentStep.StepList {
		sp := &a.st.AgentStep.StepList[i]
		if sp.TaskID != taskID || (sp.ExecutionState != StateFinished && sp.ExecutionState != StateFailed) {
			continue
		}
		if newer(e.last, sp) {
			e.last = sp
		}
		if sp.ExecutionState == StateFinished && newer(e.good, sp) {
			e.good = sp
		}
		if sp.ExecutionState == StateFailed {
			e.failed++
			if newer(e.failure, sp) {
				e.failure = sp
			}
		}
	}
	for _, p := range []**StepState{&e.last, &e.good, &e.failure} {
		if *p != nil {
			c := **p
			*p = &c
		}
	}
	return e
}

// errorOf is a failed step's error.
func errorOf(sp *StepState) string {
	reason, _ := sp.ExecuteResult["error"].(string)
	return reason
}

// queued is the length of the agent's todo list and its working state
// (telemetry's gauges).
func (a *agent) queued() (int, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.st.AgentStep.TodoList), a.st.WorkingState
}

// notRunning clears the running step once its output is applied.
func (a *agent) notRunning() {
	a.mu.Lock()
	a.running = ""
	a.mu.Unlock()
}
