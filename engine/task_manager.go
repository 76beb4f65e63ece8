package engine

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// AddTaskRequest hands the MAS a task (the operator's add_task).
type AddTaskRequest struct {
	TaskName      string `json:"task_name"`
	TaskIntention string `json:"task_intention"`
	// Manager optionally names the task's manager agent.
	Manager string `json:"task_manager,omitempty"`
	// Budget overrides the MAS's default limits (budget_tokens.go).
	Budget *BudgetLimits `json:"budget,omitempty"`
	// TraceParent is the W3C trace context of the request that adds the
	// task (optional): the task's trace continues it.
	TraceParent string `json:"-"`
}

// AddTask creates a task for an operator (or any agent) and hands it to its
// manager, who is told to staff and stage it. It returns at once with the
// new task's ID; it never waits on LLM work.
func (s *System) AddTask(actorID string, req AddTaskRequest) (string, error) {
	res, err := s.TaskInstruction(actorID, TaskInstruction{
		Action: ActionAddTask, TaskName: req.TaskName, TaskIntention: req.TaskIntention, Manager: req.Manager, Budget: req.Budget, TraceParent: req.TraceParent,
	})
	if err != nil {
		return "", err
	}
	return res.AddTask.TaskID, nil
}

// TaskInstruction carries out a task-management instruction for actorID, an
// agent with the task_manager skill or a HumanAgent (spec §3.9, §2.5). Every
// ID is checked against the state first; an error names the field and the
// problem and changes nothing. The result says what was done (IDs created).
func (s *System) TaskInstruction(actorID string, ti TaskInstruction) (TaskInstructionResult, error) {
	ti = scrubbed(s.secrets, ti)
	return operatorAction[TaskInstructionResult](s, actorID, ti.TaskID, "task_manager", ti)(s.taskInstruction(actorID, ti, ""))
}

// taskInstruction is TaskInstruction issued by a step (origin): what it
// creates gets IDs derived from the step, and carrying it out again (the
// step re-run after a restart) changes nothing more.
func (s *System) taskInstruction(actorID string, ti TaskInstruction, origin string) (TaskInstructionResult, error) {
	actor, err := s.actor(actorID, SkillTaskManager)
	if err != nil {
		return TaskInstructionResult{}, err
	}
	human := actor.kind == KindHuman
	action := strings.TrimSpace(ti.Action)
	var res TaskInstructionResult
	if action == ActionAddTask {
		res.AddTask, err = s.addTask(actor, ti, origin)
		return res, err
	}
	t, ok := s.task(ti.TaskID)
	if !ok {
		if ti.TaskID == "" {
			return res, errf(ErrInvalid, "task_id: is empty")
		}
		return res, errf(ErrNotFound, "task_id %q: no such task", ti.TaskID)
	}
	if human {
		if err := s.MayOperate(actorID, ti.TaskID); err != nil {
			return res, err
		}
	}
	switch action {
	case ActionAddStage:
		res.AddStage, err = s.addStages(t, actorID, human, ti.Stages, origin)
	case ActionFinishStage:
		res.FinishStage, err = s.finishStage(t, actorID, human, ti.StageID, by(origin, actorID))
	case ActionRetryStage:
		res.RetryStage, err = s.retryStage(t, actorID, human, ti, origin)
	case ActionFinishTask:
		switch state := strings.TrimSpace(ti.ExecutionState); state {
		case "", StateFinished:
			res.EndTask, err = s.endTask(t, actorID, human, StateFinished, ti.Summary, by(origin, actorID))
		case StateFailed:
			res.EndTask, err = s.endTask(t, actorID, human, StateFailed, s.endReason(actor, ti.Summary, "task_failed_no_reason"), by(origin, actorID))
		default:
			err = errf(ErrInvalid, "execution_state %q: must be %q or %q", state, StateFinished, StateFailed)
		}
	case ActionCancelTask:
		res.EndTask, err = s.endTask(t, actorID, human, StateFailed, s.endReason(actor, ti.Summary, "task_cancelled"), by(origin, actorID))
	case ActionPauseTask, ActionResumeTask:
		res.PauseTask, err = s.pauseTask(t, actorID, human, action == ActionPauseTask)
	case ActionSetBudget:
		res.SetBudget, err = s.setBudget(t, human, ti.Budget)
	case "":
		err = errf(ErrInvalid, "action: is empty; one of add_task, add_stage, finish_stage, retry_stage, finish_task, cancel_task, pause_task, resume_task, set_budget")
	default:
		err = errf(ErrInvalid, "action %q: must be one of add_task, add_stage, finish_stage, retry_stage, finish_task, cancel_task, pause_task, resume_task, set_budget", action)
	}
	return res, err
}

