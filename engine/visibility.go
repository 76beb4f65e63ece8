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
	// The readers' snapshot: who may see a task is what the store holds,
	// and a step's start, which asks, waits for no write of the task.
	visible := false
	t.mu.peek(func(ts *TaskState) { visible = s.allowed(viewerID, ts) })
	return visible
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
	if _, err := s.joinTask(taskID, operatorID); err != nil {
		return nil, err
	}
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
// other operator's conversations and steps; the steps, working memory,
// waits and persistent-memory entries of tasks it may not see; and steps
// that carry a private message of others (a reply to another operator, or a
// step whose text holds one).
func (s *System) filterAgent(viewerID string, st *AgentState, hidden []string) {
	if !s.restricted(viewerID) || st.AgentID == viewerID {
		return
	}
	if st.Kind == KindHuman {
		// An operator's conversations are its own (spec §7.1), and so are
		// its actions: they are its steps, which its working memory lists.
		st.ConversationPool = nil
		st.AgentStep.StepList = nil
		st.AgentStep.TodoList = nil
		st.WorkingMemory = nil
		// The ID of a notice to it, which is its own too.
		st.OwedOutageNotice = ""
	}
	seen := s.visibleTo(viewerID)
	var dropped []string
	st.AgentStep.StepList = slices.DeleteFunc(st.AgentStep.StepList, func(sp StepState) bool {
		drop := !seen(sp.TaskID) || (sp.ReplyTo != "" && sp.ReplyTo != viewerID && s.isHuman(sp.ReplyTo)) || carries(&sp, hidden)
		if drop {
			dropped = append(dropped, sp.StepID)
		}
		return drop
	})
	st.AgentStep.TodoList = slices.DeleteFunc(st.AgentStep.TodoList, func(id string) bool { return slices.Contains(dropped, id) })
	st.Reports = slices.DeleteFunc(st.Reports, func(r StepReport) bool { return !seen(r.TaskID) || slices.Contains(dropped, r.StepID) })
	// A stage's counts name its task and tell how far the work went.
	st.StageCounts = slices.DeleteFunc(slices.Clone(st.StageCounts), func(c StageCount) bool { return !seen(c.TaskID) })
	for id := range st.WorkingMemory {
		if !seen(id) {
			delete(st.WorkingMemory, id)
		}
	}
	s.filterMemory(viewerID, st, seen)
	// Of the views whose memory is full, the viewer's own and the base
	// task's, which is everyone's: the others tell of other operators'
	// work.
	st.MemoryFullIn = slices.DeleteFunc(slices.Clone(st.MemoryFullIn), func(v string) bool { return v != viewerID && v != s.baseTaskID })
	st.MemoryFull = len(st.MemoryFullIn) > 0
	// A wait for a reply from another operator is the agent's question to
	// it, a private message: its waiting ID and message ID are that
	// operator's to see, as is a wait for a private message of others.
	var droppedWaits []string
	st.Waits = slices.DeleteFunc(st.Waits, func(w Wait) bool {
		drop := !seen(w.TaskID) || (w.For != viewerID && s.isHuman(w.For)) ||
			(w.MessageID != "" && s.messageHidden(viewerID, w.TaskID, w.MessageID))
		if drop {
			droppedWaits = append(droppedWaits, w.WaitingID)
		}
		return drop
	})
	st.StepLock = slices.DeleteFunc(slices.Clone(st.StepLock), func(id string) bool { return slices.Contains(droppedWaits, id) })
	// What a call of another's task waits for names that task (and its
	// budget), and a wait for an operator's answer names its question,
	// which only that operator sees (MessageVisible; Ask asks the task's
	// owner): the agent reads as waiting, no more.
	if st.WaitingIn != "" && (!seen(st.WaitingIn) || st.WaitingOn == WaitingOnOperator && viewerID != s.operatorOf(st.WaitingIn)) {
		st.WaitingFor, st.WaitingOn, st.WaitingIn = "", "", ""
	}
	// So does the question a tool call waits on (CallWaitsOn), asked of
	// the running step's task's operator.
	if st.CallWaitsOn != "" {
		i := slices.IndexFunc(st.AgentStep.StepList, func(p StepState) bool { return p.ExecutionState == StateRunning })
		if i < 0 || !seen(st.AgentStep.StepList[i].TaskID) || viewerID != s.operatorOf(st.AgentStep.StepList[i].TaskID) {
			st.CallWaitsOn = ""
		}
	}
	// The IDs of the messages delivered to the agent are the engine's
	// bookkeeping (a message delivered again is taken once), and among
	// them are other operators' private messages.
	st.Received = nil
}

