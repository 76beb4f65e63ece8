package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
)

// refusingStore is a MemoryStore whose PutMessage fails for the messages
// refuse matches, as a durable store does when it cannot be reached.
type refusingStore struct {
	*MemoryStore
	mu     sync.Mutex
	refuse func(*Message) bool
}

var errStoreDown = errors.New("nats: timeout")

func (s *refusingStore) PutMessage(ctx context.Context, m *Message) error {
	s.mu.Lock()
	refuse := s.refuse != nil && s.refuse(m)
	s.mu.Unlock()
	if refuse {
		return errStoreDown
	}
	return s.MemoryStore.PutMessage(ctx, m)
}

func (s *refusingStore) refuseFrom(sender string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse = func(m *Message) bool { return m.SenderID == sender }
}

// inPool reports whether a task's conversation holds a message with text.
func inPool(b *testbed, taskID, text string) bool {
	for _, m := range b.task(taskID).SharedConversationPool {
		if m.Message == text {
			return true
		}
	}
	return false
}

// TestRefusedMessagesAreNotSeen: a message an agent or the operator writes
// that the store cannot take is not delivered (nothing is seen that a
// restart would lose): the agent's step fails saying so, with no wait left
// engaged; the operator's call fails and changes nothing.
func TestRefusedMessagesAreNotSeen(t *testing.T) {
	st := &refusingStore{MemoryStore: NewMemoryStore()}
	b := newTestbed(t, func(c *Config) { c.Store = st })
	op, base, baseStage := b.op(), b.sys.BaseTaskID(), b.sys.BaseStageID()
	alice, bob := b.newAgent("alice"), b.newAgent("bob")
	b.join(base, alice, bob)

	t.Run("agent send_message", func(t *testing.T) {
		st.refuseFrom(alice)
		sayTo(b, "ask bob", bob, "are you there?", true, true)
		id := runSteps(b, alice, "ask bob")[0]
		step, _ := b.step(alice, id)
		if err, _ := step.ExecuteResult["error"].(string); step.ExecutionState != StateFailed || !strings.Contains(err, "could not be stored") {
			t.Errorf("send step %s, result %v; want failed saying the message could not be stored", step.ExecutionState, step.ExecuteResult)
		}
		if a := b.agent(alice); len(a.StepLock) != 0 || len(a.Waits) != 0 {
			t.Errorf("alice still waits: lock %v, waits %+v", a.StepLock, a.Waits)
		}
		if inPool(b, base, "are you there?") {
			t.Error("the refused message is in the task's conversation")
		}
		for _, s := range b.agent(bob).AgentStep.StepList {
			if strings.Contains(s.TextContent, "are you there?") {
				t.Errorf("bob got a step for the refused message: %+v", s)
			}
		}
	})

	t.Run("operator send_message", func(t *testing.T) {
		st.refuseFrom("")
		sayTo(b, "ask op", op, "may I?", true, true)
		runSteps(b, alice, "ask op")
		st.refuseFrom(op)
		before := b.agent(op)
		_, err := b.sys.HumanSend(op, HumanMessage{TaskID: base, Receiver: []string{alice}, Content: "yes", StageRelative: baseStage})
		if err == nil || !strings.Contains(err.Error(), "could not be stored") {
			t.Fatalf("HumanSend: %v, want an error saying the message could not be stored", err)
		}
		after := b.agent(op)
		if len(after.AgentStep.StepList) != len(before.AgentStep.StepList) {
			t.Errorf("the operator's steps went from %d to %d: a refused message was recorded as sent",
				len(before.AgentStep.StepList), len(after.AgentStep.StepList))
		}
		for _, p := range after.ConversationPool.ConversationPrivates[alice] {
			if p.SenderID == alice && p.Replied {
				t.Errorf("alice's question is marked replied by a message that was not sent: %+v", p)
			}
		}
		if len(b.agent(alice).StepLock) != 1 {
			t.Errorf("alice's wait was released by a message that was not sent")
		}
		// Once the store takes it again, the same reply goes through.
		st.refuseFrom("")
		if _, err := b.sys.HumanSend(op, HumanMessage{TaskID: base, Receiver: []string{alice}, Content: "yes", StageRelative: baseStage}); err != nil {
			t.Fatal(err)
		}
		b.waitFor("alice's wait to end", func() bool { return len(b.agent(alice).StepLock) == 0 })
	})

	t.Run("operator message to two, one refused", func(t *testing.T) {
		st.mu.Lock()
		st.refuse = func(m *Message) bool { return m.SenderID == op && m.Receiver[0] == bob }
		st.mu.Unlock()
		_, err := b.sys.HumanSend(op, HumanMessage{TaskID: base, Receiver: []string{alice, bob}, Content: "to both"})
		if err == nil || !strings.Contains(err.Error(), "receiver "+bob) || !strings.Contains(err.Error(), "sent to "+alice) {
			t.Errorf("HumanSend: %v; want an error naming bob and saying alice has the message", err)
		}
		st.refuseFrom("")
	})

	t.Run("ask_info answer", func(t *testing.T) {
		st.refuseFrom(SystemSender)
		b.sc.onText("ask for all agents", func(context.Context, *ExecInput) *Output {
			return &Output{AskInfo: &AskInfoQuery{Type: QueryAllAgents}}
		})
		ids := b.inject(bob, base, baseStage, false, spec(SkillAskInfo, "ask for all agents"))
		b.waitFor("the ask_info step", func() bool { return b.stepDone(bob, ids[0]) })
		step, _ := b.step(bob, ids[0])
		if err, _ := step.ExecuteResult["error"].(string); step.ExecutionState != StateFailed || !strings.Contains(err, "could not be stored") {
			t.Errorf("ask_info step %s, result %v; want failed saying the answer could not be stored", step.ExecutionState, step.ExecuteResult)
		}
		if a := b.agent(bob); len(a.StepLock) != 0 {
			t.Errorf("bob still waits for an answer that was never sent: %v", a.StepLock)
		}
	})
}
