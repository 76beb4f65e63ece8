package engine

// What becomes of the operator's questions when mas-mcp dies while they
// are open (kill -9 at any point): an answer stored before the crash
// settles its question; an approval the operator had not given yet is not
// turned into a call that may have happened.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestAnswerStoredBeforeACrashMarksTheQuestionReplied: the operator
// answers alice's question; the answer is stored (humanSend persists the
// message first) and the process dies before the operator's own document,
// which marks the question replied, is written. After the restart alice
// takes the redelivered answer, and the operator's inbox no longer shows
// her question awaiting a reply: a second answer would reach her as a new
// message. A question that did not wait is known answered by the answer's
// reply_to, one that waited by its return_waiting_id too (all an answer
// stored by an older mas-mcp names).
func TestAnswerStoredBeforeACrashMarksTheQuestionReplied(t *testing.T) {
	for _, tc := range []struct {
		name            string
		waiting, legacy bool
	}{
		{name: "waiting", waiting: true},
		{name: "not waiting"},
		{name: "waiting, answer stored without reply_to", waiting: true, legacy: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, store, cfg := frozenBed(t, nil)
			op := b.op()
			alice := b.newAgent("alice")
			id := b.newTask("crash", alice)
			sayTo(b, "ask op", op, "which format?", true, tc.waiting)
			b.inject(alice, id, NoRelative, false, spec(SkillSendMessage, "ask op"))
			b.waitFor("alice's question", func() bool { return len(awaitingIn(b, id)) == 1 })
			q := awaitingIn(b, id)[0]
			store.freezeAt(func(a *AgentState) bool {
				if a.AgentID != op || a.ConversationPool == nil {
					return false
				}
				for _, p := range a.ConversationPool.ConversationPrivates[alice] {
					if p.MessageID == q.MessageID && p.Replied {
						return true
					}
				}
				return false
			}, nil)
			if _, err := b.sys.HumanSend(op, HumanMessage{TaskID: id, Receiver: []string{alice}, Content: "ANSWER: Markdown", ReplyTo: q.MessageID}); err != nil {
				t.Fatal(err)
			}
			img := crashed(t, b, store)
			stored := false
			for i, m := range img.Messages {
				if m.Message == "ANSWER: Markdown" && m.ReturnWaitingID == q.ReturnWaitingID {
					stored = true
					if tc.legacy {
						img.Messages[i].ReplyTo = ""
					}
				}
			}
			if !stored {
				t.Fatalf("setup: the answer is not in the store image")
			}
			b2 := restartFrom(t, cfg, img, b.sc)
			b2.waitFor("alice to take the answer after the restart", func() bool {
				for _, c := range b2.sc.callsOf("alice", SkillProcessMessage) {
					if strings.Contains(c.Text, "ANSWER: Markdown") {
						return true
					}
				}
				return false
			})
			if open := awaitingIn(b2, id); len(open) > 0 {
				t.Errorf("after the restart alice took the operator's stored answer, yet the operator's inbox shows %d question(s) of the task awaiting a reply: %q (message %s)",
					len(open), open[0].Content, open[0].MessageID)
			}
		})
	}
}

