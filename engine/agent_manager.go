package engine

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// AgentInstruction carries out an agent-management instruction for actorID,
// an agent with the agent_manager skill or a HumanAgent (spec §3.10, §2.5).
func (s *System) AgentInstruction(actorID string, ai AgentInstruction) (AgentInstructionResult, error) {
	ai = scrubbed(s.secrets, ai)
	return operatorAction[AgentInstructionResult](s, actorID, ai.TaskID, "agent_manager", ai)(s.agentInstruction(actorID, ai, ""))
}

// agentInstruction is AgentInstruction issued by a step (origin): an agent
// it creates gets an ID derived from the step, and is created once.
func (s *System) agentInstruction(actorID string, ai AgentInstruction, origin string) (AgentInstructionResult, error) {
	var res AgentInstructionResult
	actor, err := s.actor(actorID, SkillAgentManager)
	if err != nil {
		return res, err
	}
	human := actor.kind == KindHuman
	switch strings.TrimSpace(ai.Action) {
	case ActionInitNewAgent:
		if ai.AgentConfig == nil {
			return res, errf(ErrInvalid, "agent_config: is missing")
		}
		id, err := s.createAgent(*ai.AgentConfig, origin)
		if err != nil {
			return res, err
		}
		b, _ := s.AgentBrief(id)
		s.log.Info("agent created", "agent", id, "name", b.Name, "by", actorID)
		res.InitNewAgent = &NewAgentResult{AgentID: id, Name: b.Name, Role: b.Role}
	case ActionAddTaskParticipant:
		res.AddTaskParticipant, err = s.addParticipants(actorID, human, ai.TaskID, ai.Agents)
	case ActionPauseAgent, ActionResumeAgent:
		res.PauseAgent, err = s.pauseAgents(actorID, human, ai.Agents, strings.TrimSpace(ai.Action) == ActionPauseAgent)
	case "":
		err = errf(ErrInvalid, "action: is empty; one of init_new_agent, add_task_participant, pause_agent, resume_agent")
	default:
		err = errf(ErrInvalid, "action %q: must be one of init_new_agent, add_task_participant, pause_agent, resume_agent", ai.Action)
	}
	return res, err
}

// CreateAgent creates an LLM agent from a template or a full configuration
// (init_new_agent) and starts it.
func (s *System) CreateAgent(cfg AgentConfig) (string, error) {
	return s.createAgent(scrubbed(s.secrets, cfg), "")
}

func (s *System) createAgent(cfg AgentConfig, origin string) (string, error) {
	if origin != "" {
		if _, ok := s.agent(derivedID(origin, "agent")); ok {
			return derivedID(origin, "agent"), nil // created already by this step
		}
	}
	if name := strings.TrimSpace(cfg.Template); name != "" {
		tpl, ok := s.template(name)
		if !ok {
			var names []string
			for _, t := range s.cfg.Templates {
				names = append(names, t.Template)
			}
			return "", errf(ErrNotFound, "agent_config.template %q: no such template (available: %s)", name, strings.Join(names, ", "))
		}
		cfg = mergeConfig(tpl.clone(), cfg)
	}
	cfg.Name = strings.TrimSpace(cfg.Name)
	cfg.Role = strings.TrimSpace(cfg.Role)
	switch {
	case cfg.Name == "":
		return "", errf(ErrInvalid, "agent_config.name: is empty")
	case cfg.Role == "":
		return "", errf(ErrInvalid, "agent_config.role: is empty")
	}
	if err := s.checkAgentTexts(cfg); err != nil {
		return "", err
	}
	skills := slices.Clone(cfg.Skills)
	for _, sk := range skills {
		if !slices.Contains(SkillNames, sk) {
			return "", errf(ErrInvalid, "agent_config.skills: %q is not a skill (skills: %s)", sk, strings.Join(SkillNames, ", "))
		}
	}
	for _, sk := range CoreSkills {
		if !slices.Contains(skills, sk) {
			skills = append(skills, sk)
		}
	}
	var known map[string]string
	if s.cfg.Tools != nil {
		known = s.cfg.Tools.ToolGuides()
	}
	tools := []string{}
	for _, tl := range cfg.Tools {
		if _, ok := known[tl]; !ok {
			return "", errf(ErrInvalid, "agent_config.tools: %q is not a configured MCP server (configured: %s)", tl, strings.Join(slices.Sorted(maps.Keys(known)), ", "))
		}
		if !slices.Contains(tools, tl) {
			tools = append(tools, tl)
		}
	}
	var llmCfg LLMConfig
	if cfg.LLMConfig != nil {
		llmCfg = *cfg.LLMConfig
	}
	st := s.newAgentState(KindLLM, cfg.Name, cfg.Role, strings.TrimSpace(cfg.Profile), skills, tools)
	if origin != "" {
		st.AgentID = derivedID(origin, "agent")
		st.AgentStep.AgentID = st.AgentID
	}
	st.LLMConfig = &llmCfg
	st.Template = strings.TrimSpace(cfg.Template)
	a := newAgentOwner(s, st)
	if err := s.register(a); err != nil {
		return "", err
	}
	return a.id, nil
}

