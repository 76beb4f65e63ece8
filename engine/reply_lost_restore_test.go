package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestRestoreReleasesAWaitWhoseReplyFailed: the receiver's reply step
// failed and its end was stored, but a crash came before the waiter's
// release was: the restart sees the failed reply and releases the wait at
// once, as the live path does, rather than leaving the waiter to sit out
// its wait timeout (10 minutes here).
func TestRestoreReleasesAWaitWhoseReplyFailed(t *testing.T) {
	b, store, restart := newFreezeBed(t)
	asker, peer := b.newAgent("asker"), b.newAgent("peer")
	// The crash comes right before the asker's release is stored. The
	// peer's reply fails once the asker's asking step is stored finished
	// (a step run again after the restart would wait anew).
	asked := make(chan struct{})
	var once sync.Once
	store.freezeAt(func(a *AgentState) bool {
		if a.AgentID != asker {
			return false
		}
		for _, s := range a.AgentStep.StepList {
			if strings.Contains(s.TextContent, "can no longer come") {
				return true
			}
		}
		for _, s := range a.AgentStep.StepList {
			if s.TextContent == "ask" && s.ExecutionState == StateFinished {
				once.Do(func() { close(asked) })
			}
		}
		return false
	}, nil)
	b.sc.onText("ask", func(_ context.Context, in *ExecInput) *Output { return askPeer(in, peer) })
	b.sc.onAgent("peer", SkillSendMessage, func(context.Context, *ExecInput) *Output {
		<-asked
		return &Output{Err: errors.New("the LLM endpoint refused the API key (HTTP 401)")}
	})
	task := b.newTask("crash", asker, peer)
	b.inject(asker, task, NoRelative, false, spec(SkillSendMessage, "ask"))
	b2, img := restart()

	// The image is the one the crash leaves: the reply failed, the wait held.
	var failed, waiting, asking bool
	for _, a := range img.Agents {
		for _, s := range a.AgentStep.StepList {
			if a.AgentID == peer && s.Executor == SkillSendMessage && s.ReturnWaitingID != "" && s.ExecutionState == StateFailed {
				failed = true
			}
			if a.AgentID == asker && s.TextContent == "ask" && s.ExecutionState != StateFinished {
				asking = true
			}
		}
		if a.AgentID == asker && len(a.StepLock) > 0 {
			waiting = true
		}
	}
	if !failed || !waiting || asking {
		t.Fatalf("stored: the peer's reply failed %v, the asker waits %v, its asking step not finished %v; want the reply failed, the asker waiting after its step (the crash between the two writes)", failed, waiting, asking)
	}

	if lock := b2.agent(asker).StepLock; len(lock) != 0 {
		t.Errorf("after the restart the asker still waits (%v) for a reply whose step failed: it sits out its wait timeout\n%s", lock, b2.dump())
	}
	told := func(s StepState) bool {
		return s.Executor == SkillProcessMessage && strings.Contains(s.TextContent, "can no longer come") && strings.Contains(s.TextContent, "HTTP 401")
	}
	b2.waitFor("the asker to read that no reply comes", func() bool {
		return len(b2.steps(asker, func(s StepState) bool { return told(s) && s.ExecutionState == StateFinished })) > 0
	})
	if n := len(b2.steps(asker, told)); n != 1 {
		t.Errorf("the asker was told %d times that no reply comes, want once\n%s", n, b2.dump())
	}
}

// TestRerunAskingStepDoesNotWaitForALostReply: the crash also lost the end
// of the asker's asking step (its wait and its message were stored, the
// peer's failed reply too). After the restart the step runs again and
// sends its message again (the same one, taken once): it must not engage
// its wait anew, for the reply can no longer come, but carry on at once,
// told once why, rather than sit out its wait timeout (10 minutes).
func TestRerunAskingStepDoesNotWaitForALostReply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, store, restart := newFreezeBed(t)
		asker, peer := b.newAgent("asker"), b.newAgent("peer")
		asked := func(a *AgentState) bool {
			return a.AgentID == asker && slices.ContainsFunc(a.AgentStep.StepList, func(s StepState) bool {
				return s.TextContent == "ask" && s.ExecutionState == StateFinished
			})
		}
		told := func(s StepState) bool {
			return s.Executor == SkillProcessMessage && strings.Contains(s.TextContent, "can no longer come") && strings.Contains(s.TextContent, "HTTP 401")
		}
		// The asker's step end waits until the peer's failed reply is
		// stored; the crash comes right before the asker's next write
		// (its step's end, or the release of its wait).
		failed := make(chan struct{})
		var once sync.Once
		store.hookPuts(func(a *AgentState) {
			if asked(a) {
				<-failed
			}
		}, func(a *AgentState) {
			if a.AgentID == peer && slices.ContainsFunc(a.AgentStep.StepList, func(s StepState) bool {
				return s.ReturnWaitingID != "" && s.ExecutionState == StateFailed
			}) {
				once.Do(func() { close(failed) })
			}
		})
		store.freezeAt(func(a *AgentState) bool {
			return asked(a) || (a.AgentID == asker && slices.ContainsFunc(a.AgentStep.StepList, told))
		}, nil)
		b.sc.onText("ask", func(_ context.Context, in *ExecInput) *Output { return askPeer(in, peer) })
		b.sc.onAgent("peer", SkillSendMessage, func(context.Context, *ExecInput) *Output {
			return &Output{Err: errors.New("the LLM endpoint refused the API key (HTTP 401)")}
		})
		task := b.newTask("crash", asker, peer)
		step := b.inject(asker, task, NoRelative, false, spec(SkillSendMessage, "ask"))[0]
		b2, img := restart()

		// The image is the one the crash leaves: the reply failed, the
		// asker waits, its asking step not ended.
		var replyFailed, waiting, running bool
		for _, a := range img.Agents {
			for _, s := range a.AgentStep.StepList {
				if a.AgentID == peer && s.ReturnWaitingID != "" && s.ExecutionState == StateFailed {
					replyFailed = true
				}
				if a.AgentID == asker && s.StepID == step && s.ExecutionState == StateRunning {
					running = true
				}
			}
			if a.AgentID == asker && len(a.StepLock) > 0 {
				waiting = true
			}
		}
		if !replyFailed || !waiting || !running {
			t.Fatalf("stored: the peer's reply failed %v, the asker waits %v, its asking step running %v; want all three", replyFailed, waiting, running)
		}

		// Well within the wait timeout, the asking step ran again and the
		// asker waits for nothing.
		b2.until("the asker's asking step to run again, waiting for nothing", time.Minute, func() bool {
			return b2.stepDone(asker, step) && len(b2.agent(asker).StepLock) == 0
		})
		b2.until("the asker to read that no reply comes", time.Minute, func() bool {
			return len(b2.steps(asker, func(s StepState) bool { return told(s) && s.ExecutionState == StateFinished })) > 0
		})
		if n := len(b2.steps(asker, told)); n != 1 {
			t.Errorf("the asker was told %d times that no reply comes, want once\n%s", n, b2.dump())
		}
	})
}

