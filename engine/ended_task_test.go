package engine

// An ended task (finished, failed, cancelled) has no work running or
// queued: no agent runs a step of it, whatever the order in which its end
// and the work in flight meet (a restart, an interrupt, a message sent as
// it ends, a pause).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// heldStore is a MemoryStore whose write of a message hold matches (an
// instruction) waits until release is closed (a slow store; fake time
// inside a synctest bubble).
type heldStore struct {
	*MemoryStore
	hold    func(*Message) bool
	release <-chan struct{}
	limit   time.Duration
}

func (h *heldStore) PutMessage(ctx context.Context, m *Message) error {
	if h.hold(m) {
		select {
		case <-h.release:
		case <-time.After(h.limit):
		}
	}
	return h.MemoryStore.PutMessage(ctx, m)
}

// runsOf scripts the steps whose texts are given to record, when in
// matches them, that they ran (closing ran at the first) and to run until
// cancelled; calls returns what was recorded. The restarted MAS runs the
// same executors (Config.Skills): the script's handlers are replaced.
func runsOf(sc *script, in func(*StepState) bool, texts ...string) (ran <-chan struct{}, calls func() []string) {
	started := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var got []string
	record := func(ctx context.Context, x *ExecInput) *Output {
		if in(&x.Step) {
			mu.Lock()
			got = append(got, x.Step.Executor+":"+x.Step.TextContent)
			mu.Unlock()
			once.Do(func() { close(started) })
			<-ctx.Done()
		}
		return &Output{}
	}
	for _, text := range texts {
		sc.onText(text, record)
	}
	return started, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// kill -9 right after cancel_task: the task's document says it failed,
// but the finish_task instructions to its group (which drop the agents'
// steps of the task) were not stored yet. The restart sends them again
// (task.implied) after the agents' loops run again: meanwhile no agent
// starts its queued step of the cancelled task (an LLM call, or a tool
// call with effects downstream, for work the operator cancelled). The
// store's write of that instruction is held here until a step of the
// cancelled task runs (at most an hour of fake time, which passes only
// once every goroutine of the bubble is blocked): the engine's own order
// decides.
func TestNoStepOfACancelledTaskRunsAfterARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, store, cfg := frozenBed(t, nil)
		alice := b.newAgent("alice")
		task := b.newTask("to cancel", alice)
		longWork(b)
		b.inject(alice, task, NoRelative, false, spec(SkillThink, "long work"), spec(SkillThink, "more work"))
		synctest.Wait()
		if id, run := b.sys.mustAgent(t, alice).runningStep(); id == "" || run != task {
			t.Fatalf("alice runs %q of %q, want a step of the task\n%s", id, run, b.dump())
		}
		img := crashAfterCancel(t, b, store, task)
		var imgTask TaskState
		for _, ts := range img.Tasks {
			if ts.TaskID == task {
				imgTask = ts
			}
		}
		queued := 0
		for _, a := range img.Agents {
			for _, s := range a.AgentStep.StepList {
				if a.AgentID == alice && s.TaskID == task {
					queued++
				}
			}
		}
		if imgTask.ExecutionState != StateFailed || queued == 0 {
			t.Fatalf("image: task %q, alice's steps of it %d; want the task failed and her steps still there", imgTask.ExecutionState, queued)
		}

		ran, calls := runsOf(b.sc, func(s *StepState) bool { return s.TaskID == task }, "long work", "more work")
		cfg.Store = &heldStore{MemoryStore: NewMemoryStore(), release: ran, limit: time.Hour,
			hold: func(m *Message) bool { return m.Instruction != nil && m.Instruction.FinishTask != nil }}
		b2 := startFrom(t, cfg, img, b.sc)
		synctest.Wait()

		if st := b2.task(task); st.ExecutionState != StateFailed {
			t.Fatalf("after the restart the task is %q, want failed", st.ExecutionState)
		}
		if c := calls(); len(c) > 0 {
			t.Errorf("after the restart, alice ran %v of task %s, which was cancelled before the crash", c, task)
		}
		if left := b2.steps(alice, func(s StepState) bool { return s.TaskID == task }); len(left) != 0 {
			t.Errorf("alice still has %d steps of the cancelled task", len(left))
		}
	})
}