// checkAgentTexts refuses an agent whose name, role and profile would
// take more than a quarter of its document's bound (MaxDocumentBytes):
// they are never shortened, and the rest is for its persistent memory
// (up to half, memoryBytes) and its steps. Past it every write of the
// agent could be refused by the store. The error names the longest.
func (s *System) checkAgentTexts(cfg AgentConfig) error {
	room := s.cfg.MaxDocumentBytes / 4
	fields := []struct {
		name string
		size int
	}{{"agent_config.profile", storedLen(cfg.Profile)}, {"agent_config.role", storedLen(cfg.Role)}, {"agent_config.name", storedLen(cfg.Name)}}
	total, longest := 0, 0
	for i, f := range fields {
		total += f.size
		if f.size > fields[longest].size {
			longest = i
		}
	}
	if total <= room {
		return nil
	}
	return errf(ErrLimit, "%s: takes %d bytes stored (the agent's name, role and profile %d), over the limit of %d bytes for the three: "+
		"a quarter of an agent's document bound of %d bytes (%d KiB, the engine's bound on a stored document, under the store's 1 MiB message limit)",
		fields[longest].name, fields[longest].size, total, room, s.cfg.MaxDocumentBytes, s.cfg.MaxDocumentBytes>>10)
}

// newAgentState is a new agent's state, empty but for who it is.
func (s *System) newAgentState(kind, name, role, profile string, skills, tools []string) AgentState {
	now := s.now()
	id := newID()
	return AgentState{
		AgentID:          id,
		Name:             name,
		Role:             role,
		Profile:          profile,
		WorkingState:     WorkingIdle,
		WorkingMemory:    map[string]map[string][]string{},
		PersistentMemory: map[string]string{},
		AgentStep:        AgentStep{AgentID: id, TodoList: []string{}, StepList: []StepState{}},
		StepLock:         []string{},
		Tools:            tools,
		Skills:           skills,
		Kind:             kind,
		CreatedAt:        now,
		UpdatedAt:        now,
	}
}

// mergeConfig lays the non-empty fields of over onto a template.
func mergeConfig(tpl, over AgentConfig) AgentConfig {
	out := tpl
	if over.Name != "" {
		out.Name = over.Name
	}
	if over.Role != "" {
		out.Role = over.Role
	}
	if over.Profile != "" {
		out.Profile = over.Profile
	}
	if over.Skills != nil {
		out.Skills = over.Skills
	}
	if over.Tools != nil {
		out.Tools = over.Tools
	}
	if over.LLMConfig != nil {
		out.LLMConfig = over.LLMConfig
	}
	out.Skills = slices.Clone(out.Skills)
	out.Tools = slices.Clone(out.Tools)
	return out
}

// register adds an agent to the MAS and starts an LLM agent's loop.
func (s *System) register(a *agent) error {
	return s.enroll(a, true)
}