// TestPendingApprovalAtARestartIsNotAMaybeCall: alice's tool step waits
// for the operator's approval (the risk gate asks before it calls,
// System.Ask with BeforeCall) when mas-mcp dies. The call was never made:
// after the restart the step runs again and asks again, rather than fail
// as a call that "may or may not have taken effect", and the operator
// finds the question in its inbox. A question asked during the call (a
// server's elicitation) or an approval already given (the call under
// way) leaves the call possibly made: that step still fails so.
func TestPendingApprovalAtARestartIsNotAMaybeCall(t *testing.T) {
	for _, tc := range []struct {
		name string
		// beforeCall: the call is made only after the answer; approve:
		// the operator approves before the crash, and the call is under
		// way when it comes.
		beforeCall, approve bool
	}{
		{name: "approval pending", beforeCall: true},
		{name: "question asked during the call"},
		{name: "approved, call under way", beforeCall: true, approve: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := NewMemoryStore()
			asked := make(chan string, 4)
			calling := make(chan struct{}, 4)
			var cfg Config
			b := newTestbed(t, func(c *Config) {
				c.Store = store
				c.Tools = toolCatalog{"deploy": "deploys things"}
				c.Tool = ExecutorFunc(func(ctx context.Context, in *ExecInput) *Output {
					asked <- in.Step.StepID
					// The risk gate: ask first, call only once approved.
					a, err := in.Operator.Ask(ctx, OperatorQuestion{TaskID: in.Step.TaskID, StageID: in.Step.StageID, AgentID: in.Agent.AgentID,
						Question: "Approval needed: alice wants to call deploy.run", Timeout: time.Hour,
						StepID: in.Step.StepID, BeforeCall: tc.beforeCall})
					if err != nil {
						return &Output{Err: fmt.Errorf("not called: %w", err)}
					}
					// The call, under way until the process dies.
					calling <- struct{}{}
					<-ctx.Done()
					return &Output{Result: map[string]any{"approved": a.Text}}
				})
				cfg = *c
			})
			alice, err := b.sys.CreateAgent(AgentConfig{Template: "researcher", Name: "alice", Tools: []string{"deploy"}})
			if err != nil {
				t.Fatal(err)
			}
			id := b.newTask("ship", alice)
			ids := b.inject(alice, id, NoRelative, false, StepSpec{StepIntention: "deploy", Type: StepTool, Executor: "deploy", TextContent: "run"})
			<-asked
			b.waitFor("the approval question in the operator's inbox", func() bool { return len(awaitingIn(b, id)) == 1 })
			first := awaitingIn(b, id)[0]
			if tc.approve {
				if err := b.sys.AnswerApproval(b.op(), first.MessageID, Decision{Approve: true}); err != nil {
					t.Fatal(err)
				}
				<-calling
			}

			// mas-mcp dies while the operator is away (or the call runs).
			img := b.crashImage(store)
			nb := restartFrom(t, cfg, img, b.sc)
			nb.waitFor("alice's tool step to end or ask again", func() bool {
				st, ok := nb.step(alice, ids[0])
				return !ok || (st.ExecutionState != StateRunning && st.ExecutionState != StateInit) ||
					slices.ContainsFunc(awaitingIn(nb, id), func(e InboxEntry) bool { return e.MessageID != first.MessageID })
			})
			st, _ := nb.step(alice, ids[0])
			errText, _ := st.ExecuteResult["error"].(string)
			open := awaitingIn(nb, id)
			if !tc.beforeCall || tc.approve {
				if st.ExecutionState != StateFailed || !strings.Contains(errText, "may or may not have taken effect") || len(open) > 0 {
					t.Errorf("after a restart alice's step, whose call may have been made, is %s with %q, and %d question(s) of the task await the operator; "+
						"want it failed as a call that may have acted, and no question", st.ExecutionState, errText, len(open))
				}
				return
			}
			// The step runs again and asks again.
			if len(open) != 1 || st.ExecutionState != StateRunning {
				t.Fatalf("after a restart alice's step, which never called the tool, is %s with %q, and %d question(s) of the task await the operator; "+
					"want the step running again, asking the operator again", st.ExecutionState, errText, len(open))
			}
			if <-asked != ids[0] {
				t.Errorf("the executor asked again for another step than alice's")
			}
			if open[0].MessageID == first.MessageID || !open[0].Approval {
				t.Errorf("the question awaiting the operator is %s (approval %v); want a new approval question, the first (%s) expired",
					open[0].MessageID, open[0].Approval, first.MessageID)
			}
			if on := nb.agent(alice).CallWaitsOn; on != open[0].MessageID {
				t.Errorf("alice records that her step's call waits on %q; want the question asked again, %s", on, open[0].MessageID)
			}
		})
	}
}

