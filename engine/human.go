package engine

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"slices"
	"strings"
)

// AddOperator creates a HumanAgent for an operator (spec §7) and makes it a
// member of the base task, so it can talk to the manager at once.
func (s *System) AddOperator(name string) (string, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		return "", errf(ErrInvalid, "name: is empty")
	}
	st := s.newAgentState(KindHuman, name, "human operator",
		"The human operator of the MAS: hands over tasks, answers agents' questions and judges results.",
		[]string{SkillSendMessage, SkillProcessMessage, SkillTaskManager, SkillAgentManager, SkillAskInfo}, []string{})
	st.HumanConfig = &HumanConfig{Name: name}
	st.ConversationPool = &ConversationPool{ConversationPrivates: map[string][]PrivateMessage{}, GlobalMessages: []string{}}
	a := newAgentOwner(s, st)
	if err := s.register(a); err != nil {
		return "", err
	}
	// Operators added after start-up join the base task (Start puts the
	// first one in it itself).
	s.joinTask(s.baseTaskID, a.id)
	return a.id, nil
}

// SetOperatorPassword sets the password an operator binds with (spec
// §7.4.1). Only a hash is kept, outside the agent's state.
func (s *System) SetOperatorPassword(agentID, password string) error {
	a, ok := s.agent(agentID)
	if !ok || a.kind != KindHuman {
		return errf(ErrNotFound, "human_agent_id %q: no such HumanAgent", agentID)
	}
	h := sha256.Sum256([]byte(password))
	a.mu.Lock()
	a.passwordHash = h[:]
	a.mu.Unlock()
	return nil
}

// CheckOperatorPassword reports whether password binds to the HumanAgent.
func (s *System) CheckOperatorPassword(agentID, password string) bool {
	a, ok := s.agent(agentID)
	if !ok || a.kind != KindHuman {
		return false
	}
	h := sha256.Sum256([]byte(password))
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.passwordHash != nil && subtle.ConstantTimeCompare(a.passwordHash, h[:]) == 1
}