// TestRestoreTellsTheOperatorItsReplyIsLost: an operator waits for the
// manager's reply, and the manager's reply step fails. The operator holds
// no step lock: it is told by a notice in its inbox, sent after the
// failed step is stored. A crash before the notice was stored must not
// lose it, and one after must not have it sent twice: after the restart
// the operator holds it once.
func TestRestoreTellsTheOperatorItsReplyIsLost(t *testing.T) {
	notice := func(text string) bool { return strings.Contains(text, "[No reply coming]") }
	for _, tc := range []struct {
		name  string
		after bool // the crash comes after the operator's write, not before
		agent bool // the crash comes at the operator's write, not the notice's
	}{
		{name: "before the notice is stored"},
		{name: "before the operator takes it", agent: true},
		{name: "after the operator took it", agent: true, after: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, store, restart := newFreezeBed(t)
				op := b.op()
				if tc.agent {
					store.after = tc.after
					store.freezeAt(func(a *AgentState) bool {
						return a.AgentID == op && a.ConversationPool != nil &&
							slices.ContainsFunc(a.ConversationPool.ConversationPrivates[SystemSender], func(p PrivateMessage) bool { return notice(p.Content) })
					}, nil)
				} else {
					store.freezeAt(nil, func(m *Message) bool { return m.SenderID == SystemSender && notice(m.Message) })
				}
				b.sc.onAgent("manager", SkillSendMessage, func(context.Context, *ExecInput) *Output {
					return &Output{Err: errors.New("the LLM endpoint refused the API key (HTTP 401)")}
				})
				if _, err := b.sys.HumanSend(op, HumanMessage{TaskID: b.sys.BaseTaskID(), Receiver: []string{b.mgr()},
					Content: "How many tasks are running?", NeedReply: true, Waiting: true}); err != nil {
					t.Fatal(err)
				}
				b2, img := restart()

				var replyFailed bool
				for _, a := range img.Agents {
					for _, s := range a.AgentStep.StepList {
						if a.AgentID == b.mgr() && s.ReplyTo == op && s.ReturnWaitingID != "" && s.ExecutionState == StateFailed {
							replyFailed = true
						}
					}
				}
				stored := slices.ContainsFunc(img.Messages, func(m Message) bool { return notice(m.Message) })
				if !replyFailed || stored == !tc.agent {
					t.Fatalf("stored: the manager's reply failed %v, the notice %v; want the reply failed, the notice stored %v", replyFailed, stored, tc.agent)
				}

				told := func() int {
					in, err := b2.sys.Inbox(op)
					if err != nil {
						t.Fatal(err)
					}
					n := 0
					for _, e := range in {
						if e.SenderID == SystemSender && notice(e.Content) {
							if !strings.Contains(e.Content, "HTTP 401") {
								t.Errorf("the notice does not say why: %s", e.Content)
							}
							n++
						}
					}
					return n
				}
				b2.until("the operator to be told no reply comes", time.Minute, func() bool { return told() > 0 })
				b2.until("the MAS to settle", time.Minute, b2.settled)
				if n := told(); n != 1 {
					t.Errorf("the operator was told %d times that no reply comes, want once", n)
				}
				// A notice the store held is not sent again (the
				// operator's record of what it took keeps only the
				// newest IDs): the restored MAS writes none.
				after, err := b2.sys.cfg.Store.(*MemoryStore).Image()
				if err != nil {
					t.Fatal(err)
				}
				if sent := slices.ContainsFunc(after.Messages, func(m Message) bool { return notice(m.Message) }); sent == tc.agent {
					t.Errorf("the restored MAS sent the notice %v; want it sent only when the store lacked it (%v)", sent, !tc.agent)
				}
			})
		})
	}
}
