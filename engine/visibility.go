package engine

import (
	"encoding/json"
	"slices"
	"strings"
	"sync/atomic"
)

// Operators and ownership (ARCHITECTURE.md): who among the operators
// (HumanAgents) may act on a task and see it, and which messages an operator
// may see. The rule lives here only; every surface asks these functions.
//
//   - A task belongs to the operator who added it (TaskState.Operator; a task
//     an agent adds belongs to the MAS's default operator). Its owner, the
//     operators it is shared with (TaskState.SharedWith) and the admins may
//     manage it, add participants to it, message inside it and see it. The
//     base task is everyone's.
//   - A message with an operator among its sender and receivers is private:
//     only the operators among them see it (admins included in no other way).
//     A step of an agent that carries such a message is private alike.
//   - Agents of the MAS (LLM agents, the engine) are not restricted.

// access holds the configured admins.
type access struct {
	admins atomic.Pointer[[]string]
}

// SetAdmins names the operators who may manage and see every task (they
// still see only their own private messages). Each must be a HumanAgent.
func (s *System) SetAdmins(ids []string) error {
	for _, id := range ids {
		if a, ok := s.agent(id); !ok || a.kind != KindHuman {
			return errf(ErrNotFound, "admins: %q: no such HumanAgent", id)
		}
	}
	l := slices.Clone(ids)
	s.access.admins.Store(&l)
	return nil
}

func (s *System) isAdmin(id string) bool {
	l := s.access.admins.Load()
	return l != nil && slices.Contains(*l, id)
}

// restricted reports whether the rule applies to id: to operators and to
// IDs that name no agent, not to the MAS's own agents.
func (s *System) restricted(id string) bool {
	a, ok := s.agent(id)
	return !ok || a.kind == KindHuman
}

// owner is the operator a task belongs to.
func (s *System) owner(ts *TaskState) string {
	if ts.Operator != "" {
		return ts.Operator
	}
	return s.operatorID
}

// allowed is the rule for a task whose state is ts.
func (s *System) allowed(operatorID string, ts *TaskState) bool {
	return !s.restricted(operatorID) || ts.Base || operatorID == s.owner(ts) ||
		slices.Contains(ts.SharedWith, operatorID) || s.isAdmin(operatorID)
}

// MayOperate returns nil if operatorID may manage the task, add participants
// to it, share it and message inside it; otherwise an ErrForbidden error
// naming the rule (ErrNotFound for a task that does not exist).
func (s *System) MayOperate(operatorID, taskID string) error {
	t, ok := s.task(taskID)
	if !ok {
		return errf(ErrNotFound, "task_id %q: no such task", taskID)
	}
	ts := t.brief()
	if s.allowed(operatorID, &ts) {
		return nil
	}
	return errf(ErrForbidden, "task_id %q: owned by operator %s; only its owner, operators it is shared with and admins may manage it", taskID, s.owner(&ts))
}

// Visible reports whether viewerID may see the task (the same rule as
// MayOperate).
func (s *System) Visible(viewerID, taskID string) bool {
	t, ok := s.task(taskID)
	if !ok {
		return false
	}
	ts := t.brief()
	return s.allowed(viewerID, &ts)
}

// notVisible is the error of a read of a task the viewer may not see: the
// same as for a task that does not exist, with the rule.
func notVisible(taskID, viewerID string) error {
	return errf(ErrNotFound, "task_id %q: no such task visible to operator %s (a task is seen by its owner, operators it is shared with and admins)", taskID, viewerID)
}

// MessageVisible reports whether viewerID may see m: a message with an
// operator among its sender and receivers is seen by those operators only.
func (s *System) MessageVisible(viewerID string, m *Message) bool {
	if !s.restricted(viewerID) || m.SenderID == viewerID || slices.Contains(m.Receiver, viewerID) {
		return true
	}
	return !s.isHuman(m.SenderID) && !slices.ContainsFunc(m.Receiver, s.isHuman)
}

func (s *System) isHuman(id string) bool {
	a, ok := s.agent(id)
	return ok && a.kind == KindHuman
}

// ShareTask lets operatorID (a HumanAgent) manage, message inside and see
// the task, and adds it to the task's group. Only who may operate the task
// may share it.
func (s *System) ShareTask(actorID, taskID, operatorID string) (map[string]any, error) {
	if strings.TrimSpace(taskID) == "" {
		return nil, errf(ErrInvalid, "task_id: is empty")
	}
	if err := s.MayOperate(actorID, taskID); err != nil {
		return nil, err
	}
	if strings.TrimSpace(operatorID) == "" {
		return nil, errf(ErrInvalid, "operator: is empty; the agent_id of the operator to share the task with")
	}
	if !s.isHuman(operatorID) {
		return nil, errf(ErrNotFound, "operator %q: no such operator (HumanAgent)", operatorID)
	}
	t, _ := s.task(taskID)
	if err := t.share(operatorID); err != nil {
		return nil, err
	}
	s.joinTask(taskID, operatorID)
	return map[string]any{"task_id": taskID, "shared_with": t.sharedWith()}, nil
}

// TaskFor is Task as viewerID may see it: an error naming the rule for a
// task it may not see, the private messages of others left out.
func (s *System) TaskFor(viewerID, id string) (TaskState, error) {
	t, ok := s.task(id)
	if !ok {
		return TaskState{}, errf(ErrNotFound, "task_id %q: no such task", id)
	}
	ts := t.read()
	if !s.allowed(viewerID, &ts) {
		return TaskState{}, notVisible(id, viewerID)
	}
	s.filterTask(viewerID, &ts)
	return ts, nil
}

