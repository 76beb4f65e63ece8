package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ErrNoAnswer is AskOperator's error when the operator did not answer in time.
var ErrNoAnswer = errors.New("the operator did not answer")

// WaitingOnOperator is AgentState.WaitingOn while the agent's running step
// waits for its operator's answer (Ask).
const WaitingOnOperator = "operator"

// ErrCallNotCleared is Ask's error when the asking step's record that its
// call waits for the answer (OperatorQuestion.BeforeCall) could not be
// dropped from the store: the call must not be made, whoever answered
// (another channel too, an elicitation the question lost to), since a
// restart would take it as never made and run the step again.
var ErrCallNotCleared = errors.New("the step's wait for the operator could not be cleared in the store, so the call is not made")

// OperatorQuestion is a question of an agent to its task's operator that
// blocks the agent's running step until answered (beyond the spec: the
// downstream risk gate asks approval of risky tool calls this way).
type OperatorQuestion struct {
	TaskID, StageID, AgentID string
	Question                 string
	// Timeout bounds the wait (default: the MAS's WaitTimeout);
	// NoQuestionTimeout: none, the question waits for its answer or ctx's
	// end.
	Timeout time.Duration
	// StepID names the asking step, and BeforeCall says that it is a
	// tool step whose call is made only after the answer (the risk gate's
	// approval, missing arguments; not a server's elicitation, asked
	// during the call). The step records the question before it is asked
	// and drops it before the answer is used (callWaits): a restart that
	// finds it recorded knows the call was not made, and runs the step
	// again rather than fail it as a call that may have acted.
	StepID     string
	BeforeCall bool
}

// NoQuestionTimeout is the OperatorQuestion.Timeout of a question that
// does not time out: one no step waits on, whose answer is what the task
// waits for (a budget question: a hold frees no waiting step, and timed
// out it would leave the task held with nothing asking its operator).
const NoQuestionTimeout time.Duration = -1

// AskOperator sends the question to the task's operator as a message that
// needs a reply and is waited on, and blocks until the operator answers
// (the answer's text is returned), the timeout passes (ErrNoAnswer) or ctx
// ends. The answer is consumed here: the asking agent gets no step for it,
// but it stays in the task's conversation.
func (s *System) AskOperator(ctx context.Context, q OperatorQuestion) (string, error) {
	a, err := s.Ask(ctx, q)
	return a.Text, err
}

// Answer is an operator's answer to an OperatorQuestion: its text, and the
// structured decision when the operator answered with one (answer_approval,
// a button) rather than free text.
type Answer struct {
	Text     string
	Decision *Decision
}

// Ask is AskOperator with the whole answer.
func (s *System) Ask(ctx context.Context, q OperatorQuestion) (ans Answer, err error) {
	q = scrubbed(s.secrets, q)
	t, ok := s.task(q.TaskID)
	if !ok {
		return Answer{}, errf(ErrNotFound, "task_id %q: no such task", q.TaskID)
	}
	op, ended := t.operator()
	if ended {
		return Answer{}, errf(ErrEnded, "task_id %q: has ended", q.TaskID)
	}
	if op == "" {
		op = s.operatorID
	}
	timeout := q.Timeout
	if timeout == 0 {
		timeout = s.cfg.WaitTimeout
	}
	m := s.newMessage("", q.TaskID, q.AgentID, []string{op}, q.Question, q.StageID)
	m.NeedReply = true
	m.Waiting = []string{confirmWaitID(m.MessageID)}
	settle, err := s.callWaits(q, m.MessageID)
	if err != nil {
		return Answer{}, err
	}
	defer func() {
		// The call waits no more: it is made only once the step no
		// longer says so in the store.
		if werr := settle(); werr != nil {
			ans, err = Answer{}, fmt.Errorf("%w: %w", ErrCallNotCleared, werr)
		}
	}()
	defer s.noteQuestion(ctx, m.MessageID)()
	answer := make(chan Message, 1)
	s.confirmMu.Lock()
	if s.confirms == nil {
		s.confirms = map[string]chan Message{}
	}
	s.confirms[m.Waiting[0]] = answer
	s.confirmMu.Unlock()
	defer func() {
		s.confirmMu.Lock()
		delete(s.confirms, m.Waiting[0])
		s.confirmMu.Unlock()
	}()
	// Shown before the question is posted: a reader who sees the
	// question sees the agent waiting for its answer.
	defer s.showAsking(ctx, &q, m.MessageID)()
	if err := s.post(m); err != nil {
		return Answer{}, err
	}

	var expired <-chan time.Time // nil: never
	if timeout > 0 {
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		expired = timer.C
	}
	select {
	case a := <-answer:
		return Answer{Text: a.Message, Decision: a.Decision}, nil
	case <-expired:
		err = ErrNoAnswer
	case <-ctx.Done():
		err = ctx.Err()
	}
	// Nobody waits any more: the question leaves the operator's list of
	// messages awaiting a reply.
	if h, ok := s.agent(op); ok && h.kind == KindHuman {
		h.expirePrivate(q.AgentID, m.MessageID)
	}
	return Answer{}, err
}

