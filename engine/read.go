package engine

// The System's read API: copies for readers that never wait on an owner
// (the published snapshots, owner.go).

// Task returns a snapshot of a task.
func (s *System) Task(id string) (TaskState, bool) {
	t, ok := s.task(id)
	if !ok {
		return TaskState{}, false
	}
	return t.read(), true
}

// Stage returns a snapshot of one stage of a task.
func (s *System) Stage(taskID, stageID string) (StageState, bool) {
	t, ok := s.task(taskID)
	if !ok {
		return StageState{}, false
	}
	return t.storedStage(stageID)
}

// Tasks returns snapshots of every task, in creation order.
func (s *System) Tasks() []TaskState {
	ts := s.allTasks()
	out := make([]TaskState, len(ts))
	for i, t := range ts {
		out[i] = t.read()
	}
	return out
}

// Agent returns a snapshot of an agent.
func (s *System) Agent(id string) (AgentState, bool) {
	a, ok := s.agent(id)
	if !ok {
		return AgentState{}, false
	}
	return a.read(), true
}

// Agents returns snapshots of every agent, in creation order.
func (s *System) Agents() []AgentState {
	as := s.allAgents()
	out := make([]AgentState, len(as))
	for i, a := range as {
		out[i] = a.read()
	}
	return out
}

// AgentBrief returns an agent's public profile.
func (s *System) AgentBrief(id string) (AgentBrief, bool) {
	a, ok := s.agent(id)
	if !ok {
		return AgentBrief{}, false
	}
	return a.readBrief(), true
}

// AgentBriefs returns every agent's public profile, in creation order.
func (s *System) AgentBriefs() []AgentBrief {
	as := s.allAgents()
	out := make([]AgentBrief, len(as))
	for i, a := range as {
		out[i] = a.readBrief()
	}
	return out
}

// ReportsOnTheirWay is how many finished steps' reports their tasks are
// still storing: a MAS whose agents are all at rest is at rest once this is
// 0 too (the tasks' last changes are then stored and announced).
func (s *System) ReportsOnTheirWay() int64 { return s.reportsOnTheirWay.Load() }
