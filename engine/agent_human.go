package engine

import (
	"crypto/sha256"
	"crypto/subtle"
	"slices"
)

// receiveHuman files a message in the HumanAgent's conversation pool and
// notifies the operator where the spec asks (§7.3). It reports false when
// the operator does not take it: a message of a task that has ended
// (lateLocked), which nobody could answer.
func (a *agent) receiveHuman(m Message) bool {
	data := a.sys.senderData(m)
	a.mu.Lock()
	dup := a.seenLocked(m.MessageID)
	a.mu.Unlock()
	if dup {
		return true
	}
	// The finish notice names the task: read it before taking our mutex.
	var ended TaskState
	if m.Instruction != nil && m.Instruction.FinishTask != nil {
		if t, ok := a.sys.task(m.Instruction.FinishTask.TaskID); ok {
			ended = t.brief()
		}
	}
	a.mu.Lock()
	if a.lateLocked(m) {
		a.mu.Unlock()
		a.late(m)
		return false
	}
	// A waiter on a question that arrives expired is released once our
	// mutex is (no path holds two owners'): nobody will answer it.
	var lost []lostReply
	defer func() { a.sys.releaseLost(a, lost...) }()
	defer a.mu.Unlock()
	// The message is stored and delivered: kept through a refused write of
	// the operator's document, and written by the owner's retries, rather
	// than withdrawn and lost from the inbox (receive does the same).
	defer a.mu.keepLocked()
	if a.st.OwedOutageNotice != "" && m.MessageID == a.st.OwedOutageNotice {
		// The notice about the endpoint the operator was owed across
		// restarts: taken in this write, so owed no longer.
		a.st.OwedOutageNotice = ""
	}
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
			a.forgetStageLocked(ref.TaskID, ref.StageID)
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
		return true
	}
	waitID := m.waitingIDFor(a.id)
	needReply := m.NeedReply && m.SenderID != SystemSender
	// A question of a stage that has ended, sent as it ended, awaits no
	// reply: nobody waits for it, and the stage end's pass over this inbox
	// (expireStageLocked, under a.mu) may have come before it. Read under
	// a.mu: the stage is marked ended before that pass, so a question
	// taken before the mark is there for the pass to expire.
	expired := needReply && m.StageRelative != NoRelative && waitID != confirmWaitID(m.MessageID) &&
		a.sys.stageHasEnded(m.TaskID, m.StageRelative)
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
		Expired:         expired,
	})
	if needReply && !expired {
		notify("human_reply_needed", data)
	}
	if expired && waitID != "" {
		// The sender waits on it (its wait, engaged after the stage end
		// released the stage's, would hold every step of its until the
		// wait timeout): told no reply will come, as for a reply lost.
		lost = append(lost, lostReply{waiter: m.SenderID, waitingID: waitID, taskID: m.TaskID,
			reason: "the operator got the question after its stage (" + m.StageRelative + ") ended: no reply will come"})
	}
	a.changedLocked(Event{TaskID: m.TaskID, MessageID: m.MessageID, Detail: "message"})
	return true
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

// awaitsReply reports whether the message needs a reply not yet given
// (the inbox's awaiting_reply).
func (p *PrivateMessage) awaitsReply() bool { return p.NeedReply && !p.Replied && !p.Expired }