// askingStepKey is the key of a running step's stepOutage in the context
// its executor runs under (runStep).
type askingStepKey struct{}

// showAsking shows the agent whose running step asks q under ctx waiting
// for the operator's answer to it (message messageID), as a call waiting
// out an outage or a budget hold shows, and returns what shows it working
// again. A question no step of q's agent asks in q's task (the budget
// question) shows nothing.
func (s *System) showAsking(ctx context.Context, q *OperatorQuestion, messageID string) (over func()) {
	o, ok := ctx.Value(askingStepKey{}).(*stepOutage)
	if !ok || o.a.id != q.AgentID || o.step.TaskID != q.TaskID {
		return func() {}
	}
	o.a.showWaiting(o.step, WaitingOnOperator, s.text("operator_waiting", map[string]any{"TaskID": q.TaskID, "MessageID": messageID}))
	return func() { o.a.waitingOver(o.step, WaitingOnOperator) }
}

// confirmWaitID is the waiting ID of an AskOperator question: derived
// from its message ID, so a restart can tell these questions apart (only
// this process waited for their answers).
func confirmWaitID(messageID string) string { return derivedID(messageID, "confirm") }

// askAnswers reports, of the image's messages, those that answer an
// AskOperator question: their return_waiting_id is the question's
// confirmWaitID (an answer stored by an older mas-mcp may lack reply_to).
// The asker never takes them as messages (answered), so a restart must
// not deliver them to it as new ones.
func askAnswers(img *Image) func(Message) bool {
	waits := map[string]bool{}
	for _, m := range img.Messages {
		if len(m.Waiting) == 0 {
			continue // most: no ID to derive
		}
		if w := confirmWaitID(m.MessageID); slices.Contains(m.Waiting, w) {
			waits[w] = true
		}
	}
	return func(m Message) bool { return m.ReturnWaitingID != "" && waits[m.ReturnWaitingID] }
}

// answered hands a reply to the AskOperator call waiting on its waiting ID,
// and reports whether there was one.
func (s *System) answered(m Message) bool {
	if m.ReturnWaitingID == "" {
		return false
	}
	s.confirmMu.Lock()
	ch, ok := s.confirms[m.ReturnWaitingID]
	if ok {
		delete(s.confirms, m.ReturnWaitingID)
	}
	s.confirmMu.Unlock()
	if ok {
		ch <- m.clone()
	}
	return ok
}

// AnswerApproval answers an approval question in the operator's inbox
// (by its message_id) with a structured decision. The reply's text says
// the same ("yes" or "no", and the note) for people and for readers of
// free text.
func (s *System) AnswerApproval(operatorID, messageID string, d Decision) error {
	if strings.TrimSpace(messageID) == "" {
		return errf(ErrInvalid, "message_id: is empty; give the approval question's message_id (get_inbox)")
	}
	in, err := s.Inbox(operatorID)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(in, func(e InboxEntry) bool { return e.MessageID == messageID })
	if i < 0 {
		return errf(ErrNotFound, "message_id %q: no such message in the operator's inbox", messageID)
	}
	q := in[i]
	if !q.AwaitingReply || q.ReturnWaitingID != confirmWaitID(q.MessageID) {
		return errf(ErrInvalid, "message_id %q: is not an approval question awaiting an answer", messageID)
	}
	text := "no"
	if d.Approve {
		text = "yes"
	}
	if note := strings.TrimSpace(d.Note); note != "" {
		text += ": " + note
	}
	_, err = s.HumanSend(operatorID, HumanMessage{
		TaskID: q.TaskID, Receiver: []string{q.SenderID}, Content: text,
		StageRelative: q.StageRelative, ReplyTo: messageID, Decision: &d,
	})
	return err
}
