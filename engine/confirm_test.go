package engine

import (
	"context"
	"errors"
	"testing"
	"time"
)

// askInBackground runs AskOperator and returns a channel with its outcome.
func askInBackground(b *testbed, ctx context.Context, q OperatorQuestion) <-chan [2]any {
	done := make(chan [2]any, 1)
	go func() {
		reply, err := b.sys.AskOperator(ctx, q)
		done <- [2]any{reply, err}
	}()
	return done
}

// inboxEntry finds the operator's inbox entry with the given content.
func inboxEntry(b *testbed, op, content string) (InboxEntry, bool) {
	b.t.Helper()
	in, err := b.sys.Inbox(op)
	if err != nil {
		b.t.Fatal(err)
	}
	for _, e := range in {
		if e.Content == content {
			return e, true
		}
	}
	return InboxEntry{}, false
}

func TestAskOperatorAnswered(t *testing.T) {
	b := newTestbed(t, nil)
	op, base := b.op(), b.sys.BaseTaskID()
	alice := b.newAgent("alice")
	b.join(base, alice)
	done := askInBackground(b, t.Context(), OperatorQuestion{TaskID: base, AgentID: alice, Question: "delete /tmp/x?", Timeout: time.Minute})
	b.waitFor("the question in the inbox", func() bool { _, ok := inboxEntry(b, op, "delete /tmp/x?"); return ok })
	if e, _ := inboxEntry(b, op, "delete /tmp/x?"); !e.AwaitingReply || !e.Waiting || e.SenderID != alice {
		t.Errorf("inbox entry %+v, want a waiting question from alice awaiting a reply", e)
	}
	if _, err := b.sys.HumanSend(op, HumanMessage{TaskID: base, Receiver: []string{alice}, Content: "yes"}); err != nil {
		t.Fatal(err)
	}
	got := <-done
	if got[0] != "yes" || got[1] != nil {
		t.Fatalf("AskOperator = %q, %v; want \"yes\", nil", got[0], got[1])
	}
	if e, _ := inboxEntry(b, op, "delete /tmp/x?"); e.AwaitingReply || !e.Replied {
		t.Errorf("inbox entry %+v, want replied", e)
	}
}

// TestAskOperatorExpires: once nobody waits for the answer (timeout, or the
// asking step ends), the question no longer awaits a reply, and a later
// message of the operator is not taken for its answer.
func TestAskOperatorExpires(t *testing.T) {
	for _, how := range []string{"timeout", "cancel"} {
		t.Run(how, func(t *testing.T) {
			b := newTestbed(t, nil)
			op, base := b.op(), b.sys.BaseTaskID()
			alice := b.newAgent("alice")
			b.join(base, alice)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			timeout := 50 * time.Millisecond
			if how == "cancel" {
				timeout = time.Minute
			}
			done := askInBackground(b, ctx, OperatorQuestion{TaskID: base, AgentID: alice, Question: "rm -rf?", Timeout: timeout})
			b.waitFor("the question in the inbox", func() bool { _, ok := inboxEntry(b, op, "rm -rf?"); return ok })
			if how == "cancel" {
				cancel()
			}
			got := <-done
			want := ErrNoAnswer
			if how == "cancel" {
				want = context.Canceled
			}
			if err, _ := got[1].(error); !errors.Is(err, want) {
				t.Fatalf("AskOperator error = %v, want %v", got[1], want)
			}
			e, _ := inboxEntry(b, op, "rm -rf?")
			if e.AwaitingReply || !e.Expired || e.Replied {
				t.Errorf("inbox entry %+v, want expired, not awaiting a reply", e)
			}
			sent, err := b.sys.HumanSend(op, HumanMessage{TaskID: base, Receiver: []string{alice}, Content: "yes, go"})
			if err != nil {
				t.Fatal(err)
			}
			if sent[0].ReturnWaitingID != "" {
				t.Errorf("a later message carries return_waiting_id %q for the expired question", sent[0].ReturnWaitingID)
			}
		})
	}
}