// filterMemory leaves in st's persistent memory only the entries viewerID
// may see, seen telling the tasks it sees. An entry is what the agent
// learnt in the task it was written in. One that records no task (written
// before entries recorded theirs) may come from any: hidden, to be safe,
// but from admins, who see every task.
func (s *System) filterMemory(viewerID string, st *AgentState, seen func(taskID string) bool) {
	if !s.restricted(viewerID) {
		return
	}
	for k := range st.PersistentMemory {
		// An entry written before entries recorded their task dates from
		// a MAS of one operator: the default operator's (and the admins').
		if id, ok := st.MemoryTasks[k]; ok && seen(id) || !ok && (s.isAdmin(viewerID) || viewerID == s.operatorID) {
			continue
		}
		delete(st.PersistentMemory, k)
		delete(st.MemoryTasks, k)
	}
}

// stepMemory leaves in view, a step's copy of its agent, only the
// persistent-memory entries every reader of the step's task may see
// (readers: its owner, the operators it is shared with, the admins; in the
// base task, every operator; filterMemory for each). The model working in
// a task is not given what the agent learnt in tasks one of them may not
// see, so neither its answers nor the task's trail, where its prompts are
// recorded, can show it. The view's memory-full notice goes with it
// (MemoryFull), and only its own: the other views' are not the step's.
func (s *System) stepMemory(view *AgentState, taskID string) {
	view.MemoryFull = len(view.MemoryFullIn) > 0 && slices.Contains(view.MemoryFullIn, s.memoryView(taskID))
	view.MemoryFullIn = nil
	if len(view.PersistentMemory) == 0 {
		return
	}
	for _, v := range s.readers(taskID) {
		s.filterMemory(v, view, s.visibleTo(v))
	}
}

// readers lists the operators who may read task taskID (Visible): its
// owner, the operators it is shared with and the admins; every operator
// for the base task. What the MAS's agents write in the task is read by
// them all, so it may hold only what each of them may see. For a task that
// does not exist (or that no operator may see) it is an ID that names no
// agent: restricted, it sees no task but the base task.
func (s *System) readers(taskID string) []string {
	var out []string
	for _, op := range s.operators() {
		if s.Visible(op, taskID) {
			out = append(out, op)
		}
	}
	if len(out) == 0 {
		return []string{""}
	}
	return out
}

// allowedAll is allowed for each of viewers.
func (s *System) allowedAll(viewers []string, ts *TaskState) bool {
	for _, v := range viewers {
		if !s.allowed(v, ts) {
			return false
		}
	}
	return true
}

// filterTaskAll is filterTask for each of viewers: what is left, each may
// see.
func (s *System) filterTaskAll(viewers []string, ts *TaskState) {
	for _, v := range viewers {
		s.filterTask(v, ts)
	}
}

// memoryView names the view of an agent's persistent memory that a step
// in the task has: the operator who owns the task (its tasks share it),
// or, in the base task, the base task's ID. The memory caps and the
// memory-full notice are the view's (applyMemoryLocked); what a step is
// shown of it is what every reader of its task may see (stepMemory).
func (s *System) memoryView(taskID string) string {
	t, ok := s.task(taskID)
	if !ok {
		return ""
	}
	var view string
	t.mu.peek(func(ts *TaskState) {
		view = s.owner(ts)
		if ts.Base {
			view = ts.TaskID
		}
	})
	return view
}

// operators lists the MAS's operators (HumanAgents), in the order they
// were enrolled. The list is the registry's own, not a copy: it is only
// appended to, so what the slice returned holds never changes, and it is
// clipped, so that an append by the caller copies it.
func (s *System) operators() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clip(s.operatorOrder)
}

// visibleTo is Visible for viewerID, each task looked up once.
func (s *System) visibleTo(viewerID string) func(taskID string) bool {
	visible := map[string]bool{}
	return func(taskID string) bool {
		v, ok := visible[taskID]
		if !ok {
			v = s.Visible(viewerID, taskID)
			visible[taskID] = v
		}
		return v
	}
}

// messageHidden reports whether messageID names a message of task taskID
// that viewerID may not see. A message the task no longer holds (the base
// task keeps a bounded conversation) cannot be told: it is not hidden.
func (s *System) messageHidden(viewerID, taskID, messageID string) bool {
	hidden, _ := s.messageSeen(viewerID, taskID, messageID)
	return hidden
}