// longWork scripts the steps whose text is "long work" to run until
// cancelled.
func longWork(b *testbed) {
	b.sc.onText("long work", func(ctx context.Context, _ *ExecInput) *Output {
		<-ctx.Done()
		return &Output{}
	})
}

// cancelTask cancels a task as the operator.
func (b *testbed) cancelTask(id string) {
	b.t.Helper()
	if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionCancelTask, TaskID: id, Summary: "stop it"}); err != nil {
		b.t.Fatal(err)
	}
}

// crashAfterCancel cancels a task and crashes right after the store took
// its document, failed, and before anything else: it returns the image a
// restart finds.
func crashAfterCancel(t *testing.T, b *testbed, store *freezeStore, task string) *Image {
	t.Helper()
	store.freezeTask = func(ts *TaskState) bool { return ts.TaskID == task && ts.ExecutionState == StateFailed }
	b.cancelTask(task)
	return crashed(t, b, store)
}

// mustAgent returns the agent's owner.
func (s *System) mustAgent(t *testing.T, id string) *agent {
	t.Helper()
	a, ok := s.agent(id)
	if !ok {
		t.Fatalf("no agent %s", id)
	}
	return a
}

// The operator interrupts an agent (its step's context is cancelled and
// the instruction is to be its next step), and cancels the task before
// the interrupted step has returned (an LLM or tool call takes a moment
// to give up). cancel_task drops the agent's steps of the task, the
// running one included; when the interrupted step returns, the
// interrupt's process_message step is not queued in the task that ended:
// it would run (an LLM call) and stay in the agent's step list for good
// (its task's finish_task came already).
func TestInterruptThenCancelQueuesNothing(t *testing.T) {
	b := newTestbed(t, nil)
	alice := b.newAgent("alice")
	task := b.newTask("interrupted then cancelled", alice)
	started, stopped, proceed := make(chan struct{}), make(chan struct{}), make(chan struct{})
	b.sc.onText("long work", func(ctx context.Context, _ *ExecInput) *Output {
		close(started)
		<-ctx.Done()
		close(stopped)
		<-proceed // the call takes a moment to give up
		return &Output{Err: ctx.Err()}
	})
	b.inject(alice, task, NoRelative, false, spec(SkillThink, "long work"))
	waitChan(t, started, "alice's step")
	if _, err := b.sys.Interrupt(b.op(), alice, "wrong direction", "do something else"); err != nil {
		t.Fatal(err)
	}
	waitChan(t, stopped, "the interrupted step to see its context cancelled")
	b.cancelTask(task)
	close(proceed)
	b.settle()
	if left := b.steps(alice, func(s StepState) bool { return s.TaskID == task }); len(left) != 0 {
		for _, s := range left {
			t.Errorf("alice has a %s step (%s) of task %s, cancelled before it was queued: %q", s.Executor, s.ExecutionState, task, s.StepIntention)
		}
	}
	for _, c := range b.sc.callsOf("alice", "") {
		if c.TaskID == task && c.Text != "long work" {
			t.Errorf("alice ran a %s step of the cancelled task: %q", c.Skill, c.Text)
		}
	}
}

// onPutStore is a MemoryStore that runs hook (once) when a message it
// matches is being written, before storing it: what another goroutine
// (the operator's cancel_task) does while that write is in flight.
type onPutStore struct {
	*MemoryStore
	match func(*Message) bool
	hook  func()
	fired atomic.Bool
}

func (s *onPutStore) PutMessage(ctx context.Context, m *Message) error {
	if s.match != nil && s.match(m) && s.fired.CompareAndSwap(false, true) {
		s.hook()
	}
	return s.MemoryStore.PutMessage(ctx, m)
}

// cancelOnPut has the operator cancel the task while the first message
// match accepts is being stored.
func (s *onPutStore) cancelOnPut(t *testing.T, b *testbed, task string, match func(*Message) bool) {
	s.match = match
	s.hook = func() {
		// Not on the test's goroutine: no Fatal.
		if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionCancelTask, TaskID: task, Summary: "stop it"}); err != nil {
			t.Errorf("cancel_task: %v", err)
		}
	}
}