func TestAskOperatorErrors(t *testing.T) {
	b := newTestbed(t, nil)
	_, err := b.sys.AskOperator(t.Context(), OperatorQuestion{TaskID: "nope", AgentID: "x", Question: "?"})
	isErr(t, err, ErrNotFound, "task_id")
}

// TestRestoreExpiresOpenQuestions: after a crash nobody waits for the
// answer to an approval question that was open (the tool step that asked
// fails or asks anew), so the restored inbox no longer shows it awaiting a
// reply; a waiting question from an agent keeps awaiting one.
func TestRestoreExpiresOpenQuestions(t *testing.T) {
	st := NewMemoryStore()
	var cfg Config
	b := newTestbed(t, func(c *Config) { c.Store = st; cfg = *c })
	op, base := b.op(), b.sys.BaseTaskID()
	alice := b.newAgent("alice")
	b.join(base, alice)
	sayTo(b, "ask op", op, "which format?", true, true)
	runSteps(b, alice, "ask op")
	askInBackground(b, t.Context(), OperatorQuestion{TaskID: base, AgentID: alice, Question: "delete /tmp/x?", Timeout: time.Minute})
	b.waitFor("the question in the inbox", func() bool { _, ok := inboxEntry(b, op, "delete /tmp/x?"); return ok })
	img := b.crashImage(st) // the question still open

	b2 := restartFrom(t, cfg, img, b.sc)
	if e, ok := inboxEntry(b2, op, "delete /tmp/x?"); !ok || e.AwaitingReply || !e.Expired {
		t.Errorf("restored approval question %+v (found %v), want expired, not awaiting a reply", e, ok)
	}
	if e, ok := inboxEntry(b2, op, "which format?"); !ok || !e.AwaitingReply || e.Expired {
		t.Errorf("restored agent question %+v (found %v), want still awaiting a reply", e, ok)
	}
	stored, _ := b2.sys.cfg.Store.(*MemoryStore).Agent(op)
	for _, p := range stored.ConversationPool.ConversationPrivates[alice] {
		if p.Content == "delete /tmp/x?" && !p.Expired {
			t.Error("the expiry is not stored")
		}
	}
}

// TestAnswerApproval: the operator answers an approval question with a
// structured decision; the asking call gets it (and the text says the
// same); a message that is not such a question is refused.
// askApproval has a new agent alice ask the operator "write /tmp/x?" in
// the base task; it returns the question as the inbox shows it and where
// alice's answer arrives.
func askApproval(t *testing.T, b *testbed) (InboxEntry, chan Answer) {
	t.Helper()
	op, base := b.op(), b.sys.BaseTaskID()
	alice := b.newAgent("alice")
	b.join(base, alice)
	done := make(chan Answer, 1)
	go func() {
		a, err := b.sys.Ask(t.Context(), OperatorQuestion{TaskID: base, AgentID: alice, Question: "write /tmp/x?", Timeout: time.Minute})
		if err != nil {
			t.Error(err)
		}
		done <- a
	}()
	b.waitFor("the question in the inbox", func() bool { _, ok := inboxEntry(b, op, "write /tmp/x?"); return ok })
	q, _ := inboxEntry(b, op, "write /tmp/x?")
	return q, done
}

func TestAnswerApproval(t *testing.T) {
	for _, approve := range []bool{true, false} {
		t.Run(map[bool]string{true: "approve", false: "deny"}[approve], func(t *testing.T) {
			b := newTestbed(t, nil)
			op := b.op()
			q, done := askApproval(t, b)
			d := Decision{Approve: approve, Note: "checked", Arguments: map[string]any{"path": "/tmp/y"}}
			if err := b.sys.AnswerApproval(op, q.MessageID, d); err != nil {
				t.Fatal(err)
			}
			got := <-done
			if got.Decision == nil || got.Decision.Approve != approve || got.Decision.Note != "checked" || got.Decision.Arguments["path"] != "/tmp/y" {
				t.Fatalf("answer %+v, want the decision", got)
			}
			if want := map[bool]string{true: "yes: checked", false: "no: checked"}[approve]; got.Text != want {
				t.Errorf("answer text %q, want %q", got.Text, want)
			}
			if e, _ := inboxEntry(b, op, "write /tmp/x?"); e.AwaitingReply || !e.Replied {
				t.Errorf("inbox entry %+v, want replied", e)
			}
			err := b.sys.AnswerApproval(op, q.MessageID, d)
			isErr(t, err, ErrInvalid, "not an approval question awaiting an answer")
		})
	}
	t.Run("not a question", func(t *testing.T) {
		b := newTestbed(t, nil)
		isErr(t, b.sys.AnswerApproval(b.op(), "nope", Decision{}), ErrNotFound, "nope")
		isErr(t, b.sys.AnswerApproval(b.op(), "", Decision{}), ErrInvalid, "message_id")
	})
}