// endReason is the summary of a task that cancel_task or finish_task
// "failed" ends: the reason given, else the text key says how it ended and
// who ended it (task_cancelled, task_failed_no_reason; summary is optional
// for both): a task ends with a reason, and an empty summary would read as
// any failure would. (finish_task "finished" refuses an empty summary: its
// summary is the task's result.)
func (s *System) endReason(actor *agent, summary, key string) string {
	if strings.TrimSpace(summary) != "" {
		return summary
	}
	b := actor.brief()
	return s.text(key, map[string]any{"AgentID": b.AgentID, "Name": b.Name, "Operator": actor.kind == KindHuman})
}

// by is who ends a stage or task: the step when a step does, else the actor.
func by(origin, actorID string) string {
	if origin != "" {
		return origin
	}
	return actorID
}

func (s *System) addTask(actor *agent, ti TaskInstruction, origin string) (*AddTaskResult, error) {
	id := derivedID(origin, "task")
	if t, ok := s.task(id); ok {
		return &AddTaskResult{TaskID: id, TaskManager: t.brief().TaskManager}, nil
	}
	name := strings.TrimSpace(ti.TaskName)
	intention := strings.TrimSpace(ti.TaskIntention)
	switch {
	case name == "":
		return nil, errf(ErrInvalid, "task_name: is empty")
	case intention == "":
		return nil, errf(ErrInvalid, "task_intention: is empty")
	}
	manager := strings.TrimSpace(ti.Manager)
	if manager == "" {
		manager = s.managerID
		if actor.kind == KindLLM {
			manager = actor.id
		}
	}
	m, ok := s.agent(manager)
	if !ok {
		return nil, errf(ErrNotFound, "task_manager %q: no such agent", manager)
	}
	if m.kind != KindLLM || !slices.Contains(m.brief().Skills, SkillTaskManager) {
		return nil, errf(ErrInvalid, "task_manager %q: must be an LLM agent with the task_manager skill", manager)
	}
	if err := s.checkJoinable("task_manager", m); err != nil {
		return nil, err
	}
	operator := s.operatorID
	if actor.kind == KindHuman {
		operator = actor.id
	}
	budget, err := s.newTaskBudget(ti.Budget, actor.kind == KindHuman)
	if err != nil {
		return nil, err
	}
	now := s.now()
	group := []string{manager}
	if operator != "" && operator != manager {
		group = append(group, operator)
	}
	t := newTaskOwner(s, TaskState{
		TaskID:                 id,
		TaskName:               name,
		TaskIntention:          intention,
		TaskManager:            manager,
		TaskGroup:              group,
		SharedInfoPool:         []SharedInfo{},
		CommunicationQueue:     []Message{},
		SharedConversationPool: []Message{},
		StageList:              []StageState{},
		ExecutionState:         StateInit,
		Operator:               operator,
		// Someone else hands the task over: its manager plans staffing and
		// stages (the manager's own add_task continues its own plan).
		HandedOver: manager != actor.id,
		Budget:     budget,
		CreatedAt:  now,
		UpdatedAt:  now,
	})
	t.st.TraceParent = s.traceTask(ti.TraceParent, id, name)
	if err := s.registerTask(t); err != nil {
		return nil, err
	}
	s.enforceBudgets(t) // an operator past the daily budget: held before it starts
	t.mu.Lock()
	msgs := t.startNoticesLocked()
	t.mu.Unlock()
	s.deliver(msgs...)
	s.log.Info("task added", "task", id, "name", name, "manager", manager, "by", actor.id)
	return &AddTaskResult{TaskID: id, TaskManager: manager}, nil
}

// actor returns the agent issuing a management instruction: a HumanAgent,
// or an agent with the management skill.
func (s *System) actor(actorID, skill string) (*agent, error) {
	if s.isClosed() {
		return nil, ErrClosed
	}
	a, ok := s.agent(actorID)
	if !ok {
		return nil, errf(ErrNotFound, "agent_id %q: no such agent", actorID)
	}
	if a.kind != KindHuman && !slices.Contains(a.brief().Skills, skill) {
		return nil, errf(ErrForbidden, "agent %s lacks the %s skill", actorID, skill)
	}
	return a, nil
}