// An agent asks a question (need_reply, waiting) while the operator
// cancels the task: the cancel lands while the agent's message is being
// stored (after sendFromAgent checked that the task runs). The task's end
// drops the group's steps of the task, clears the operator's
// conversations of it and releases the agent's wait; the message handed
// over after it is not taken. Taken by the operator, the question would
// wait in its inbox for a reply in a task that has ended, which can never
// be given (send_message: the task has ended) and is never dropped;
// taken by an agent, it would queue a reply step in the cancelled task,
// which would run (an LLM call) and stay in its step list.
func TestMessageRacingTheCancelIsNotDelivered(t *testing.T) {
	for _, toOperator := range []bool{true, false} {
		t.Run(map[bool]string{true: "to the operator", false: "to an agent"}[toOperator], func(t *testing.T) {
			store := &onPutStore{MemoryStore: NewMemoryStore()}
			b := newTestbed(t, func(c *Config) { c.Store = store })
			op := b.op()
			alice, bob := b.newAgent("alice"), b.newAgent("bob")
			task := b.newTask("cancelled while asking", alice, bob)
			store.cancelOnPut(t, b, task, func(m *Message) bool { return m.SenderID == alice && m.TaskID == task && m.NeedReply })
			to := bob
			if toOperator {
				to = op
			}
			sayTo(b, "ask", to, "are you there?", true, true)
			id := b.inject(alice, task, NoRelative, false, spec(SkillSendMessage, "ask"))[0]
			b.waitFor("the cancel", func() bool { return b.ended(task) })
			b.settle()
			if _, ok := b.step(alice, id); ok {
				t.Fatalf("alice's asking step is still there\n%s", b.dump())
			}
			if a := b.agent(alice); len(a.StepLock) != 0 {
				t.Errorf("alice still waits: %v", a.StepLock)
			}
			if toOperator {
				in, err := b.sys.Inbox(op)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range in {
					if e.TaskID == task && e.AwaitingReply {
						_, sendErr := b.sys.HumanSend(op, HumanMessage{TaskID: task, Receiver: []string{alice}, Content: "here I am", ReplyTo: e.MessageID})
						t.Errorf("the operator's inbox holds alice's question of the cancelled task %s as awaiting a reply (waiting=%v): %q; answering it: %v",
							task, e.Waiting, e.Content, sendErr)
					}
				}
				return
			}
			for _, s := range b.steps(bob, func(s StepState) bool { return s.TaskID == task }) {
				t.Errorf("bob has a %s step (%s) of the cancelled task: %q, result %v", s.Executor, s.ExecutionState, s.StepIntention, s.ExecuteResult)
			}
			for _, c := range b.sc.callsOf("bob", "") {
				if c.TaskID == task {
					t.Errorf("bob ran a %s step of the cancelled task", c.Skill)
				}
			}
		})
	}
}

// The operator's message races the cancel the same way (the cancel lands
// while it is being stored, after send_message checked that the task
// runs): its receiver does not take it, and send_message says so.
func TestOperatorsMessageRacingTheCancelIsRefused(t *testing.T) {
	store := &onPutStore{MemoryStore: NewMemoryStore()}
	b := newTestbed(t, func(c *Config) { c.Store = store })
	op := b.op()
	bob := b.newAgent("bob")
	task := b.newTask("cancelled while the operator asks", bob)
	store.cancelOnPut(t, b, task, func(m *Message) bool { return m.SenderID == op && m.TaskID == task })
	sent, err := b.sys.HumanSend(op, HumanMessage{TaskID: task, Receiver: []string{bob}, Content: "are you there?", NeedReply: true, Waiting: true})
	if !errors.Is(err, ErrEnded) || len(sent) != 0 {
		t.Errorf("send_message as the task was cancelled: sent %d, error %v; want none sent and %v", len(sent), err, ErrEnded)
	}
	b.settle()
	for _, s := range b.steps(bob, func(s StepState) bool { return s.TaskID == task }) {
		t.Errorf("bob has a %s step (%s) of the cancelled task: %q", s.Executor, s.ExecutionState, s.StepIntention)
	}
	for _, c := range b.sc.callsOf("bob", "") {
		if c.TaskID == task {
			t.Errorf("bob ran a %s step of the cancelled task", c.Skill)
		}
	}
}

