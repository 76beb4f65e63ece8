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
	id := t.id()
	changed, held, group, err := t.setPaused(actorID, human, pause, s.now())
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
		a.taskPaused(id, pause, held)
	}
	s.sup.touch(id) // the quiet clock starts again either way
	s.log.Info("task "+detail, "task", id, "by", actorID)
	return &PauseTaskResult{Changed: true, Paused: pause, TaskID: id}, nil
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
			if !t.inGroup(a.id) {
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
