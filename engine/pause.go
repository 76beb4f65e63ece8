package engine

import (
	"strings"
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
// restarts. An agent whose step lock holds only waits in paused tasks is not
// held by it meanwhile: it runs its other tasks' steps too
// (lockHoldsLocked). A paused agent starts no new step of any task; its
// running step finishes likewise, and it joins no task while paused
// (checkJoinable). Agents that have nothing to run but steps of paused
// tasks or waits in them, and paused agents, show working_state "paused".

// isPaused reports whether a task is paused, without its mutex.
func (s *System) isPaused(taskID string) bool {
	_, ok := s.paused.Load(taskID)
	return ok
}

// pauseTask pauses or resumes a task (pause_task, resume_task): its
// operators, or its manager, may.
func (s *System) pauseTask(t *task, actorID string, human, pause bool) (*PauseTaskResult, error) {
	return s.pauseTaskFor(t, actorID, human, pause, "", nil)
}

// pauseTaskFor is pauseTask with the MAS's own reason (TaskState.PausedFor,
// task.setPaused); "" for an operator's, a manager's or a budget's. told,
// if not nil, runs when the pause or resume changed the task, before any
// other pause or resume of it can: what it tells the operator comes in the
// order of the changes, the last notice saying what the task is.
func (s *System) pauseTaskFor(t *task, actorID string, human, pause bool, reason string, told func()) (*PauseTaskResult, error) {
	if !pause && actorID != SystemSender {
		if err := s.mayResume(t); err != nil {
			return nil, err
		}
	}
	id := t.id()
	// One pause or resume of the task at a time: the task's Paused (what
	// supervision reads) and s.paused (what the agents' loops and wait
	// timers read) change in the same order. Overlapping, a pause and a
	// resume could leave the task stored as running but held in s.paused:
	// no agent would start its steps, resume_task would find nothing to
	// change, and supervision would count it busy — idle and unended,
	// against the liveness promise.
	t.pauseMu.Lock()
	defer t.pauseMu.Unlock()
	changed, held, group, err := t.setPaused(actorID, human, pause, reason, s.now())
	if err != nil || !changed {
		if err != nil {
			return nil, err
		}
		return &PauseTaskResult{Changed: false, Paused: pause, TaskID: id}, nil
	}
	detail := "resumed"
	if pause {
		detail = "paused"
	}
	var agents []*agent
	for _, member := range group {
		if a, ok := s.agent(member); ok && a.kind == KindLLM {
			agents = append(agents, a)
		}
	}
	if pause {
		s.paused.Store(id, struct{}{})
	} else {
		// The waits' deadlines move while the task still reads as paused
		// to the wait timers: a timer firing in between must not expire
		// a wait of the resumed task on its old deadline.
		for _, a := range agents {
			a.shiftWaits(id, held)
		}
		s.paused.Delete(id)
	}
	for _, a := range agents {
		a.taskPaused()
	}
	s.sup.touch(id) // the quiet clock starts again either way
	s.log.Info("task "+detail, "task", id, "by", actorID)
	if told != nil {
		told()
	}
	return &PauseTaskResult{Changed: true, Paused: pause, TaskID: id}, nil
}

// checkJoinable refuses a paused LLM agent as a new member of a task. A
// pause holds every task of the agent, which is why pause_agent needs an
// operator who may operate each of them (pauseAgents): an agent that joined
// a task while paused would hold that task, whose operator may not be its
// pauser and is not told (supervision counts its queued steps as work in
// progress), and its pauser could then no longer resume it.
func (s *System) checkJoinable(field string, a *agent) error {
	if a.kind != KindLLM {
		return nil
	}
	a.mu.Lock()
	paused := a.st.Paused
	a.mu.Unlock()
	if paused {
		return errf(ErrInvalid, "%s: agent %q: is paused (pause_agent) and starts no step of any task: an operator resumes it first (resume_agent), or choose another agent", field, a.id)
	}
	return nil
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
			if ts.Base || stateEnded(ts.ExecutionState) {
				continue
			}
			if !t.inGroup(a.id) {
				continue
			}
			if err := s.MayOperate(actorID, ts.TaskID); err != nil {
				if !s.Visible(actorID, ts.TaskID) {
					// Another operator's task: its ID and owner are not
					// the caller's to learn, here or anywhere else.
					return nil, errf(ErrForbidden, "agents: agent %q also works on a task you may not operate (a task is operated by its owner, operators it is shared with and admins)", id)
				}
				return nil, errf(ErrForbidden, "agents: agent %q also works on task %s, which you may not operate: %v", id, ts.TaskID, err)
			}
		}
		agents = append(agents, a)
	}
	var changed []string
	for _, a := range agents {
		did, err := a.setPaused(pause)
		if err != nil {
			return nil, err
		}
		if did {
			changed = append(changed, a.id)
		}
	}
	return &PauseAgentsResult{Agents: ids, Changed: changed, Paused: pause}, nil
}