// messageStall is a MemoryStore whose PutMessage of the operator's
// messages stops until released.
type messageStall struct {
	*MemoryStore
	from    string
	entered chan struct{}
	release chan struct{}
}

func (s *messageStall) PutMessage(ctx context.Context, m *Message) error {
	if m.SenderID == s.from {
		s.entered <- struct{}{}
		<-s.release
	}
	return s.MemoryStore.PutMessage(ctx, m)
}

// TestAnswerIsStoredWithoutTheOperatorsLock: the operator's answer is
// stored without the operator agent's lock held, and the question it
// answers is held meanwhile: a second answer from another channel is
// refused, the first one wins.
func TestAnswerIsStoredWithoutTheOperatorsLock(t *testing.T) {
	store := &messageStall{MemoryStore: NewMemoryStore(), entered: make(chan struct{}, 4), release: make(chan struct{})}
	b := newTestbed(t, func(c *Config) { c.Store = store })
	op := b.op()
	store.from = op
	q, done := askApproval(t, b)

	first := make(chan error, 1)
	go func() { first <- b.sys.AnswerApproval(op, q.MessageID, Decision{Approve: true, Note: "first"}) }()
	waitChan(t, store.entered, "the answer's store write")
	h, _ := b.sys.agent(op)
	if !h.mu.TryLock() {
		t.Fatal("the operator's lock is held while its answer is being stored")
	}
	h.mu.Unlock()
	err := b.sys.AnswerApproval(op, q.MessageID, Decision{Approve: false, Note: "second"})
	isErr(t, err, ErrInvalid, "not an approval question awaiting an answer")

	close(store.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if got := <-done; got.Decision == nil || !got.Decision.Approve || got.Decision.Note != "first" {
		t.Fatalf("answer %+v, want the first one", got)
	}
	if e, _ := inboxEntry(b, op, "write /tmp/x?"); !e.Replied {
		t.Errorf("inbox entry %+v, want replied", e)
	}
}

// TestRestoreDropsAStepLockWithoutItsWait: a stored agent whose step lock
// holds an ID its waits do not detail (a damaged document) would wait for
// ever, with no timer and nobody told; the restore drops the entry and
// the agent runs its next step.
func TestRestoreDropsAStepLockWithoutItsWait(t *testing.T) {
	st := NewMemoryStore()
	var cfg Config
	b := newTestbed(t, func(c *Config) { c.Store = st; cfg = *c })
	base := b.sys.BaseTaskID()
	alice := b.newAgent("alice")
	b.join(base, alice)
	b.settle()
	img := b.crashImage(st)
	for i := range img.Agents {
		if img.Agents[i].AgentID == alice {
			img.Agents[i].StepLock = append(img.Agents[i].StepLock, "orphan-wait")
		}
	}

	b2 := restartFrom(t, cfg, img, b.sc)
	id := b2.inject(alice, base, b2.sys.BaseStageID(), false, spec(SkillThink, "after the restart"))[0]
	b2.waitFor("alice's step after the restart", func() bool { return b2.stepDone(alice, id) })
	if got := b2.agent(alice).StepLock; len(got) != 0 {
		t.Errorf("step lock after the restart: %v, want empty", got)
	}
	if stored, _ := b2.sys.cfg.Store.(*MemoryStore).Agent(alice); len(stored.StepLock) != 0 {
		t.Errorf("stored step lock: %v, want the repair stored", stored.StepLock)
	}
}