// TasksFor is Tasks as viewerID may see them.
func (s *System) TasksFor(viewerID string) []TaskState {
	var out []TaskState
	for _, t := range s.allTasks() {
		ts := t.read()
		if s.allowed(viewerID, &ts) {
			s.filterTask(viewerID, &ts)
			out = append(out, ts)
		}
	}
	return out
}

func (s *System) filterTask(viewerID string, ts *TaskState) {
	if !s.restricted(viewerID) {
		return
	}
	keep := func(l []Message) []Message {
		return slices.DeleteFunc(l, func(m Message) bool { return !s.MessageVisible(viewerID, &m) })
	}
	ts.SharedConversationPool = keep(ts.SharedConversationPool)
	ts.CommunicationQueue = keep(ts.CommunicationQueue)
}

// AgentFor is Agent as viewerID may see it.
func (s *System) AgentFor(viewerID, id string) (AgentState, bool) {
	a, ok := s.agent(id)
	if !ok {
		return AgentState{}, false
	}
	st := a.read()
	s.filterAgent(viewerID, &st, s.hiddenContents(viewerID))
	return st, true
}

// AgentsFor is Agents as viewerID may see them.
func (s *System) AgentsFor(viewerID string) []AgentState {
	hidden := s.hiddenContents(viewerID)
	as := s.allAgents()
	out := make([]AgentState, len(as))
	for i, a := range as {
		out[i] = a.read()
		s.filterAgent(viewerID, &out[i], hidden)
	}
	return out
}

// hiddenContents lists the texts of the messages viewerID may not see in
// the tasks it may see (nil for an unrestricted viewer).
func (s *System) hiddenContents(viewerID string) []string {
	if !s.restricted(viewerID) {
		return nil
	}
	var out []string
	for _, t := range s.allTasks() {
		ts := t.read()
		if !s.allowed(viewerID, &ts) {
			continue
		}
		for _, m := range slices.Concat(ts.SharedConversationPool, ts.CommunicationQueue) {
			if strings.TrimSpace(m.Message) != "" && !s.MessageVisible(viewerID, &m) {
				out = append(out, m.Message)
			}
		}
	}
	return out
}

// filterAgent leaves out of an agent's state what viewerID may not see: an
// other operator's conversations and steps; the steps, working memory and
// waits of tasks it may not see; and steps that carry a private message of
// others (a reply to another operator, or a step whose text holds one).
func (s *System) filterAgent(viewerID string, st *AgentState, hidden []string) {
	if !s.restricted(viewerID) || st.AgentID == viewerID {
		return
	}
	if st.Kind == KindHuman {
		st.ConversationPool = nil // an operator's conversations are its own (spec §7.1)
		st.AgentStep.StepList = nil
		st.AgentStep.TodoList = nil
	}
	visible := map[string]bool{}
	seen := func(taskID string) bool {
		v, ok := visible[taskID]
		if !ok {
			v = s.Visible(viewerID, taskID)
			visible[taskID] = v
		}
		return v
	}
	var dropped []string
	st.AgentStep.StepList = slices.DeleteFunc(st.AgentStep.StepList, func(sp StepState) bool {
		drop := !seen(sp.TaskID) || (sp.ReplyTo != "" && sp.ReplyTo != viewerID && s.isHuman(sp.ReplyTo)) || carries(&sp, hidden)
		if drop {
			dropped = append(dropped, sp.StepID)
		}
		return drop
	})
	st.AgentStep.TodoList = slices.DeleteFunc(st.AgentStep.TodoList, func(id string) bool { return slices.Contains(dropped, id) })
	for id := range st.WorkingMemory {
		if !seen(id) {
			delete(st.WorkingMemory, id)
		}
	}
	st.Waits = slices.DeleteFunc(st.Waits, func(w Wait) bool { return !seen(w.TaskID) })
}

// carries reports whether a step's texts hold one of the hidden messages,
// or a hidden message shows the step's tool call arguments (a risk-gate
// approval question quotes them as JSON).
func carries(sp *StepState, hidden []string) bool {
	if len(hidden) == 0 {
		return false
	}
	if c := sp.InstructionContent; c != nil && len(c.Arguments) > 0 {
		// Arguments that do not encode cannot have been quoted.
		if b, err := json.Marshal(c.Arguments); err == nil && slices.ContainsFunc(hidden, func(h string) bool { return strings.Contains(h, string(b)) }) {
			return true
		}
	}
	texts := []string{sp.StepIntention, sp.TextContent}
	var docs []any
	if sp.InstructionContent != nil {
		docs = append(docs, sp.InstructionContent)
	}
	if sp.ExecuteResult != nil {
		docs = append(docs, sp.ExecuteResult)
	}
	for _, v := range docs {
		b, err := json.Marshal(v)
		if err != nil {
			return true // what it holds cannot be told: hidden, to be safe
		}
		texts = append(texts, string(b))
	}
	for _, h := range hidden {
		// h as it appears inside JSON (a string always encodes).
		hj, _ := json.Marshal(h)
		inner := strings.Trim(string(hj), `"`)
		for _, t := range texts {
			if strings.Contains(t, h) || strings.Contains(t, inner) {
				return true
			}
		}
	}
	return false
}

// EventVisible reports whether viewerID may see an event (one of a task it
// may not see is left out).
func (s *System) EventVisible(viewerID string, ev Event) bool {
	return ev.TaskID == "" || s.Visible(viewerID, ev.TaskID)
}