// TestApprovalIsUsedOnlyOnceItsWaitIsCleared: the operator approves alice's
// call, but the store refuses the write that drops her step's record that
// its call waits (CallWaitsOn). The call is not made: a crash now would
// leave the record, and the restart would take the call as never made and
// make it again. The step fails saying so.
func TestApprovalIsUsedOnlyOnceItsWaitIsCleared(t *testing.T) {
	var refusing atomic.Bool
	var stepID atomic.Value
	stepID.Store("")
	store := &refuseAgentStore{MemoryStore: NewMemoryStore(), refuse: func(a *AgentState) bool {
		if !refusing.Load() {
			return false
		}
		for _, s := range a.AgentStep.StepList {
			if s.StepID == stepID.Load() && s.ExecutionState == StateRunning && a.CallWaitsOn == "" {
				return true
			}
		}
		return false
	}}
	asked := make(chan struct{}, 1)
	var called atomic.Bool
	b := newTestbed(t, func(c *Config) {
		c.Store = store
		c.Tools = toolCatalog{"deploy": "deploys things"}
		c.Tool = deployAfterApproval(asked, &called)
	})
	alice, err := b.sys.CreateAgent(AgentConfig{Template: "researcher", Name: "alice", Tools: []string{"deploy"}})
	if err != nil {
		t.Fatal(err)
	}
	id := b.newTask("ship", alice)
	ids := b.inject(alice, id, NoRelative, false, StepSpec{StepIntention: "deploy", Type: StepTool, Executor: "deploy", TextContent: "run"})
	stepID.Store(ids[0])
	<-asked
	b.waitFor("the approval question in the operator's inbox", func() bool { return len(awaitingIn(b, id)) == 1 })
	if on := b.agent(alice).CallWaitsOn; on != awaitingIn(b, id)[0].MessageID {
		t.Errorf("while the approval is asked, alice records that her step's call waits on %q; want the question, %s", on, awaitingIn(b, id)[0].MessageID)
	}
	refusing.Store(true)
	if err := b.sys.AnswerApproval(b.op(), awaitingIn(b, id)[0].MessageID, Decision{Approve: true}); err != nil {
		t.Fatal(err)
	}
	b.waitFor("alice's tool step to end", func() bool { return b.stepDone(alice, ids[0]) })
	st, _ := b.step(alice, ids[0])
	errText, _ := st.ExecuteResult["error"].(string)
	if called.Load() || st.ExecutionState != StateFailed || !strings.Contains(errText, "could not be cleared") {
		t.Errorf("approved with the step's wait not cleared in the store: called %v, step %s with %q; want no call, the step failed saying why",
			called.Load(), st.ExecutionState, errText)
	}
}

// TestAnsweredApprovalIsNotRedeliveredAfterARestart: the operator answers
// an approval question (System.Ask); the answer goes to the waiting call,
// not to the asking agent's steps. A restart after that does not hand it
// to the asker as a new message: no process_message step (an LLM call) of
// an answer its call took already, after this restart or the next.
func TestAnsweredApprovalIsNotRedeliveredAfterARestart(t *testing.T) {
	st := NewMemoryStore()
	var cfg Config
	b := newTestbed(t, func(c *Config) { c.Store = st; cfg = *c })
	op := b.op()
	q, done := askApproval(t, b)
	alice := q.SenderID
	if err := b.sys.AnswerApproval(op, q.MessageID, Decision{Approve: true, Note: "go ahead"}); err != nil {
		t.Fatal(err)
	}
	if got := <-done; got.Decision == nil || !got.Decision.Approve {
		t.Fatalf("the asking call got %+v, want the approval", got)
	}
	b.settle()
	answerSteps := func(b *testbed) []StepState {
		return b.steps(alice, func(s StepState) bool {
			return s.Executor == SkillProcessMessage && strings.Contains(fmt.Sprint(s.TextContent, s.StepIntention), "go ahead")
		})
	}
	if n := len(answerSteps(b)); n != 0 {
		t.Fatalf("setup: alice has %d process_message steps of the answer before the restart, want none", n)
	}
	img := b.crashImage(st)
	for restart := 1; restart <= 2; restart++ {
		st = NewMemoryStore()
		cfg.Store = st
		b = startFrom(t, cfg, img, b.sc)
		b.settle()
		for _, s := range answerSteps(b) {
			t.Errorf("restart %d: alice has a process_message step (%s) of the operator's answer to her approval question, which her call took before the crash: %q",
				restart, s.ExecutionState, s.TextContent)
		}
		img = b.crashImage(st)
	}
}