// mayManage checks that actor manages the task (or is an operator).
func mayManage(t *task, actorID string, human bool) error {
	if human || t.st.TaskManager == actorID {
		return nil
	}
	return errf(ErrForbidden, "task_id %q: only its manager %s (or an operator) may manage it", t.st.TaskID, t.st.TaskManager)
}

// checkAllocation validates an agent_allocation: non-empty, every agent an
// existing LLM agent with a goal, and (unless addToGroup) in the task group.
// It returns the agents missing from the group.
func (s *System) checkAllocation(field string, t *task, alloc map[string]string, addToGroup bool) ([]string, error) {
	if len(alloc) == 0 {
		return nil, errf(ErrInvalid, "%s: is empty; allocate the stage to at least one agent", field)
	}
	var missing []string
	for _, id := range slices.Sorted(maps.Keys(alloc)) {
		a, ok := s.agent(id)
		switch {
		case !ok:
			return nil, errf(ErrNotFound, "%s: agent %q: no such agent", field, id)
		case a.kind != KindLLM:
			return nil, errf(ErrInvalid, "%s: agent %q: is a HumanAgent; stages are allocated to LLM agents", field, id)
		case strings.TrimSpace(alloc[id]) == "":
			return nil, errf(ErrInvalid, "%s: agent %q: its goal is empty", field, id)
		}
		t.mu.Lock()
		in := t.inGroupLocked(id)
		t.mu.Unlock()
		if !in {
			if !addToGroup {
				return nil, errf(ErrInvalid, "%s: agent %q: not in the task group of task %s; add it with agent_manager add_task_participant first", field, id, t.st.TaskID)
			}
			if err := s.checkJoinable(field, a); err != nil {
				return nil, err
			}
			missing = append(missing, id)
		}
	}
	return missing, nil
}

func (s *System) addStages(t *task, actorID string, human bool, specs []StageSpec, origin string) (*AddStageResult, error) {
	if len(specs) == 0 {
		return nil, errf(ErrInvalid, "stages: is empty")
	}
	for i, sp := range specs {
		if strings.TrimSpace(sp.StageIntention) == "" {
			return nil, errf(ErrInvalid, "stages[%d].stage_intention: is empty", i)
		}
		if _, err := s.checkAllocation(fmt.Sprintf("stages[%d].agent_allocation", i), t, sp.AgentAllocation, false); err != nil {
			return nil, err
		}
	}
	if err := t.mu.lockDurable(); err != nil {
		return nil, err
	}
	if err := mayManage(t, actorID, human); err != nil {
		t.mu.Unlock()
		return nil, err
	}
	if t.endedLocked() || t.st.Base {
		t.mu.Unlock()
		return nil, errf(ErrEnded, "task_id %q: stages cannot be added to a task that has ended or to the base task", t.st.TaskID)
	}
	var ids []string
	if origin != "" {
		if st, _ := t.stageLocked(derivedID(origin, "stage", "0")); st != nil {
			// Added already by this step (re-run after a restart).
			for i := range specs {
				ids = append(ids, derivedID(origin, "stage", strconv.Itoa(i)))
			}
			t.mu.Unlock()
			return &AddStageResult{StageIDs: ids, TaskID: t.st.TaskID}, nil
		}
	}
	added := make([]StageState, len(specs))
	adds, largest, largestSize := 0, 0, 0
	for i, sp := range specs {
		added[i] = newStage(derivedID(origin, "stage", strconv.Itoa(i)), t.st.TaskID, strings.TrimSpace(sp.StageIntention), sp.AgentAllocation)
		n := stageSize(&added[i])
		adds += n
		if n > largestSize {
			largest, largestSize = i, n
		}
	}
	// Refused before anything is made: stages are never shed from the
	// task's document, and one past its bound would have every write of
	// the task refused by the store. The error names the largest stage's
	// longer part too, for a caller to know what to shorten.
	part := "stage_intention"
	if intention := storedLen(added[largest].StageIntention); 2*intention < largestSize {
		part = "agent_allocation"
	}
	detail := fmt.Sprintf(" (%d stages; the largest, stages[%d], %d bytes, most in its %s)", len(specs), largest, largestSize, part)
	if err := t.checkRoomLocked("stages", adds, detail); err != nil {
		t.mu.Unlock()
		return nil, err
	}
	for _, st := range added {
		t.st.StageList = append(t.st.StageList, st)
		ids = append(ids, st.StageID)
	}
	t.changedLocked(Event{Detail: "add_stage"})
	msgs := t.startNextStageLocked()
	// Stored before anyone is told: a stage the store refused (and the
	// task took back) must not be started by its agents, whose work in it
	// could never be reported; the caller fails visibly instead.
	if err := t.mu.syncLocked(); err != nil {
		t.mu.Unlock()
		return nil, err
	}
	t.mu.Unlock()
	s.deliver(msgs...)
	return &AddStageResult{StageIDs: ids, TaskID: t.st.TaskID}, nil
}