// pause_task, then cancel_task. The task's pause ends with it: it does
// not read paused (nor hold in the engine's s.paused), and an agent held
// by it alone (its only step was of that task, shown "paused") reads idle
// once finish_task dropped its steps.
func TestCancelClearsThePause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTestbed(t, nil)
		alice := b.newAgent("alice")
		task := b.newTask("paused then cancelled", alice)
		if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionPauseTask, TaskID: task}); err != nil {
			t.Fatal(err)
		}
		b.inject(alice, task, NoRelative, false, spec(SkillThink, "held"))
		synctest.Wait()
		if a := b.agent(alice); a.WorkingState != WorkingPaused {
			t.Fatalf("alice, with only a step of the paused task: %s, want paused", a.WorkingState)
		}
		b.cancelTask(task)
		synctest.Wait()
		if st := b.task(task); st.Paused || b.sys.isPaused(task) {
			t.Errorf("task %s ended %s but still reads paused (paused %v, paused_for %q, held by the engine: %v)",
				task, st.ExecutionState, st.Paused, st.PausedFor, b.sys.isPaused(task))
		}
		a := b.agent(alice)
		if len(a.AgentStep.TodoList) != 0 {
			t.Fatalf("alice still has steps to run: %v", a.AgentStep.TodoList)
		}
		if a.WorkingState != WorkingIdle {
			t.Errorf("alice has nothing to run and no task holds her, but reads working_state %q after the task ended", a.WorkingState)
		}
	})
}

// kill -9 right after cancel_task, as above, while an agent waits in the
// task (on the operator's reply): the task's end released the wait in
// memory, but the crash came before the agent's document was written
// without it. The restart releases it, as the task's end did: the agent
// waits on nothing in a task that has ended, its other tasks held
// meanwhile.
func TestAWaitInACancelledTaskEndsAfterARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, store, cfg := frozenBed(t, nil)
		alice := b.newAgent("alice")
		task := b.newTask("to cancel", alice)
		askOperator(b, "ask the operator")
		b.inject(alice, task, NoRelative, false, spec(SkillSendMessage, "ask the operator"))
		synctest.Wait()
		if a := b.agent(alice); len(a.StepLock) != 1 {
			t.Fatalf("alice's step lock %v, want her wait on the operator\n%s", a.StepLock, b.dump())
		}
		waitEndsAfterRestart(t, cfg, b, crashAfterCancel(t, b, store, task), alice, "the cancelled task")
	})
}

// waitEndsAfterRestart checks that alice's one wait is in img, and that
// the MAS restarted from it leaves her waiting on nothing (in where: the
// ended task or stage her wait was in).
func waitEndsAfterRestart(t *testing.T, cfg Config, b *testbed, img *Image, alice, where string) {
	t.Helper()
	for _, a := range img.Agents {
		if a.AgentID == alice && len(a.StepLock) != 1 {
			t.Fatalf("image: alice's step lock %v; want her wait still there", a.StepLock)
		}
	}
	b2 := restartFrom(t, cfg, img, b.sc)
	synctest.Wait()
	if a := b2.agent(alice); len(a.StepLock) != 0 || len(a.Waits) != 0 {
		t.Errorf("after the restart alice still waits in %s: step lock %v, waits %+v (working state %q)", where, a.StepLock, a.Waits, a.WorkingState)
	}
}