// TestCallWaitsOnIsTheAskedOperatorsToRead: while alice's tool call waits
// for the operator's approval, the agent records the question it waits on
// (CallWaitsOn): the asked operator reads it, operator bea, who shares
// the task but was not asked, does not (the question is private to the
// asked operator, as what alice shows she waits for).
func TestCallWaitsOnIsTheAskedOperatorsToRead(t *testing.T) {
	b, alice, asked := deployBed(t)
	id := b.newTask("ship", alice)
	bea := b.operator("bea")
	if _, err := b.sys.ShareTask(b.op(), id, bea); err != nil {
		t.Fatal(err)
	}
	b.inject(alice, id, NoRelative, false, StepSpec{StepIntention: "deploy", Type: StepTool, Executor: "deploy", TextContent: "run"})
	<-asked
	b.waitFor("the approval question in the operator's inbox", func() bool { return len(awaitingIn(b, id)) == 1 })
	q := awaitingIn(b, id)[0]
	b.waitFor("alice to record the question her call waits on", func() bool { return b.agent(alice).CallWaitsOn == q.MessageID })
	if mine, _ := b.sys.AgentFor(b.op(), alice); mine.CallWaitsOn != q.MessageID {
		t.Errorf("the asked operator reads alice's call waiting on %q, want %s", mine.CallWaitsOn, q.MessageID)
	}
	if other, _ := b.sys.AgentFor(bea, alice); other.CallWaitsOn != "" {
		t.Errorf("operator bea, who shares the task but was not asked, reads alice's call waiting on question %s", other.CallWaitsOn)
	}
}

// deployAfterApproval is a tool executor that, for each call, says so on
// asked, asks the operator's approval before the call (BeforeCall) and,
// approved, makes it (called).
func deployAfterApproval(asked chan<- struct{}, called *atomic.Bool) Executor {
	return ExecutorFunc(func(ctx context.Context, in *ExecInput) *Output {
		asked <- struct{}{}
		if _, err := in.Operator.Ask(ctx, OperatorQuestion{TaskID: in.Step.TaskID, StageID: in.Step.StageID, AgentID: in.Agent.AgentID,
			Question: "Approval needed: alice wants to call deploy.run", Timeout: time.Hour, StepID: in.Step.StepID, BeforeCall: true}); err != nil {
			return &Output{Err: fmt.Errorf("not called: %w", err)}
		}
		called.Store(true)
		return &Output{Result: map[string]any{"deployed": true}}
	})
}

// TestCallWaitsOnGoesWithItsStep: alice's tool call waits for the
// operator's approval (the agent records the question: CallWaitsOn) and
// the operator cancels the task. The step is gone, and so must the record
// be: left behind, a crash during a later tool call of hers would read it
// as that call's and run the call again, though it may have acted.
func TestCallWaitsOnGoesWithItsStep(t *testing.T) {
	b, alice, asked := deployBed(t)
	id := b.newTask("ship", alice)
	b.inject(alice, id, NoRelative, false, StepSpec{StepIntention: "deploy", Type: StepTool, Executor: "deploy", TextContent: "run"})
	<-asked
	b.waitFor("alice to record the question her call waits on", func() bool { return b.agent(alice).CallWaitsOn != "" })
	if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionCancelTask, TaskID: id}); err != nil {
		t.Fatal(err)
	}
	b.settle()
	if on := b.agent(alice).CallWaitsOn; on != "" {
		t.Errorf("after the task was cancelled, alice still records a call waiting on question %s: a later tool step of hers, interrupted by a crash, would run again", on)
	}
}

// deployBed is a testbed with alice, who may call the tool "deploy", whose
// calls ask the operator's approval first (deployAfterApproval; asked
// says when).
func deployBed(t *testing.T) (b *testbed, alice string, asked chan struct{}) {
	asked = make(chan struct{}, 1)
	b = newTestbed(t, func(c *Config) {
		c.Tools = toolCatalog{"deploy": "deploys things"}
		c.Tool = deployAfterApproval(asked, new(atomic.Bool))
	})
	alice, err := b.sys.CreateAgent(AgentConfig{Template: "researcher", Name: "alice", Tools: []string{"deploy"}})
	if err != nil {
		t.Fatal(err)
	}
	return b, alice, asked
}