func (s *System) finishStage(t *task, actorID string, human bool, stageID, by string) (*FinishStageResult, error) {
	if err := t.mu.lockDurable(); err != nil {
		return nil, err
	}
	if err := mayManage(t, actorID, human); err != nil {
		t.mu.Unlock()
		return nil, err
	}
	st, _ := t.stageLocked(stageID)
	switch {
	case st != nil && st.ExecutionState == StateFinished && st.EndedBy == by && by != actorID:
		// Finished by this very step already (re-run after a restart).
		res := &FinishStageResult{FinishedStage: stageID, NextStage: t.runningStageIDLocked(), TaskID: t.st.TaskID}
		t.mu.Unlock()
		return res, nil
	case stageID == "":
		t.mu.Unlock()
		return nil, errf(ErrInvalid, "stage_id: is empty")
	case st == nil:
		t.mu.Unlock()
		return nil, errf(ErrNotFound, "stage_id %q: no such stage in task %s", stageID, t.st.TaskID)
	case t.st.Base:
		t.mu.Unlock()
		return nil, errf(ErrInvalid, "stage_id %q: the base task's stage never finishes", stageID)
	case st.ExecutionState != StateRunning:
		t.mu.Unlock()
		return nil, errf(ErrInvalid, "stage_id %q: is %s, not running", stageID, st.ExecutionState)
	}
	msgs := t.endStageLocked(st, StateFinished, by)
	next := t.startNextStageLocked()
	msgs = append(msgs, next...)
	result := &FinishStageResult{FinishedStage: stageID, NextStage: t.runningStageIDLocked(), TaskID: t.st.TaskID}
	if result.NextStage == nil {
		// No stage left: the manager judges the whole task (spec §2.1.1).
		msgs = append(msgs, t.judgeLocked(stageID))
	}
	// Stored before anyone is told: were the refused finish delivered,
	// the agents would drop a stage the task still runs and start one it
	// holds as init, and a repeated finish_stage (same derived IDs) would
	// then start nobody. The caller fails visibly instead, and no wait
	// is released.
	if err := t.mu.syncLocked(); err != nil {
		t.mu.Unlock()
		return nil, err
	}
	t.mu.Unlock()
	// The stage's steps go first, then the waits on it: a released agent
	// must not start a step of the ended stage.
	s.deliver(msgs...)
	s.stageEnded(t.st.TaskID, stageID)
	return result, nil
}