// receiveHuman files a message in the HumanAgent's conversation pool and
// notifies the operator where the spec asks (§7.3).
func (a *agent) receiveHuman(m Message) {
	data := a.sys.senderData(m)
	a.mu.Lock()
	dup := a.seenLocked(m.MessageID)
	a.mu.Unlock()
	if dup {
		return
	}
	// The finish notice names the task: read it before taking our mutex.
	var ended TaskState
	if m.Instruction != nil && m.Instruction.FinishTask != nil {
		if t, ok := a.sys.task(m.Instruction.FinishTask.TaskID); ok {
			ended = t.brief()
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	pool := a.st.ConversationPool
	notify := func(key string, d map[string]any) {
		pool.GlobalMessages = append(pool.GlobalMessages, a.sys.text(key, d))
	}
	if in := m.Instruction; in != nil {
		switch {
		case in.StartStage != nil:
			notify("human_stage_started", map[string]any{"TaskID": in.StartStage.TaskID, "StageID": in.StartStage.StageID})
		case in.FinishStage != nil:
			ref := in.FinishStage
			notify("human_stage_finished", map[string]any{"TaskID": ref.TaskID, "StageID": ref.StageID, "State": m.Message})
			a.removeStepsLocked(func(s *StepState) bool { return s.TaskID == ref.TaskID && s.StageID == ref.StageID })
			if wm := a.st.WorkingMemory[ref.TaskID]; wm != nil {
				delete(wm, ref.StageID)
			}
		case in.FinishTask != nil:
			id := in.FinishTask.TaskID
			notify("human_task_finished", map[string]any{"TaskID": id, "TaskName": ended.TaskName, "State": ended.ExecutionState, "Summary": ended.TaskSummary})
			a.removeStepsLocked(func(s *StepState) bool { return s.TaskID == id })
			delete(a.st.WorkingMemory, id)
			for peer, msgs := range pool.ConversationPrivates {
				pool.ConversationPrivates[peer] = slices.DeleteFunc(msgs, func(p PrivateMessage) bool { return p.TaskID == id })
				if len(pool.ConversationPrivates[peer]) == 0 {
					delete(pool.ConversationPrivates, peer)
				}
			}
		case in.UpdateWorkingMemory != nil:
			a.rememberLocked(in.UpdateWorkingMemory.TaskID, in.UpdateWorkingMemory.StageID)
		}
		a.changedLocked(Event{TaskID: m.TaskID, MessageID: m.MessageID, Detail: "instruction"})
		return
	}
	waitID := m.waitingIDFor(a.id)
	needReply := m.NeedReply && m.SenderID != SystemSender
	pool.ConversationPrivates[m.SenderID] = append(pool.ConversationPrivates[m.SenderID], PrivateMessage{
		SenderID:        m.SenderID,
		Content:         m.Message,
		StageRelative:   m.StageRelative,
		Timestamp:       m.Timestamp,
		NeedReply:       needReply,
		Waiting:         waitID != "",
		ReturnWaitingID: waitID,
		TaskID:          m.TaskID,
		MessageID:       m.MessageID,
	})
	if needReply {
		notify("human_reply_needed", data)
	}
	a.changedLocked(Event{TaskID: m.TaskID, MessageID: m.MessageID, Detail: "message"})
}

// HumanMessage is what an operator sends (spec §7.4, §7.4.1 send_message).
type HumanMessage struct {
	TaskID   string   `json:"task_id"`
	Receiver []string `json:"receiver"`
	Content  string   `json:"content"`
	// StageRelative defaults to NoRelative.
	StageRelative string `json:"stage_relative,omitempty"`
	NeedReply     bool   `json:"need_reply"`
	Waiting       bool   `json:"waiting"`
	// ReplyTo optionally names the message_id this answers; by default the
	// oldest unanswered message from each receiver in the task is answered
	// (a waiting one first).
	ReplyTo string `json:"reply_to,omitempty"`
	// Decision answers an approval question (ReplyTo must name one) with
	// a structured approve/deny.
	Decision *Decision `json:"decision,omitempty"`
}

// HumanSend sends an operator's message, one message per receiver (spec
// §7.4: each may carry its own return_waiting_id). A message answering one
// that waits carries its return_waiting_id, found in the conversation pool,
// so the operator never handles waiting IDs. The send is recorded as a
// finished send_message step of the HumanAgent. It returns the messages sent.
func (s *System) HumanSend(humanID string, hm HumanMessage) ([]Message, error) {
	h, ok := s.agent(humanID)
	if !ok || h.kind != KindHuman {
		return nil, errf(ErrNotFound, "human_agent_id %q: no such HumanAgent", humanID)
	}
	t, ok := s.task(hm.TaskID)
	if !ok {
		return nil, errf(ErrNotFound, "task_id %q: no such task", hm.TaskID)
	}
	if err := s.MayOperate(humanID, hm.TaskID); err != nil {
		return nil, err
	}
	if strings.TrimSpace(hm.Content) == "" {
		return nil, errf(ErrInvalid, "content: is empty")
	}
	t.mu.Lock()
	member := t.inGroupLocked(humanID)
	t.mu.Unlock()
	if !member {
		return nil, errf(ErrForbidden, "task_id %q: HumanAgent %s is not in this task's group", hm.TaskID, humanID)
	}
	receivers, err := s.checkReceivers(t, humanID, hm.Receiver)
	if err != nil {
		return nil, err
	}
	stage := strings.TrimSpace(hm.StageRelative)
	if stage == "" {
		stage = NoRelative
	}
	if err := checkStageRelative(t, stage); err != nil {
		return nil, err
	}
	if hm.ReplyTo != "" && !h.hasPrivate(hm.ReplyTo) {
		return nil, errf(ErrNotFound, "reply_to %q: no such message in the operator's conversations", hm.ReplyTo)
	}
	if hm.Decision != nil && (hm.ReplyTo == "" || len(receivers) != 1) {
		return nil, errf(ErrInvalid, "decision: answers one approval question: give its message_id in reply_to and its sender as the one receiver")
	}

	var sent []Message
	for _, r := range receivers {
		m := s.newMessage("", hm.TaskID, humanID, []string{r}, hm.Content, stage)
		m.NeedReply = hm.NeedReply
		if hm.Waiting && hm.NeedReply {
			m.Waiting = []string{newID()}
		}
		h.mu.Lock()
		answered := h.answerLocked(r, hm.TaskID, hm.ReplyTo)
		if answered != nil {
			m.ReturnWaitingID = answered.ReturnWaitingID
		}
		if hm.Decision != nil {
			if answered == nil || answered.ReturnWaitingID != confirmWaitID(answered.MessageID) {
				h.mu.Unlock()
				return sent, errf(ErrInvalid, "reply_to %q: is not an approval question awaiting an answer", hm.ReplyTo)
			}
			d := *hm.Decision
			m.Decision = &d
		}
		// Stored before the operator's records change: a message the
		// store refuses is neither sent nor recorded as sent.
		if err := s.persist(&m); err != nil {
			h.mu.Unlock()
			if len(sent) > 0 {
				// One message per receiver: say who has it, so that a
				// retry goes only to the others.
				var to []string
				for _, x := range sent {
					to = append(to, x.Receiver...)
				}
				err = fmt.Errorf("receiver %s: %w (the message was sent to %s before this failure)", r, err, strings.Join(to, ", "))
			}
			return sent, err
		}
		if answered != nil {
			answered.Replied = true
		}
		pool := h.st.ConversationPool
		pool.ConversationPrivates[r] = append(pool.ConversationPrivates[r], PrivateMessage{
			SenderID: humanID, Content: m.Message, StageRelative: stage, Timestamp: m.Timestamp,
			NeedReply: m.NeedReply, Waiting: m.Waiting != nil, TaskID: hm.TaskID, MessageID: m.MessageID,
		})
		ids := h.addStepsLocked(hm.TaskID, stage, []StepSpec{{
			StepIntention: "Message to " + r,
			Type:          StepSkill,
			Executor:      SkillSendMessage,
			TextContent:   m.Message,
		}}, false, "")
		// The operator acted already: the step is a record, not a to-do.
		h.st.AgentStep.TodoList = slices.DeleteFunc(h.st.AgentStep.TodoList, func(id string) bool { return id == ids[0] })
		h.finishStepLocked(ids[0], StateFinished, map[string]any{"send_message": m.clone()})
		h.mu.Unlock()
		s.hand(m)
		sent = append(sent, m)
	}
	return sent, nil
}

// expirePrivate marks a message from peer as no longer awaiting a reply.
func (a *agent) expirePrivate(peer, messageID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	msgs := a.st.ConversationPool.ConversationPrivates[peer]
	for i := range msgs {
		if msgs[i].MessageID == messageID && !msgs[i].Replied && !msgs[i].Expired {
			msgs[i].Expired = true
			a.changedLocked(Event{TaskID: msgs[i].TaskID, MessageID: messageID, Detail: "expired"})
			return
		}
	}
}

// hasPrivate reports whether a message is in the HumanAgent's conversations.
func (a *agent) hasPrivate(messageID string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, msgs := range a.st.ConversationPool.ConversationPrivates {
		if slices.ContainsFunc(msgs, func(p PrivateMessage) bool { return p.MessageID == messageID }) {
			return true
		}
	}
	return false
}

// answerLocked finds the message from peer that a new operator message
// answers (nil if none); the caller marks it replied once its answer is
// stored. The pointer is valid while a.mu is held.
func (a *agent) answerLocked(peer, taskID, replyTo string) *PrivateMessage {
	msgs := a.st.ConversationPool.ConversationPrivates[peer]
	pick := -1
	for i := range msgs {
		p := &msgs[i]
		if p.SenderID != peer || !p.NeedReply || p.Replied || p.Expired || p.TaskID != taskID {
			continue
		}
		if replyTo != "" {
			if p.MessageID == replyTo {
				pick = i
				break
			}
			continue
		}
		if pick < 0 || (p.Waiting && !msgs[pick].Waiting) {
			pick = i
		}
	}
	if pick < 0 {
		return nil
	}
	return &msgs[pick]
}

// InboxEntry is a message to an operator.
type InboxEntry struct {
	PrivateMessage
	// AwaitingReply is true while the message needs a reply not yet given.
	AwaitingReply bool `json:"awaiting_reply"`
	// Approval marks a question a tool call waits on (the risk gate's
	// approval, a server's elicitation, missing arguments): answer_approval
	// answers it with a decision.
	Approval bool `json:"approval,omitempty"`
}

// Inbox returns the messages other agents sent to the operator, those
// awaiting a reply first (waiting ones first among them), then newest first.
func (s *System) Inbox(humanID string) ([]InboxEntry, error) {
	h, ok := s.agent(humanID)
	if !ok || h.kind != KindHuman {
		return nil, errf(ErrNotFound, "human_agent_id %q: no such HumanAgent", humanID)
	}
	st := h.read()
	var out []InboxEntry
	for peer, msgs := range st.ConversationPool.ConversationPrivates {
		for _, p := range msgs {
			if p.SenderID == peer {
				out = append(out, InboxEntry{PrivateMessage: p, AwaitingReply: p.NeedReply && !p.Replied && !p.Expired,
					Approval: p.ReturnWaitingID == confirmWaitID(p.MessageID)})
			}
		}
	}
	slices.SortStableFunc(out, func(x, y InboxEntry) int {
		rank := func(e InboxEntry) int {
			switch {
			case e.AwaitingReply && e.Waiting:
				return 0
			case e.AwaitingReply:
				return 1
			}
			return 2
		}
		if d := rank(x) - rank(y); d != 0 {
			return d
		}
		return y.Timestamp.Compare(x.Timestamp)
	})
	return out, nil
}