// messageSeen is messageHidden, and whether the task holds the message.
func (s *System) messageSeen(viewerID, taskID, messageID string) (hidden, held bool) {
	t, ok := s.task(taskID)
	if !ok {
		return false, false
	}
	var found *Message
	t.mu.peek(func(ts *TaskState) {
		// The newest first: events and waits are about recent messages.
		for _, l := range [][]Message{ts.SharedConversationPool, ts.CommunicationQueue} {
			for i := len(l) - 1; i >= 0; i-- {
				if l[i].MessageID == messageID {
					m := l[i]
					found = &m
					return
				}
			}
		}
	})
	return found != nil && !s.MessageVisible(viewerID, found), found != nil
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

// EventVisible reports whether viewerID may see an event: one of a task it
// may not see is left out, and so is one that names a private message of
// others (its ID is theirs to see): the delivery of a message the viewer is
// neither the sender nor a receiver of while an operator is, a change of an
// operator's HumanAgent by a message to it.
// So is a change of another operator's HumanAgent or of its steps: an
// operator's actions are its steps, its own (filterAgent), and their
// events would tell another when it acts and what.
func (s *System) EventVisible(viewerID string, ev Event) bool {
	if ev.TaskID != "" && !s.Visible(viewerID, ev.TaskID) {
		return false
	}
	if !s.restricted(viewerID) {
		return true
	}
	if ev.Kind == EventMessageDelivered && ev.MessageID != "" && ev.TaskID != "" {
		// Its agent is the sender: the message's rule decides (an
		// operator it is sent to sees it). One the task no longer holds
		// (the base task keeps its newest messages) cannot be told: hidden
		// but from its sender, whoever sent it, since an agent's message
		// may have been to one operator only.
		hidden, found := s.messageSeen(viewerID, ev.TaskID, ev.MessageID)
		return !hidden && (found || ev.AgentID == viewerID)
	}
	if (ev.MessageID != "" || ev.Kind == EventAgentChanged || ev.Kind == EventStepChanged || ev.Kind == EventLLMCall) &&
		ev.AgentID != "" && ev.AgentID != viewerID && s.isHuman(ev.AgentID) {
		return false
	}
	return ev.MessageID == "" || ev.TaskID == "" || !s.messageHidden(viewerID, ev.TaskID, ev.MessageID)
}

// TrailEntriesFor returns the entries of es (one task's, as a trail reader
// returns them) that viewerID may see; the caller has checked that the task
// is visible. The messages hidden from viewerID are those of the tasks it
// sees (hiddenContents) and the message entries of es it may not see: a
// task's conversation keeps a bounded history, the trail all of it.
//
// The rule is trailEntryVisible's, and a step goes as a whole: when one of
// its entries is left out, so are the others (its LLM call's answer or its
// end state may not quote the hidden message, yet tell what it said).
func (s *System) TrailEntriesFor(viewerID string, es []TrailEntry) []TrailEntry {
	if !s.restricted(viewerID) {
		return slices.Clone(es)
	}
	hidden := s.hiddenContents(viewerID)
	for i := range es {
		if m := es[i].Message; m != nil && strings.TrimSpace(m.Text.Text) != "" && !s.trailMessageVisible(viewerID, m) {
			hidden = append(hidden, m.Text.Text)
		}
	}
	h := newHiddenTexts(hidden)
	droppedSteps := map[string]bool{}
	keep := make([]bool, len(es))
	for i := range es {
		keep[i] = s.trailEntryVisible(viewerID, &es[i], h)
		if id := es[i].StepID; !keep[i] && id != "" && es[i].Message == nil {
			droppedSteps[id] = true
		}
	}
	out := make([]TrailEntry, 0, len(es))
	for i := range es {
		if keep[i] && (es[i].Message != nil || !droppedSteps[es[i].StepID]) {
			out = append(out, es[i])
		}
	}
	return out
}

// trailEntryVisible reports whether viewerID may see a trail entry of a task
// it may see, h holding the texts of the messages it may not see (the texts
// of the task's private messages of others). It applies the rule of
// messages and steps to the trail:
//
//   - a message or instruction entry is seen as its message is
//     (MessageVisible), and an instruction that quotes a hidden message is
//     left out;
//   - an entry of another operator (its actions and steps) is that
//     operator's own;
//   - an LLM call, tool call or step whose bodies hold a hidden message is
//     left out (a manager's prompt quotes the message it digests, its answer
//     the reply it writes), as is a step that replies to another operator
//     (filterAgent's rule for step lists).
func (s *System) trailEntryVisible(viewerID string, e *TrailEntry, h *hiddenTexts) bool {
	if m := e.Message; m != nil {
		if !s.trailMessageVisible(viewerID, m) {
			return false
		}
		// A message seen by the viewer is its own to read, whatever it
		// says (as in the task's conversation); an instruction of the
		// engine may quote a message it may not see.
		return m.Instruction == nil || !h.inAny(m.Text.Text)
	}
	if e.AgentID == viewerID {
		return true
	}
	if s.isHuman(e.AgentID) {
		return false // an operator's actions and steps are its own (spec §7.1)
	}
	if st := e.Step; st != nil && st.ReplyTo != "" && st.ReplyTo != viewerID && s.isHuman(st.ReplyTo) {
		return false
	}
	if h.empty() {
		return true
	}
	if st := e.Step; st != nil && carries(st, h.texts) {
		return false
	}
	if l := e.LLM; l != nil {
		for i := range l.Request {
			if h.inAny(l.Request[i].Content.Text) {
				return false
			}
		}
		if h.inAny(l.Answer.Text) || (l.Parsed != nil && h.inAny(l.Parsed.Text)) || h.inAny(l.ParseError) || h.inAny(l.Error) {
			return false
		}
	}
	if t := e.Tool; t != nil {
		if h.inAny(t.Arguments.Text) || h.inAny(t.Result.Text) || h.inAny(t.Error) || h.quotes(t.Arguments.Text) {
			return false
		}
		if len(t.Approval) > 0 {
			b, err := json.Marshal(t.Approval)
			if err != nil || h.inAny(string(b)) {
				return false // what it holds cannot be told: hidden, to be safe
			}
		}
	}
	if a := e.Action; a != nil && (h.inAny(a.Input.Text) || h.inAny(a.Result.Text) || h.inAny(a.Error)) {
		return false
	}
	return !h.inAny(e.Note)
}

// trailMessageVisible is MessageVisible for a trail's record of a message.
func (s *System) trailMessageVisible(viewerID string, m *TrailMessage) bool {
	return s.MessageVisible(viewerID, &Message{SenderID: m.SenderID, Receiver: m.Receiver})
}

// hiddenTexts are hidden messages' texts in both forms they appear in in
// another text: as written (a prompt), and escaped as a JSON string (a parsed
// answer, a tool call's arguments). Each form is computed once per read, not
// once per entry.
type hiddenTexts struct {
	texts   []string
	needles []string
}

func newHiddenTexts(hidden []string) *hiddenTexts {
	h := &hiddenTexts{}
	seen := map[string]bool{}
	add := func(s string) {
		if !seen[s] {
			seen[s] = true
			h.needles = append(h.needles, s)
		}
	}
	for _, t := range hidden {
		if strings.TrimSpace(t) == "" || seen[t] {
			continue
		}
		h.texts = append(h.texts, t)
		add(t)
		// t as it appears inside JSON, as encoding/json writes it (HTML
		// characters escaped) and as an LLM writes it (not escaped).
		b, _ := json.Marshal(t)
		add(unquote(string(b)))
		add(jsonInner(t))
	}
	return h
}

// jsonInner is s encoded as a JSON string without its quotes and without
// escaping HTML characters.
func jsonInner(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return unquote(strings.TrimSuffix(b.String(), "\n"))
}

// unquote drops the quotes around an encoded JSON string (only those: a
// string ending in a quote encodes to one ending in \").
func unquote(q string) string {
	if len(q) >= 2 {
		return q[1 : len(q)-1]
	}
	return q
}

func (h *hiddenTexts) empty() bool { return len(h.needles) == 0 }

// inAny reports whether text holds a hidden message.
func (h *hiddenTexts) inAny(text string) bool {
	if text == "" {
		return false
	}
	for _, n := range h.needles {
		if strings.Contains(text, n) {
			return true
		}
	}
	return false
}

// quotes reports whether a hidden message quotes args, a tool call's JSON
// arguments (a risk-gate approval question to an operator shows them).
// Arguments too short to tell apart ({} and the like) quote nothing.
func (h *hiddenTexts) quotes(args string) bool {
	if len(args) <= len("{}") || args == "null" {
		return false
	}
	for _, t := range h.texts {
		if strings.Contains(t, args) {
			return true
		}
	}
	return false
}