// enroll adds an agent to the MAS, and with run starts an LLM agent's
// loop. A restore enrolls every agent before any loop runs (runLoops): a
// step re-run at once could otherwise send to an agent not enrolled yet.
func (s *System) enroll(a *agent, run bool) error {
	if s.isClosed() {
		return ErrClosed
	}
	// Stored first, without the registry's lock: an agent the store
	// refuses does not exist. Announced once it can be looked up.
	a.mu.Lock()
	a.st.UpdatedAt = s.now()
	a.mu.change(Event{}, true)
	err := a.mu.syncLocked()
	if err != nil {
		// The agent does not exist: nothing may write it later (its
		// retries stop with it).
		a.mu.closeLocked()
	}
	a.mu.Unlock()
	if err != nil {
		return fmt.Errorf("agent %s: %w", a.id, err)
	}
	s.mu.Lock()
	s.agents[a.id] = a
	s.agentOrder = append(s.agentOrder, a.id)
	if a.kind == KindHuman {
		s.operatorOrder = append(s.operatorOrder, a.id)
	}
	// Close may have begun during the write: the agent is stored, so it
	// exists (and a restart runs it), but no loop starts now, and it stops
	// its retries itself (Close may have collected the agents to stop
	// already).
	closing := s.closed
	if run && a.kind == KindLLM && !closing {
		s.goTracked(a.loop)
	}
	s.mu.Unlock()
	if closing {
		a.stop()
	}
	s.publish(Event{Kind: EventAgentAdded, AgentID: a.id, Detail: a.kind})
	return nil
}

// runLoops starts the loops of enrolled LLM agents.
func (s *System) runLoops(agents []*agent) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	for _, a := range agents {
		if a.kind == KindLLM {
			s.goTracked(a.loop)
		}
	}
	return nil
}

func (s *System) addParticipants(actorID string, human bool, taskID string, agents []string) (*AddParticipantsResult, error) {
	t, ok := s.task(taskID)
	if !ok {
		if taskID == "" {
			return nil, errf(ErrInvalid, "task_id: is empty")
		}
		return nil, errf(ErrNotFound, "task_id %q: no such task", taskID)
	}
	if human {
		if err := s.MayOperate(actorID, taskID); err != nil {
			return nil, err
		}
	}
	if len(agents) == 0 {
		return nil, errf(ErrInvalid, "agents: is empty")
	}
	for _, id := range agents {
		a, ok := s.agent(id)
		if !ok {
			return nil, errf(ErrNotFound, "agents: %q: no such agent", id)
		}
		if !t.inGroup(id) {
			if err := s.checkJoinable("agents", a); err != nil {
				return nil, err
			}
		}
	}
	if err := t.mu.lockDurable(); err != nil {
		return nil, err
	}
	if err := mayManage(t, actorID, human); err != nil {
		t.mu.Unlock()
		return nil, err
	}
	if t.endedLocked() {
		t.mu.Unlock()
		return nil, errf(ErrEnded, "task_id %q: has ended", taskID)
	}
	if human {
		// An operator who may operate the task and adds another operator
		// to it shares the task with it (visibility.go).
		for _, id := range agents {
			if s.isHuman(id) {
				t.shareLocked(id)
			}
		}
	}
	// A share the store refused is withdrawn: the caller must learn it.
	if err := t.mu.syncLocked(); err != nil {
		t.mu.Unlock()
		return nil, err
	}
	t.mu.Unlock()
	var added []string
	for _, id := range agents {
		joined, err := s.joinTask(taskID, id)
		if err != nil {
			return nil, err
		}
		if joined {
			added = append(added, id)
		}
	}
	return &AddParticipantsResult{Added: added, TaskGroup: s.taskGroup(taskID), TaskID: taskID}, nil
}

// joinTask adds an agent to a task group and syncs its working memory (spec
// §3.10). It reports whether the agent was new to the group, and the
// store's refusal of the new group (the agent is then not told: it is not
// in the group the store holds).
func (s *System) joinTask(taskID, agentID string) (bool, error) {
	t, ok := s.task(taskID)
	if !ok {
		return false, nil
	}
	t.mu.Lock()
	if t.inGroupLocked(agentID) {
		t.mu.Unlock()
		return false, nil
	}
	t.st.TaskGroup = append(t.st.TaskGroup, agentID)
	t.changedLocked(Event{AgentID: agentID, Detail: "task_group"})
	if err := t.mu.syncLocked(); err != nil {
		t.mu.Unlock()
		return false, err
	}
	t.mu.Unlock()
	s.deliver(s.instruction("", taskID, "", agentID, "", &Instruction{UpdateWorkingMemory: &StageRef{TaskID: taskID}}))
	return true, nil
}

func (s *System) taskGroup(taskID string) []string {
	t, ok := s.task(taskID)
	if !ok {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.st.TaskGroup)
}
