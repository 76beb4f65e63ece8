package engine

import (
	"fmt"
	"slices"
	"strings"
)

// newMessage builds a message that does not need a reply; id "" means a
// fresh one.
func (s *System) newMessage(id, taskID, sender string, receivers []string, text, stage string) Message {
	if id == "" {
		id = newID()
	}
	if stage == "" {
		stage = NoRelative
	}
	return Message{
		TaskID:        taskID,
		SenderID:      sender,
		Receiver:      slices.Clone(receivers),
		Message:       text,
		StageRelative: stage,
		MessageID:     id,
		Timestamp:     s.now(),
	}
}

// instruction builds an engine instruction to one agent (spec §6.2.2). Its
// ID derives from origin (the step that caused it), or else from what it
// says: an instruction repeated after a restart is received once.
func (s *System) instruction(origin, taskID, stage, receiver, text string, in *Instruction) Message {
	if origin == "" {
		origin = instructionKey(in)
	}
	m := s.newMessage(derivedID(origin, receiver), taskID, SystemSender, []string{receiver}, text, stage)
	m.Instruction = in
	return m
}

// instructionKey names an instruction by its kind and what it is about.
func instructionKey(in *Instruction) string {
	switch {
	case in.StartTask != nil:
		return "start_task/" + in.StartTask.TaskID
	case in.StartStage != nil:
		return "start_stage/" + in.StartStage.TaskID + "/" + in.StartStage.StageID
	case in.FinishStage != nil:
		return "finish_stage/" + in.FinishStage.TaskID + "/" + in.FinishStage.StageID
	case in.FinishTask != nil:
		return "finish_task/" + in.FinishTask.TaskID
	case in.UpdateWorkingMemory != nil:
		return "update_working_memory/" + in.UpdateWorkingMemory.TaskID + "/" + in.UpdateWorkingMemory.StageID
	}
	return ""
}

// persist makes a message durable (write-through): a restart delivers what
// a crash interrupted, and receivers take each message once.
func (s *System) persist(m *Message) error {
	s.trailMessage(m)
	st := s.cfg.Store
	if st == nil {
		return nil
	}
	if err := st.PutMessage(s.storeCtx, m); err != nil {
		return fmt.Errorf("message not sent, it could not be stored: %w", err)
	}
	return nil
}

// deliver stores and delivers the engine's own notices and instructions.
// Each is derived from stored state with a fixed ID, so one the store
// refused is delivered all the same (the MAS keeps moving) and sent again,
// with the same ID, by the next start (StartFrom). Messages an agent or
// operator wrote go through post instead.
func (s *System) deliver(msgs ...Message) {
	for _, m := range msgs {
		if err := s.persist(&m); err != nil {
			s.log.Error("store: put message", "message", m.MessageID, "err", err)
		}
		s.hand(m)
	}
}

// post stores a message an agent or operator wrote and then delivers it.
// One the store refuses is not delivered at all: nothing is seen that a
// restart would lose. The error says so, as it says which receivers did
// not take it because its task ended meanwhile (notTaken).
func (s *System) post(m Message) error {
	if err := s.persist(&m); err != nil {
		return err
	}
	return notTaken(m, s.hand(m))
}

// notTaken is the error of a message its receivers refused, its task
// having ended as it was sent (lateLocked); nil when none did.
func notTaken(m Message, refused []string) error {
	if len(refused) == 0 {
		return nil
	}
	return errf(ErrEnded, "task_id %q: the task ended as the message was sent: not delivered to %s (nothing more is done in an ended task)", m.TaskID, strings.Join(refused, ", "))
}

// hand records a stored message in its task's conversation pool and hands
// it to every receiver (spec §1.2, §8.4). Delivery is immediate: the
// receiver's new step is queued before hand returns. It returns the
// receivers that did not take a message: one of a task that ended as it
// was sent (receive).
func (s *System) hand(msgs ...Message) (refused []string) {
	for _, m := range msgs {
		if t, ok := s.task(m.TaskID); ok {
			t.record(m)
		}
		if s.answered(m) {
			// The answer to an AskOperator question goes to the waiting
			// call, not to the asking agent's steps.
			continue
		}
		for _, r := range m.Receiver {
			a, ok := s.agent(r)
			if !ok {
				s.log.Warn("message to unknown agent dropped", "receiver", r, "message", m.MessageID)
				continue
			}
			if !a.receive(m) {
				refused = append(refused, r)
			}
		}
	}
	return refused
}