// retryStage inserts a corrected stage after the failed one and runs it at
// once (spec §2.2.2).
func (s *System) retryStage(t *task, actorID string, human bool, ti TaskInstruction, origin string) (*RetryStageResult, error) {
	newStageID := derivedID(origin, "retry")
	if _, done := t.stageOf(newStageID); done {
		return &RetryStageResult{FailedStage: ti.OldStageID, NewStage: newStageID, TaskID: t.st.TaskID}, nil
	}
	if strings.TrimSpace(ti.NewStageIntention) == "" {
		return nil, errf(ErrInvalid, "new_stage_intention: is empty")
	}
	missing, err := s.checkAllocation("new_agent_allocation", t, ti.NewAgentAllocation, true)
	if err != nil {
		return nil, err
	}
	if err := t.mu.lockDurable(); err != nil {
		return nil, err
	}
	if err := mayManage(t, actorID, human); err != nil {
		t.mu.Unlock()
		return nil, err
	}
	old, at := t.stageLocked(ti.OldStageID)
	running := t.runningStageLocked()
	switch {
	case ti.OldStageID == "":
		t.mu.Unlock()
		return nil, errf(ErrInvalid, "old_stage_id: is empty")
	case old == nil:
		t.mu.Unlock()
		return nil, errf(ErrNotFound, "old_stage_id %q: no such stage in task %s", ti.OldStageID, t.st.TaskID)
	case t.endedLocked() || t.st.Base:
		t.mu.Unlock()
		return nil, errf(ErrEnded, "task_id %q: has ended (or is the base task)", t.st.TaskID)
	case running != nil && running != old:
		t.mu.Unlock()
		return nil, errf(ErrInvalid, "old_stage_id %q: stage %s is running; only the running stage (or the last ended one) can be retried", ti.OldStageID, running.StageID)
	case old.ExecutionState == StateInit:
		t.mu.Unlock()
		return nil, errf(ErrInvalid, "old_stage_id %q: has not run yet", ti.OldStageID)
	case running == nil && slices.ContainsFunc(t.st.StageList[at+1:], func(st StageState) bool { return st.ExecutionState != StateInit }):
		t.mu.Unlock()
		return nil, errf(ErrInvalid, "old_stage_id %q: a later stage has run since; only the running stage (or the last ended one) can be retried", ti.OldStageID)
	}
	if root, n := t.retriesLocked(old); n >= s.cfg.RetryStageLimit {
		t.mu.Unlock()
		return nil, errf(ErrLimit, "old_stage_id %q: stage %s has been retried %d times, the limit: finish the task with finish_task (execution_state \"failed\" if it cannot be done), or add a different stage", ti.OldStageID, root, n)
	}
	// 1. the new stage, right after the old one; its agents join the group.
	ns := newStage(newStageID, t.st.TaskID, strings.TrimSpace(ti.NewStageIntention), ti.NewAgentAllocation)
	ns.RetryOf = old.StageID
	if err := t.checkRoomLocked("new_stage_intention", stageSize(&ns), ""); err != nil {
		t.mu.Unlock()
		return nil, err
	}
	t.st.StageList = slices.Insert(t.st.StageList, at+1, ns)
	t.st.TaskGroup = append(t.st.TaskGroup, missing...)
	old = &t.st.StageList[at]
	var msgs []Message
	for _, id := range missing {
		msgs = append(msgs, s.instruction("", t.st.TaskID, "", id, "", &Instruction{UpdateWorkingMemory: &StageRef{TaskID: t.st.TaskID}}))
	}
	// 2. the old stage fails; its agents are told to finish it.
	if old.ExecutionState == StateRunning {
		msgs = append(msgs, t.endStageLocked(old, StateFailed, by(origin, actorID))...)
	} else if old.ExecutionState != StateFailed {
		old.ExecutionState = StateFailed
		t.changedLocked(Event{Kind: EventStageChanged, StageID: old.StageID, Detail: StateFailed})
	}
	// 3. the new stage starts.
	msgs = append(msgs, t.startStageLocked(&t.st.StageList[at+1])...)
	// Stored before anyone is told, as in finishStage: a refused retry
	// is reported to the caller, nothing is delivered and no wait
	// released.
	if err := t.mu.syncLocked(); err != nil {
		t.mu.Unlock()
		return nil, err
	}
	t.mu.Unlock()
	s.deliver(msgs...)
	s.stageEnded(t.st.TaskID, ti.OldStageID)
	return &RetryStageResult{FailedStage: ti.OldStageID, NewStage: ns.StageID, TaskID: t.st.TaskID}, nil
}

// stageEnded lets go of what waited on a stage that ended, once its
// finish_stage instructions are delivered (its steps dropped): the waits
// on it, and the operators' questions of it, which nobody waits for any
// more (expireStageLocked).
func (s *System) stageEnded(taskID, stageID string) {
	// Marked before the pass below: a question of the stage an operator
	// takes after the mark arrives expired (receiveHuman), and one taken
	// before it is there for the pass.
	s.stagesEnded.Store(stageKey{taskID, stageID}, struct{}{})
	if s.isEnded(taskID) {
		// The task ended meanwhile (a cancel racing the stage's end), and
		// its forgetEndedStages may have run before the mark: the task's
		// end covers the stage, and the mark would stay for good.
		s.stagesEnded.Delete(stageKey{taskID, stageID})
	}
	s.releaseWaits(func(w Wait) bool { return w.TaskID == taskID && w.StageID == stageID })
	for _, id := range s.operators() {
		a, ok := s.agent(id)
		if !ok {
			continue
		}
		a.mu.Lock()
		if a.expireStageLocked(func(task, stage string) bool { return task == taskID && stage == stageID }) {
			a.changedLocked(Event{TaskID: taskID, StageID: stageID, Detail: "expired"})
			// Whoever ended the stage cannot be told that the
			// operator's document was refused: kept (owner.go).
			a.mu.keepLocked()
		}
		a.mu.Unlock()
	}
}

