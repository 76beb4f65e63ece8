package engine

import (
	"slices"
	"strings"
	"time"
)

// Pausing (beyond the spec): an operator holds a task or an agent and lets
// it go on later.
//
// A paused task starts no new step: its steps stay in their agents' todo
// lists, in order, while the agents run their other tasks' steps. A step of
// it already running finishes and its outcome applies — cancelling it would
// throw away what its LLM or tool call already cost, and a step's effects
// are what the operator sees next anyway. Its supervision is suspended (it
// is waiting on the operator, who knows) and so are the wait timeouts of
// its agents' waits in it: on resume every such deadline moves by the time
// the task was paused. The pause is stored with the task and survives
// restarts. A paused agent starts no new step of any task; its running step
// finishes likewise. Agents that have nothing to run but steps of paused
// tasks, and paused agents, show working_state "paused".

// isPaused reports whether a task is paused, without its mutex.
func (s *System) isPaused(taskID string) bool {
	_, ok := s.paused.Load(taskID)
	return ok
}

// pauseTask pauses or resumes a task (pause_task, resume_task): its
// operators, or its manager, may.
func (s *System) pauseTask(t *task, actorID string, human, pause bool) (*PauseTaskResult, error) {
	if !pause && actorID != SystemSender {
		if err := s.mayResume(t); err != nil {
			return nil, err
		}
	}
	now := s.now()
	t.mu.Lock()
	if err := mayManage(t, actorID, human); err != nil {
		t.mu.Unlock()
		return nil, err
	}
	id := t.st.TaskID
	switch {
	case t.st.Base:
		t.mu.Unlock()
		return nil, errf(ErrInvalid, "task_id %q: the base task cannot be paused", id)
	case t.endedLocked():
		t.mu.Unlock()
		return nil, errf(ErrEnded, "task_id %q: has already ended (%s)", id, t.st.ExecutionState)
	case t.st.Paused == pause:
		t.mu.Unlock()
		return &PauseTaskResult{Changed: false, Paused: pause, TaskID: id}, nil
	}
	held := now.Sub(t.st.PausedAt) // on resume: how long it was held
	t.st.Paused = pause
	if pause {
		t.st.PausedAt = now
	}
	detail := "resumed"
	if pause {
		detail = "paused"
	}
	t.changedLocked(Event{Detail: detail})
	if err := t.mu.syncLocked(); err != nil {
		t.mu.Unlock()
		return nil, err
	}
	group := slices.Clone(t.st.TaskGroup)
	t.mu.Unlock()

	if pause {
		s.paused.Store(id, struct{}{})
	} else {
		s.paused.Delete(id)
	}
	for _, member := range group {
		a, ok := s.agent(member)
		if !ok || a.kind != KindLLM {
			continue
		}
		a.mu.Lock()
		if !pause {
			a.shiftWaitsLocked(id, held)
		}
		a.armTimerLocked()
		a.mu.Unlock()
		a.signal()
	}
	s.sup.touch(id) // the quiet clock starts again either way
	s.log.Info("task "+detail, "task", id, "by", actorID)
	return &PauseTaskResult{Changed: true, Paused: pause, TaskID: id}, nil
}

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

// pauseAgents pauses or resumes LLM agents (pause_agent, resume_agent):
// operators only, and only agents whose every open task (beyond the base
// task) the operator may operate — a pause holds all of them.
func (s *System) pauseAgents(actorID string, human bool, ids []string, pause bool) (*PauseAgentsResult, error) {
	if !human {
		return nil, errf(ErrForbidden, "pause_agent and resume_agent are for operators")
	}
	if len(ids) == 0 {
		return nil, errf(ErrInvalid, "agents: is empty; name the agent_ids to pause or resume")
	}
	var agents []*agent
	for _, id := range ids {
		a, ok := s.agent(strings.TrimSpace(id))
		switch {
		case !ok:
			return nil, errf(ErrNotFound, "agents: agent %q: no such agent", id)
		case a.kind != KindLLM:
			return nil, errf(ErrInvalid, "agents: agent %q: is a HumanAgent, which runs no steps", id)
		}
		for _, t := range s.allTasks() {
			ts := t.brief()
			if ts.Base || ts.ExecutionState == StateFinished || ts.ExecutionState == StateFailed {
				continue
			}
			t.mu.Lock()
			member := t.inGroupLocked(a.id)
			t.mu.Unlock()
			if !member {
				continue
			}
			if err := s.MayOperate(actorID, ts.TaskID); err != nil {
				return nil, errf(ErrForbidden, "agents: agent %q also works on task %s, which you may not operate: %v", id, ts.TaskID, err)
			}
		}
		agents = append(agents, a)
	}
	var changed []string
	for _, a := range agents {
		a.mu.Lock()
		if a.st.Paused != pause {
			a.st.Paused = pause
			if pause && a.running == "" {
				a.st.WorkingState = WorkingPaused
			}
			a.changedLocked(Event{Detail: map[bool]string{true: "paused", false: "resumed"}[pause]})
			if err := a.mu.syncLocked(); err != nil {
				a.mu.Unlock()
				return nil, err
			}
			changed = append(changed, a.id)
		}
		a.mu.Unlock()
		a.signal()
	}
	return &PauseAgentsResult{Agents: ids, Changed: changed, Paused: pause}, nil
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