// The operator answers an agent's question while the task is cancelled:
// the cancel lands while the answer is being stored, after send_message
// checked that the task runs, and the agent does not take the answer.
// send_message fails saying the task ended, and the operator's records
// say what happened: the question is not shown answered (it expired:
// nobody waits for its answer now) and no send is recorded as done. In
// "ended mark only" the hook sets only the task's ended mark, as endTask
// does before the operator takes finish_task (which drops the operator's
// records of the task): what send_message itself leaves is checked.
func TestOperatorsAnswerRacingTheCancelIsNotRecordedAsSent(t *testing.T) {
	for _, markOnly := range []bool{false, true} {
		t.Run(map[bool]string{false: "cancel_task", true: "ended mark only"}[markOnly], func(t *testing.T) {
			store := &onPutStore{MemoryStore: NewMemoryStore()}
			b := newTestbed(t, func(c *Config) { c.Store = store })
			op := b.op()
			alice := b.newAgent("alice")
			task := b.newTask("cancelled while the operator answers", alice)
			sayTo(b, "ask", op, "which colour?", true, true)
			b.inject(alice, task, NoRelative, false, spec(SkillSendMessage, "ask"))
			var question string
			b.waitFor("alice's question in the operator's inbox", func() bool {
				for _, e := range awaitingIn(b, task) {
					question = e.MessageID
				}
				return question != ""
			})
			isAnswer := func(m *Message) bool { return m.SenderID == op && m.TaskID == task }
			if markOnly {
				store.match, store.hook = isAnswer, func() { b.sys.ended.Store(task, struct{}{}) }
			} else {
				store.cancelOnPut(t, b, task, isAnswer)
			}
			sent, err := b.sys.HumanSend(op, HumanMessage{TaskID: task, Receiver: []string{alice}, Content: "blue", ReplyTo: question})
			if !errors.Is(err, ErrEnded) || len(sent) != 0 || !strings.Contains(fmt.Sprint(err), "task ended") {
				t.Errorf("answering as the task was cancelled: sent %d, error %v; want none sent and %v saying the task ended", len(sent), err, ErrEnded)
			}
			if !markOnly {
				b.settle()
			}
			opSt := b.agent(op)
			found := false
			for peer, msgs := range opSt.ConversationPool.ConversationPrivates {
				for _, p := range msgs {
					if p.TaskID != task {
						continue
					}
					if p.MessageID == question {
						found = true
						if p.Replied || !p.Expired {
							t.Errorf("the operator's records show alice's question %s replied=%v expired=%v, but alice never took the answer; want not replied, expired", question, p.Replied, p.Expired)
						}
					}
					if p.SenderID == op {
						t.Errorf("the operator's conversation with %s records its undelivered answer as sent: %q", peer, p.Content)
					}
				}
			}
			if markOnly && !found {
				t.Errorf("alice's question %s is gone from the operator's records before finish_task", question)
			}
			for _, s := range b.steps(op, func(s StepState) bool { return s.TaskID == task && s.Executor == SkillSendMessage }) {
				t.Errorf("the operator's step list records the undelivered answer as sent: %s %q, result %v", s.ExecutionState, s.StepIntention, s.ExecuteResult)
			}
			for _, e := range awaitingIn(b, task) {
				t.Errorf("the operator's inbox shows %q awaiting a reply in the ended task", e.Content)
			}
		})
	}
}

// TestOperatorsMessageAsItsStageEndsLeavesTheStageClosed: the operator
// writes to alice in a stage that ends while the message is being stored
// (finish_stage lands then, and the operator takes its instruction, which
// closes the stage in its working memory, before its record of the
// message): the record must not open the stage again, where it would stay
// until the task ends.
func TestOperatorsMessageAsItsStageEndsLeavesTheStageClosed(t *testing.T) {
	store := &onPutStore{MemoryStore: NewMemoryStore()}
	b := newTestbed(t, func(c *Config) { c.Store = store })
	op := b.op()
	alice := b.newAgent("alice")
	task := b.newTask("a stage ending as the operator writes", alice)
	stage := b.addStages(task, StageSpec{StageIntention: "work", AgentAllocation: map[string]string{alice: "the goal"}})[0]
	b.settle()
	store.match = func(m *Message) bool { return m.SenderID == op && m.TaskID == task && m.StageRelative == stage }
	store.hook = func() {
		if _, err := b.sys.TaskInstruction(op, TaskInstruction{Action: ActionFinishStage, TaskID: task, StageID: stage}); err != nil {
			t.Errorf("finish_stage: %v", err)
		}
	}
	if _, err := b.sys.HumanSend(op, HumanMessage{TaskID: task, Receiver: []string{alice}, Content: "one more thing", StageRelative: stage}); err != nil {
		t.Fatal(err)
	}
	b.settle()
	if !store.fired.Load() {
		t.Fatal("the stage never ended while the operator's message was stored")
	}
	if _, open := b.agent(op).WorkingMemory[task][stage]; open {
		t.Errorf("the operator's working memory holds stage %s, which ended as it wrote there: it stays until the task ends", stage)
	}
}