func (s *System) endTask(t *task, actorID string, human bool, state, summary, by string) (*EndTaskResult, error) {
	// Ordered with the task's pauses (pause.go): its end takes the pause
	// back, and a pause stored just before must not mark the ended task
	// paused again after it.
	t.pauseMu.Lock()
	defer t.pauseMu.Unlock()
	if err := t.mu.lockDurable(); err != nil {
		return nil, err
	}
	if err := mayManage(t, actorID, human); err != nil {
		t.mu.Unlock()
		return nil, err
	}
	switch {
	case t.endedLocked() && t.st.EndedBy == by && by != actorID && t.st.ExecutionState == state:
		// Ended by this very step already (re-run after a restart).
		id := t.st.TaskID
		t.mu.Unlock()
		return &EndTaskResult{ExecutionState: state, TaskID: id}, nil
	case t.st.Base:
		t.mu.Unlock()
		return nil, errf(ErrInvalid, "task_id %q: the base task never ends", t.st.TaskID)
	case t.endedLocked():
		t.mu.Unlock()
		return nil, errf(ErrEnded, "task_id %q: has already ended (%s)", t.st.TaskID, t.st.ExecutionState)
	case state == StateFinished && strings.TrimSpace(summary) == "":
		t.mu.Unlock()
		return nil, errf(ErrInvalid, "summary: is empty; finish_task needs the task's summary")
	}
	msgs, err := t.endTaskLocked(state, strings.TrimSpace(summary), by)
	id := t.st.TaskID
	t.mu.Unlock()
	if err != nil {
		return nil, err
	}
	// Stored ended: marked so before its agents are told (isEnded), and
	// no longer paused (the finish_task instructions wake its agents,
	// whose loops work their working state out again).
	s.ended.Store(id, struct{}{})
	s.forgetEndedStages(id)
	s.paused.Delete(id)
	s.sup.forget(id)
	s.budgets.drop(id)
	s.deliver(msgs...)
	s.releaseWaits(func(w Wait) bool { return w.TaskID == id })
	s.log.Info("task ended", "task", id, "state", state, "by", actorID)
	return &EndTaskResult{ExecutionState: state, TaskID: id}, nil
}

// forgetEndedStages drops the ended stages of a task that ended (marked
// ended itself, which covers them: lateLocked).
func (s *System) forgetEndedStages(taskID string) {
	s.stagesEnded.Range(func(k, _ any) bool {
		if k.(stageKey).task == taskID {
			s.stagesEnded.Delete(k)
		}
		return true
	})
}

// endedOrGone reports whether a task has ended, or is unknown, without
// its mutex (isEnded).
func (s *System) endedOrGone(taskID string) bool {
	_, ok := s.task(taskID)
	return !ok || s.isEnded(taskID)
}

// stageHasEnded reports whether a stage of a task that has not ended has
// ended (finish_stage, retry_stage), without the task's mutex.
func (s *System) stageHasEnded(taskID, stageID string) bool {
	_, ok := s.stagesEnded.Load(stageKey{taskID, stageID})
	return ok
}

// isEnded reports whether a task has ended (finished or failed), without
// its mutex: an agent starts no step of it (popLocked) and takes no message
// of it but an instruction (receive, receiveHuman), whether its finish_task
// instruction came yet or not (a restart sends one a crash lost after the
// agents' loops run again).
func (s *System) isEnded(taskID string) bool {
	_, ok := s.ended.Load(taskID)
	return ok
}

// retriesLocked returns the original stage a stage retries (itself if
// none) and how many retries of that original the task holds. t.mu must be
// held.
func (t *task) retriesLocked(st *StageState) (root string, n int) {
	rootOf := func(sg StageState) string {
		for i := 0; sg.RetryOf != "" && i <= len(t.st.StageList); i++ {
			prev, _ := t.stageLocked(sg.RetryOf)
			if prev == nil {
				return sg.RetryOf
			}
			sg = *prev
		}
		return sg.StageID
	}
	root = rootOf(*st)
	for _, sg := range t.st.StageList {
		if sg.RetryOf != "" && rootOf(sg) == root {
			n++
		}
	}
	return root, n
}