// awaitsReplyIn reports whether the operator has a message of the task in
// its inbox awaiting its reply (supervision's busy).
func (a *agent) awaitsReplyIn(taskID string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.st.ConversationPool == nil {
		return false
	}
	for peer, msgs := range a.st.ConversationPool.ConversationPrivates {
		if slices.ContainsFunc(msgs, func(p PrivateMessage) bool { return p.SenderID == peer && p.TaskID == taskID && p.awaitsReply() }) {
			return true
		}
	}
	return false
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
		if p.SenderID != peer || !p.awaitsReply() || p.TaskID != taskID || a.answering[p.MessageID] {
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

// answerKey names a question an operator's stored message answers: the
// operator, and the question's message ID (the answer's reply_to) or its
// waiting ID (the answer's return_waiting_id, all an answer stored by an
// older mas-mcp names).
type answerKey struct{ operator, id string }

// storedAnswers returns the questions the operators' stored messages
// answer, for the restore to mark replied (settleQuestionsLocked).
func storedAnswers(img *Image) map[answerKey]bool {
	operators := map[string]bool{}
	for _, a := range img.Agents {
		if a.Kind == KindHuman {
			operators[a.AgentID] = true
		}
	}
	answers := map[answerKey]bool{}
	for _, m := range img.Messages {
		if !operators[m.SenderID] {
			continue
		}
		if m.ReplyTo != "" {
			answers[answerKey{m.SenderID, m.ReplyTo}] = true
		}
		if m.ReturnWaitingID != "" {
			answers[answerKey{m.SenderID, m.ReturnWaitingID}] = true
		}
	}
	return answers
}

// settleQuestionsLocked settles, at restore, the operator's questions
// still awaiting a reply that nobody will reply to or wait for:
//   - a question a stored message of the operator answers is marked
//     replied (answered: storedAnswers). The answer is stored before the
//     operator's document marks the question (humanSend): a crash between
//     the two writes left the mark out, and the operator would be asked
//     again, its second answer reaching the asker as a new message;
//   - an AskOperator question (an approval) is marked expired: only the
//     dead process waited for its answer (the asking tool step failed, or
//     runs again and asks anew).
//
// Called at restore, before the HumanAgent is registered (which stores it).
func (a *agent) settleQuestionsLocked(answered map[answerKey]bool) {
	if a.st.ConversationPool == nil {
		return
	}
	for _, msgs := range a.st.ConversationPool.ConversationPrivates {
		for i := range msgs {
			p := &msgs[i]
			if !p.awaitsReply() {
				continue
			}
			switch {
			case answered[answerKey{a.id, p.MessageID}] || (p.ReturnWaitingID != "" && answered[answerKey{a.id, p.ReturnWaitingID}]):
				p.Replied = true
			case p.ReturnWaitingID == confirmWaitID(p.MessageID):
				p.Expired = true
			}
		}
	}
}

// expireStageLocked marks the questions of the ended stages (ended reports
// which) still awaiting the operator's reply as expired, and reports
// whether there were any: the stage's steps are gone and the waits on it
// released, so nobody waits for their answers, and a reply would reach an
// agent with nothing left to do in that stage. An approval question is
// left to the Ask that waits on it (its step may run on: it expires the
// question when it stops waiting). a.mu must be held.
func (a *agent) expireStageLocked(ended func(taskID, stageID string) bool) bool {
	if a.st.ConversationPool == nil {
		return false
	}
	expired := false
	for peer, msgs := range a.st.ConversationPool.ConversationPrivates {
		for i := range msgs {
			p := &msgs[i]
			if p.SenderID == peer && p.awaitsReply() && p.StageRelative != NoRelative &&
				p.ReturnWaitingID != confirmWaitID(p.MessageID) && ended(p.TaskID, p.StageRelative) {
				p.Expired = true
				expired = true
			}
		}
	}
	return expired
}

// setPassword keeps the hash of an operator's password, outside its state.
func (a *agent) setPassword(password string) {
	h := sha256.Sum256([]byte(password))
	a.mu.Lock()
	a.passwordHash = h[:]
	a.mu.Unlock()
}

// checkPassword reports whether password is the operator's.
func (a *agent) checkPassword(password string) bool {
	h := sha256.Sum256([]byte(password))
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.passwordHash != nil && subtle.ConstantTimeCompare(a.passwordHash, h[:]) == 1
}

// markRepliedLocked marks the message from peer with the given ID as
// replied (the operator's answer to it is stored). a.mu must be held.
func (a *agent) markRepliedLocked(peer, id string) {
	msgs := a.st.ConversationPool.ConversationPrivates[peer]
	for i := range msgs {
		if msgs[i].MessageID == id {
			msgs[i].Replied = true
			return
		}
	}
}

// recordSentLocked records an operator's message to r, stored already: in
// the conversation with r, and as a finished send_message step (over: its
// stage is over, stageOver), whose ID it returns. a.mu must be held.
func (a *agent) recordSentLocked(r, stage string, over bool, m *Message) string {
	pool := a.st.ConversationPool
	pool.ConversationPrivates[r] = append(pool.ConversationPrivates[r], PrivateMessage{
		SenderID: a.id, Content: m.Message, StageRelative: stage, Timestamp: m.Timestamp,
		NeedReply: m.NeedReply, Waiting: m.Waiting != nil, TaskID: m.TaskID, MessageID: m.MessageID,
	})
	return a.recordDoneLocked(m.TaskID, stage, over, StepSpec{
		StepIntention: "Message to " + r,
		Type:          StepSkill,
		Executor:      SkillSendMessage,
		TextContent:   m.Message,
	}, map[string]any{"send_message": m.clone()})
}

// notSentLocked takes back the records of an operator's message to r that
// r did not take, its task having ended as it was sent (humanSend): the
// message and its send_message step (stepID) are withdrawn, and the
// question it answered (answeredID, "" when none) is not shown replied;
// it is expired, as nobody waits for its answer in an ended task. The
// task's finish_task, taken before or after, drops the rest of what the
// operator holds of it. a.mu must be held.
func (a *agent) notSentLocked(r, answeredID, stepID string, m *Message) {
	pool := a.st.ConversationPool
	msgs := slices.DeleteFunc(pool.ConversationPrivates[r], func(p PrivateMessage) bool { return p.MessageID == m.MessageID })
	for i := range msgs {
		if p := &msgs[i]; answeredID != "" && p.MessageID == answeredID {
			p.Replied, p.Expired = false, true
		}
	}
	if len(msgs) == 0 {
		delete(pool.ConversationPrivates, r)
	} else {
		pool.ConversationPrivates[r] = msgs
	}
	if stepID != "" {
		a.removeStepsLocked(func(s *StepState) bool { return s.StepID == stepID })
	}
	a.changedLocked(Event{TaskID: m.TaskID, MessageID: m.MessageID, Detail: "not_sent"})
}

// recordDoneLocked adds a step the operator has done already: a record,
// not a to-do, kept in working memory under its stage unless the stage is
// over (stageOver). It returns the step's ID ("" when none was added).
// a.mu must be held.
func (a *agent) recordDoneLocked(taskID, stageID string, over bool, spec StepSpec, result map[string]any) string {
	add := a.addStepsLocked
	if over {
		add = a.followStepsLocked
	}
	ids := add(taskID, stageID, []StepSpec{spec}, false, "")
	if len(ids) == 0 {
		return ""
	}
	a.st.AgentStep.TodoList = slices.DeleteFunc(a.st.AgentStep.TodoList, func(id string) bool { return id == ids[0] })
	a.finishStepLocked(ids[0], StateFinished, result, nil)
	return ids[0]
}

// recordDone is recordDoneLocked with the agent's lock taken, for a stage
// that is not over (the base task's).
func (a *agent) recordDone(taskID, stageID string, spec StepSpec, result map[string]any) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.recordDoneLocked(taskID, stageID, false, spec, result)
}

// inbox is the messages other agents sent to the operator, those awaiting
// a reply first (waiting ones first among them), then newest first.
func (a *agent) inbox() []InboxEntry {
	st := a.read()
	var out []InboxEntry
	for peer, msgs := range st.ConversationPool.ConversationPrivates {
		for _, p := range msgs {
			if p.SenderID == peer {
				out = append(out, InboxEntry{PrivateMessage: p, AwaitingReply: p.awaitsReply(),
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
	return out
}