// sendFromAgent turns send_message's output into a message and delivers it
// (spec §3.7, §9.1.2). When it waits, the sender's step lock is engaged first
// so the reply can always release it; a wait that would close a wait cycle
// is not engaged (note says so).
func (s *System) sendFromAgent(a *agent, step *StepState, om *OutgoingMessage) (Message, string, error) {
	t, ok := s.task(step.TaskID)
	if !ok {
		return Message{}, "", errf(ErrNotFound, "task_id %q: no such task", step.TaskID)
	}
	asked := []string(om.Receiver)
	if len(asked) == 0 && step.ReplyTo != "" {
		// A reply names its receiver by itself.
		asked = []string{step.ReplyTo}
	}
	receivers, err := s.checkReceivers(t, a.id, asked)
	if err != nil {
		return Message{}, "", err
	}
	if step.ReplyTo != "" && !slices.Contains(receivers, step.ReplyTo) {
		// A reply always reaches the one who asked.
		receivers = append(receivers, step.ReplyTo)
	}
	stage := strings.TrimSpace(om.StageRelative)
	if stage == "" {
		stage = step.StageID
	}
	if err := t.checkStageRelative(stage); err != nil {
		return Message{}, "", err
	}
	if strings.TrimSpace(om.Message) == "" {
		return Message{}, "", errf(ErrInvalid, "message: is empty")
	}
	m := s.newMessage(derivedID(step.StepID, "send"), step.TaskID, a.id, receivers, om.Message, stage)
	if m.Chain, err = s.chainOf(a, step, receivers); err != nil {
		return Message{}, "", err
	}
	m.NeedReply = om.NeedReply
	m.ReturnWaitingID = step.ReturnWaitingID
	var note string
	if om.Waiting && om.NeedReply {
		m.Waiting = make([]string, len(receivers))
		for i := range receivers {
			m.Waiting[i] = derivedID(m.MessageID, "wait", receivers[i])
		}
		note = s.engageWaits(a, &m)
	}
	if err := s.post(m); err != nil {
		a.unwait(m.Waiting...)
		return Message{}, "", err
	}
	return m, note, nil
}

// chainOf is the Chain of a message the agent sends from step: one more
// than the last message it took in the step's task and stage. Past
// MessageChainLimit it is refused, unless every receiver is an operator
// (who breaks the chain by answering).
func (s *System) chainOf(a *agent, step *StepState, receivers []string) (int, error) {
	a.mu.Lock()
	chain := 1
	if c := a.countOf(stageKey{step.TaskID, step.StageID}); c != nil {
		chain += c.Chain
	}
	a.mu.Unlock()
	if chain <= s.cfg.MessageChainLimit {
		return chain, nil
	}
	for _, r := range receivers {
		if ra, ok := s.agent(r); !ok || ra.kind != KindHuman {
			return 0, errf(ErrInvalid, "message: not sent: %d messages between agents in a row led to it with no word from an operator or the engine (limit %d, --message-chain-limit); agents that keep answering each other go on for ever: finish without it, or tell the operator", chain-1, s.cfg.MessageChainLimit)
		}
	}
	return chain, nil
}

// checkReceivers validates receivers against the task: each must exist and
// be in the task group; the sender may not message itself.
func (s *System) checkReceivers(t *task, sender string, receivers []string) ([]string, error) {
	if len(receivers) == 0 {
		return nil, errf(ErrInvalid, "receiver: is empty; name at least one agent_id of the task group")
	}
	taskID, group, ended := t.members()
	if ended {
		return nil, errf(ErrEnded, "task_id %q: the task has ended", taskID)
	}
	var out []string
	for _, r := range receivers {
		r = strings.TrimSpace(r)
		switch {
		case r == sender:
			return nil, errf(ErrInvalid, "receiver %q: is the sender itself", r)
		case !slices.Contains(group, r):
			if _, ok := s.agent(r); !ok {
				return nil, errf(ErrNotFound, "receiver %q: no such agent", r)
			}
			return nil, errf(ErrInvalid, "receiver %q: not in the task group of task %s (%s)", r, taskID, strings.Join(group, ", "))
		case slices.Contains(out, r):
			continue
		}
		out = append(out, r)
	}
	return out, nil
}
