package engine

import (
	"fmt"
	"strings"
	"time"
)

// OperatorNamed returns the ID of the operator (HumanAgent) named name, as
// AddOperator would name it, and whether there is one: a configured
// operator (http.tokens, http.passwords) is found again by its name at
// every start rather than added again, so that its token or password acts
// as the operator that owns its tasks and questions. Of several operators
// of that name (the same name configured by hand twice, or the duplicates
// older builds added at each restart) the earliest created is the one, and
// the others are reported, so that the caller can say so.
func (s *System) OperatorNamed(name string) (id string, others []string) {
	name = strings.TrimSpace(s.Scrub(name))
	var first time.Time
	for _, opID := range s.operators() {
		a, ok := s.agent(opID)
		if !ok {
			continue
		}
		var n string
		var created time.Time
		a.mu.peek(func(st *AgentState) { n, created = st.Name, st.CreatedAt })
		if n != name {
			continue
		}
		switch {
		case id == "":
			id, first = opID, created
		case created.Before(first):
			others = append(others, id)
			id, first = opID, created
		default:
			others = append(others, opID)
		}
	}
	return id, others
}

// AddOperator creates a HumanAgent for an operator (spec §7) and makes it a
// member of the base task, so it can talk to the manager at once.
func (s *System) AddOperator(name string) (string, error) {
	name = strings.TrimSpace(s.Scrub(name))
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
	if _, err := s.joinTask(s.baseTaskID, a.id); err != nil {
		s.log.Error("store: the new operator's place in the base task refused", "agent", a.id, "err", err)
	}
	return a.id, nil
}

// SetOperatorPassword sets the password an operator binds with (spec
// §7.4.1). Only a hash is kept, outside the agent's state.
func (s *System) SetOperatorPassword(agentID, password string) error {
	a, ok := s.agent(agentID)
	if !ok || a.kind != KindHuman {
		return errf(ErrNotFound, "human_agent_id %q: no such HumanAgent", agentID)
	}
	a.setPassword(password)
	return nil
}

// CheckOperatorPassword reports whether password binds to the HumanAgent.
func (s *System) CheckOperatorPassword(agentID, password string) bool {
	a, ok := s.agent(agentID)
	if !ok || a.kind != KindHuman {
		return false
	}
	return a.checkPassword(password)
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
	// AnswerOnly sends the message only as the answer to the question
	// ReplyTo names (one receiver, its sender): when that question no
	// longer awaits a reply (answered meanwhile from another channel, or
	// expired) nothing is sent and the error wraps ErrNotAwaited. Checked
	// with the answer's hold on the question, so of two answers racing
	// one is sent. Without it (send_message's reply_to), a message naming
	// a question answered already is sent as a plain message. Not a tool
	// input: the server's answers to its elicitation forms set it.
	AnswerOnly bool `json:"-"`
}

// HumanSend sends an operator's message, one message per receiver (spec
// §7.4: each may carry its own return_waiting_id). A message answering one
// that waits carries its return_waiting_id, found in the conversation pool,
// so the operator never handles waiting IDs. The send is recorded as a
// finished send_message step of the HumanAgent. It returns the messages sent.
func (s *System) HumanSend(humanID string, hm HumanMessage) ([]Message, error) {
	hm = scrubbed(s.secrets, hm)
	return operatorAction[[]Message](s, humanID, hm.TaskID, "send_message", hm)(s.humanSend(humanID, hm))
}

func (s *System) humanSend(humanID string, hm HumanMessage) ([]Message, error) {
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
	if !t.inGroup(humanID) {
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
	if err := t.checkStageRelative(stage); err != nil {
		return nil, err
	}
	// The operator's working memory keeps its messages' steps under
	// their stage, but not under one that is over (recordStepsLocked).
	over := stage != NoRelative && s.stageOver(hm.TaskID, stage)
	if hm.ReplyTo != "" && !h.hasPrivate(hm.ReplyTo) {
		return nil, errf(ErrNotFound, "reply_to %q: no such message in the operator's conversations", hm.ReplyTo)
	}
	if hm.Decision != nil && (hm.ReplyTo == "" || len(receivers) != 1) {
		return nil, errf(ErrInvalid, "decision: answers one approval question: give its message_id in reply_to and its sender as the one receiver")
	}
	if hm.AnswerOnly && (hm.ReplyTo == "" || len(receivers) != 1) {
		return nil, errf(ErrInvalid, "reply_to: an answer answers one question: give its message_id in reply_to and its sender as the one receiver")
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
		var answeredID string
		if answered != nil {
			answeredID = answered.MessageID
			m.ReturnWaitingID = answered.ReturnWaitingID
			m.ReplyTo = answeredID
		}
		if hm.AnswerOnly && answered == nil {
			h.mu.Unlock()
			return sent, errf(ErrNotAwaited, "reply_to %q: no longer awaits a reply (answered already, from this or another channel, or expired): not sent", hm.ReplyTo)
		}
		if hm.Decision != nil {
			if answered == nil || answered.ReturnWaitingID != confirmWaitID(answered.MessageID) {
				h.mu.Unlock()
				return sent, errf(ErrInvalid, "reply_to %q: is not an approval question awaiting an answer", hm.ReplyTo)
			}
			d := *hm.Decision
			m.Decision = &d
		}
		// Stored before the operator's records change (a message the
		// store refuses is neither sent nor recorded as sent), without the
		// operator's lock: the question it answers is held meanwhile, so
		// the first answer from any channel still wins. A crash between
		// this write and the operator's leaves the question unmarked in
		// the store: the restore marks it replied from the stored answer
		// (settleQuestionsLocked).
		if answeredID != "" {
			if h.answering == nil {
				h.answering = map[string]bool{}
			}
			h.answering[answeredID] = true
		}
		h.mu.Unlock()
		err := s.persist(&m)
		h.mu.Lock()
		delete(h.answering, answeredID)
		if err != nil {
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
		if answeredID != "" {
			h.markRepliedLocked(r, answeredID)
		}
		stepID := h.recordSentLocked(r, stage, over, &m)
		// The message is stored and is delivered next: the operator's
		// record of it is kept through a refused write, not withdrawn
		// (owner.go), as a receiver keeps a message it took.
		h.mu.keepLocked()
		h.mu.Unlock()
		if !over && stage != NoRelative {
			// over, above, is read before the store's write.
			over = h.closeIfOver(hm.TaskID, stage)
		}
		if err := notTaken(m, s.hand(m)); err != nil {
			// Its task ended as it was sent (a cancel racing the send):
			// the operator's records must not show it sent, nor the
			// question it answered replied.
			h.mu.Lock()
			h.notSentLocked(r, answeredID, stepID, &m)
			h.mu.keepLocked()
			h.mu.Unlock()
			return sent, err
		}
		sent = append(sent, m)
	}
	return sent, nil
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
	return h.inbox(), nil
}
