package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// edgesOf copies a wait graph's edges without the empty inner maps that
// remove leaves behind.
func edgesOf(g *waitGraph) map[string]map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string]map[string]int{}
	for from, tos := range g.edges {
		for to, n := range tos {
			if out[from] == nil {
				out[from] = map[string]int{}
			}
			out[from][to] = n
		}
	}
	return out
}

func TestWaitGraph(t *testing.T) {
	type op struct {
		remove    bool
		from, to  string
		wantCycle []string // for adds
	}
	add := func(from, to string, cycle ...string) op { return op{from: from, to: to, wantCycle: cycle} }
	rm := func(from, to string) op { return op{remove: true, from: from, to: to} }
	tests := []struct {
		name      string
		ops       []op
		wantEdges map[string]map[string]int
	}{
		{
			name:      "add then remove",
			ops:       []op{add("A", "B"), rm("A", "B")},
			wantEdges: map[string]map[string]int{},
		},
		{
			name:      "direct cycle is refused and returned",
			ops:       []op{add("A", "B"), add("B", "A", "B", "A", "B")},
			wantEdges: map[string]map[string]int{"A": {"B": 1}},
		},
		{
			name:      "indirect cycle is returned as the path",
			ops:       []op{add("A", "B"), add("B", "C"), add("C", "A", "C", "A", "B", "C")},
			wantEdges: map[string]map[string]int{"A": {"B": 1}, "B": {"C": 1}},
		},
		{
			name:      "a chain is no cycle",
			ops:       []op{add("A", "B"), add("B", "C"), add("A", "C"), add("D", "A")},
			wantEdges: map[string]map[string]int{"A": {"B": 1, "C": 1}, "B": {"C": 1}, "D": {"A": 1}},
		},
		{
			name: "two waits on the same peer need two removes",
			ops: []op{
				add("A", "B"), add("A", "B"),
				rm("A", "B"), add("B", "A", "B", "A", "B"),
				rm("A", "B"), add("B", "A"),
			},
			wantEdges: map[string]map[string]int{"B": {"A": 1}},
		},
		{
			name:      "removing what was never added changes nothing",
			ops:       []op{rm("X", "Y"), add("A", "B"), rm("A", "C"), rm("B", "A")},
			wantEdges: map[string]map[string]int{"A": {"B": 1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var g waitGraph
			for i, o := range tt.ops {
				if o.remove {
					g.remove(o.from, o.to)
					continue
				}
				got := g.add(o.from, o.to)
				if diff := cmp.Diff(o.wantCycle, got, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("op %d add(%s, %s) cycle mismatch (-want +got):\n%s", i, o.from, o.to, diff)
				}
			}
			if diff := cmp.Diff(tt.wantEdges, edgesOf(&g)); diff != "" {
				t.Errorf("edges mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// askOperator scripts a step that asks the operator and waits for the reply.
func askOperator(b *testbed, text string) {
	op := b.op()
	b.sc.onText(text, func(context.Context, *ExecInput) *Output {
		return &Output{SendMessage: &OutgoingMessage{Receiver: StringList{op}, Message: "are you there?", NeedReply: true, Waiting: true}}
	})
}

// askingInAStage adds a task whose one stage has alice ask the operator a
// question and wait for the reply (askOperator), and returns once she
// waits and her asking step is applied. Her planning steps whose text
// holds "do not wait again" plan nothing.
func askingInAStage(b *testbed) (alice, task, stage string) {
	alice = b.newAgent("alice")
	task = b.newTask("waiting", alice)
	askOperator(b, "ask the operator in the stage")
	b.sc.onAgent("alice", SkillPlanning, func(_ context.Context, in *ExecInput) *Output {
		if strings.Contains(in.Step.TextContent, "do not wait again") {
			return &Output{}
		}
		return &Output{AddSteps: []StepSpec{spec(SkillSendMessage, "ask the operator in the stage")}}
	})
	stage = b.addStages(task, StageSpec{StageIntention: "wait", AgentAllocation: map[string]string{alice: "ask"}})[0]
	b.waitFor("alice to wait on the operator", func() bool { return len(b.agent(alice).StepLock) == 1 })
	// The lock is engaged while the send step is still being applied;
	// let it finish first (see TestProgressGuardRacesWithTheEndOfTheStage
	// for why).
	b.settle()
	return alice, task, stage
}

func TestWaitTimeoutReleasesTheLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = time.Minute
		b := newTestbed(t, func(c *Config) { c.WaitTimeout = timeout })
		alice := b.newAgent("alice")
		base, baseStage := b.sys.BaseTaskID(), b.sys.BaseStageID()
		b.join(base, alice)
		askOperator(b, "ask the operator")
		ids := b.inject(alice, base, baseStage, false, spec(SkillSendMessage, "ask the operator"), spec(SkillThink, "after the wait"))
		synctest.Wait()

		a := b.agent(alice)
		if len(a.StepLock) != 1 || len(a.Waits) != 1 || a.Waits[0].For != b.op() {
			t.Fatalf("alice's lock = %v, waits = %+v; want one wait for the operator", a.StepLock, a.Waits)
		}
		if w := a.Waits[0]; !w.Deadline.Equal(w.Since.Add(timeout)) {
			t.Errorf("wait deadline %v, want since %v + %v", w.Deadline, w.Since, timeout)
		}
		if a.WorkingState != WorkingWaiting {
			t.Errorf("working_state = %q, want %q", a.WorkingState, WorkingWaiting)
		}

		time.Sleep(timeout - time.Second)
		synctest.Wait()
		if got := b.agent(alice).StepLock; len(got) != 1 {
			t.Fatalf("before the deadline: lock = %v, want still engaged", got)
		}
		if st, _ := b.step(alice, ids[1]); st.ExecutionState != StateInit {
			t.Fatalf("before the deadline: the next step is %s, want init", st.ExecutionState)
		}

		time.Sleep(time.Second)
		synctest.Wait()
		a = b.agent(alice)
		if len(a.StepLock) != 0 || len(a.Waits) != 0 {
			t.Fatalf("after the deadline: lock = %v, waits = %+v; want released", a.StepLock, a.Waits)
		}
		var got []string
		for _, c := range b.sc.callsOf("alice", "") {
			got = append(got, c.Skill)
		}
		want := []string{SkillSendMessage, SkillProcessMessage, SkillThink}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("alice's executions mismatch (-want +got):\n%s", diff)
		}
		pm := b.steps(alice, func(s StepState) bool { return s.Executor == SkillProcessMessage })
		if len(pm) != 1 {
			t.Fatalf("process_message steps = %d, want 1", len(pm))
		}
		if !strings.Contains(pm[0].TextContent, b.op()) || !strings.Contains(pm[0].StepIntention, b.op()) {
			t.Errorf("timeout step does not name the receiver %s: %q / %q", b.op(), pm[0].StepIntention, pm[0].TextContent)
		}
		if pm[0].TaskID != base || pm[0].StageID != baseStage {
			t.Errorf("timeout step in %s/%s, want the wait's %s/%s", pm[0].TaskID, pm[0].StageID, base, baseStage)
		}
		if e := edgesOf(&b.sys.waits); len(e) != 0 {
			t.Errorf("wait graph after the timeout = %v, want empty", e)
		}
	})
}

func TestWaitsAreReleasedWhenTheirWorkEnds(t *testing.T) {
	tests := []struct {
		name string
		end  func(b *testbed, taskID, stageID string) error
	}{
		{"finish_stage", func(b *testbed, taskID, stageID string) error {
			_, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionFinishStage, TaskID: taskID, StageID: stageID})
			return err
		}},
		{"finish_task", func(b *testbed, taskID, _ string) error {
			_, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionFinishTask, TaskID: taskID, Summary: "enough"})
			return err
		}},
		{"cancel_task", func(b *testbed, taskID, _ string) error {
			_, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionCancelTask, TaskID: taskID})
			return err
		}},
		{"retry_stage", func(b *testbed, taskID, stageID string) error {
			_, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionRetryStage, TaskID: taskID, OldStageID: stageID,
				NewStageIntention: "do not wait again", NewAgentAllocation: map[string]string{b.agentNamed("alice"): "carry on"}})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newTestbed(t, nil)
			alice, task, stage := askingInAStage(b)
			if w := b.agent(alice).Waits[0]; w.TaskID != task || w.StageID != stage {
				t.Fatalf("wait in %s/%s, want %s/%s", w.TaskID, w.StageID, task, stage)
			}

			if err := tt.end(b, task, stage); err != nil {
				t.Fatal(err)
			}
			b.settle()
			a := b.agent(alice)
			if len(a.StepLock) != 0 || len(a.Waits) != 0 {
				t.Errorf("lock = %v, waits = %+v; want released", a.StepLock, a.Waits)
			}
			if e := edgesOf(&b.sys.waits); len(e) != 0 {
				t.Errorf("wait graph = %v, want empty", e)
			}
			if left := b.steps(alice, func(s StepState) bool { return s.TaskID == task && s.StageID == stage }); len(left) != 0 {
				t.Errorf("alice still has %d steps of the ended stage\n%s", len(left), b.dump())
			}
			if _, ok := a.WorkingMemory[task][stage]; ok {
				t.Errorf("working memory still holds the ended stage: %v", a.WorkingMemory)
			}
		})
	}
}

func TestWaitCycleIsNotEngaged(t *testing.T) {
	b := newTestbed(t, nil)
	base, baseStage := b.sys.BaseTaskID(), b.sys.BaseStageID()
	alice, bob := b.newAgent("alice"), b.newAgent("bob")
	b.join(base, alice, bob)
	locks := b.sys.Subscribe(1 << 14)
	defer locks.Close()

	bobStarted, release := make(chan struct{}), make(chan struct{})
	b.sc.onText("bob asks alice", func(ctx context.Context, _ *ExecInput) *Output {
		close(bobStarted)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return &Output{SendMessage: &OutgoingMessage{Receiver: StringList{alice}, Message: "question from bob", NeedReply: true, Waiting: true}}
	})
	b.sc.onText("alice asks bob", func(context.Context, *ExecInput) *Output {
		return &Output{SendMessage: &OutgoingMessage{Receiver: StringList{bob}, Message: "question from alice", NeedReply: true, Waiting: true}}
	})
	reply := func(_ context.Context, in *ExecInput) *Output {
		return &Output{SendMessage: &OutgoingMessage{Receiver: StringList{in.Step.ReplyTo}, Message: "answer from " + in.Agent.Name}}
	}
	b.sc.onAgent("alice", SkillSendMessage, reply)
	b.sc.onAgent("bob", SkillSendMessage, reply)

	bobAsk := b.inject(bob, base, baseStage, false, spec(SkillSendMessage, "bob asks alice"))[0]
	<-bobStarted
	aliceAsk := b.inject(alice, base, baseStage, false, spec(SkillSendMessage, "alice asks bob"))[0]
	b.waitFor("alice to wait on bob and bob to have her question queued", func() bool {
		return len(b.agent(alice).StepLock) == 1 && len(b.agent(bob).AgentStep.TodoList) == 1
	})
	close(release)
	b.settle()

	st, _ := b.step(bob, bobAsk)
	note, _ := st.ExecuteResult["note"].(string)
	cycle := bob + " → " + alice + " → " + bob
	if st.ExecutionState != StateFinished || !strings.Contains(note, alice) || !strings.Contains(note, cycle) {
		t.Errorf("bob's send: state %s, note %q; want finished with a note naming the cycle %s", st.ExecutionState, note, cycle)
	}
	if st, _ := b.step(alice, aliceAsk); st.ExecuteResult["note"] != nil {
		t.Errorf("alice's send has a note %v, want none (her wait was engaged)", st.ExecuteResult["note"])
	}
	for _, id := range []string{alice, bob} {
		a := b.agent(id)
		if len(a.StepLock) != 0 {
			t.Errorf("%s: lock %v, want empty", a.Name, a.StepLock)
		}
		for _, s := range a.AgentStep.StepList {
			if s.ExecutionState != StateFinished {
				t.Errorf("%s: step %s (%s) is %s, want finished", a.Name, s.StepID, s.Executor, s.ExecutionState)
			}
		}
		replies := b.steps(id, func(s StepState) bool { return s.Executor == SkillSendMessage && s.ReplyTo != "" })
		if len(replies) != 1 {
			t.Errorf("%s ran %d replies, want 1", a.Name, len(replies))
		}
	}
	if e := edgesOf(&b.sys.waits); len(e) != 0 {
		t.Errorf("wait graph = %v, want empty", e)
	}
	// bob's wait was never engaged.
	for {
		select {
		case ev := <-locks.C:
			if ev.AgentID == bob && ev.Detail == "step_lock" {
				t.Errorf("bob's step lock was engaged: %+v", ev)
			}
			continue
		default:
		}
		break
	}
}

func TestReplyWithoutReceiverReachesTheAsker(t *testing.T) {
	b := newTestbed(t, nil)
	base := b.sys.BaseTaskID()
	alice, bob := b.newAgent("alice"), b.newAgent("bob")
	b.join(base, alice, bob)
	sayTo(b, "alice asks", bob, "what time is it?", true, true)
	// bob's model leaves receiver out: the reply step knows whom it answers.
	b.sc.onAgent("bob", SkillSendMessage, func(context.Context, *ExecInput) *Output {
		return &Output{SendMessage: &OutgoingMessage{Message: "noon"}}
	})
	runSteps(b, alice, "alice asks")
	b.settle()
	replies := b.steps(bob, func(s StepState) bool { return s.ReplyTo == alice })
	if len(replies) != 1 {
		t.Fatalf("bob's reply steps = %d, want 1", len(replies))
	}
	if replies[0].ExecutionState == StateFailed {
		t.Errorf("a reply step whose output omits receiver fails (%v) instead of going to reply_to; the asker stays locked until WaitTimeout", replies[0].ExecuteResult["error"])
	}
	if a := b.agent(alice); len(a.StepLock) != 0 {
		t.Errorf("alice's lock %v, want released by the reply", a.StepLock)
	}
}

func TestWaitTimeoutPerMessage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = time.Minute
		b := newTestbed(t, func(c *Config) { c.WaitTimeout = timeout })
		base, baseStage := b.sys.BaseTaskID(), b.sys.BaseStageID()
		op := b.op()
		op2, err := b.sys.AddOperator("op2")
		if err != nil {
			t.Fatal(err)
		}
		alice := b.newAgent("alice")
		b.join(base, alice)
		b.sc.onText("ask both", func(context.Context, *ExecInput) *Output {
			return &Output{SendMessage: &OutgoingMessage{Receiver: StringList{op, op2}, Message: "anyone?", NeedReply: true, Waiting: true}}
		})
		b.inject(alice, base, baseStage, false, spec(SkillSendMessage, "ask both"))
		synctest.Wait()
		if got := len(b.agent(alice).StepLock); got != 2 {
			t.Fatalf("lock has %d entries, want one per receiver", got)
		}
		time.Sleep(timeout / 2)
		if _, err := b.sys.HumanSend(op2, HumanMessage{TaskID: base, Receiver: []string{alice}, Content: "me"}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if a := b.agent(alice); len(a.Waits) != 1 || a.Waits[0].For != op {
			t.Fatalf("waits %+v, want only the one for %s", a.Waits, op)
		}
		time.Sleep(timeout / 2)
		synctest.Wait()
		a := b.agent(alice)
		if len(a.StepLock) != 0 {
			t.Fatalf("lock %v, want released", a.StepLock)
		}
		timeouts := b.steps(alice, func(s StepState) bool {
			return s.Executor == SkillProcessMessage && strings.Contains(s.TextContent, "none came within")
		})
		if len(timeouts) != 1 || !strings.Contains(timeouts[0].TextContent, op) || strings.Contains(timeouts[0].TextContent, op2) {
			t.Fatalf("timeout steps %+v, want one naming only %s", timeouts, op)
		}

		// A late reply is an ordinary message, processed in turn.
		if _, err := b.sys.HumanSend(op, HumanMessage{TaskID: base, Receiver: []string{alice}, Content: "late"}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		pm := b.steps(alice, func(s StepState) bool { return s.Executor == SkillProcessMessage })
		if last := pm[len(pm)-1]; !strings.Contains(last.TextContent, "late") || last.ExecutionState != StateFinished {
			t.Errorf("last process_message %+v, want the late reply processed", last)
		}
		if e := edgesOf(&b.sys.waits); len(e) != 0 {
			t.Errorf("wait graph %v, want empty", e)
		}
	})
}

// gateStore blocks the first message write (a message is written just
// before it is delivered) once armed, while gate says so.
type gateStore struct {
	*MemoryStore
	mu    sync.Mutex
	armed int // >= 0 when armed; -1 when not
	gate  func() bool
	wait  <-chan struct{}
}

func (g *gateStore) PutMessage(ctx context.Context, m *Message) error {
	g.mu.Lock()
	hold := g.armed >= 0
	if hold {
		g.armed = -1
	}
	g.mu.Unlock()
	if hold && g.gate() {
		select {
		case <-g.wait:
		case <-time.After(20 * time.Second):
		}
	}
	return g.MemoryStore.PutMessage(ctx, m)
}

func TestFinishStageRemovesStepsBeforeReleasingWaits(t *testing.T) {
	store := &gateStore{MemoryStore: NewMemoryStore(), armed: -1}
	b := newTestbed(t, func(c *Config) { c.Store = store })
	alice := b.newAgent("alice")
	task := b.newTask("waiting", alice)
	askOperator(b, "ask the operator in the stage")
	b.sc.onAgent("alice", SkillPlanning, func(context.Context, *ExecInput) *Output {
		return &Output{AddSteps: []StepSpec{spec(SkillSendMessage, "ask the operator in the stage")}}
	})
	ranLate := make(chan struct{}, 1)
	b.sc.onAgent("alice", SkillReflection, func(context.Context, *ExecInput) *Output {
		select {
		case ranLate <- struct{}{}:
		default:
		}
		return &Output{AddSteps: []StepSpec{}}
	})
	stage := b.addStages(task, StageSpec{StageIntention: "wait", AgentAllocation: map[string]string{alice: "ask"}})[0]
	b.waitFor("alice to wait on the operator", func() bool { return len(b.agent(alice).StepLock) == 1 })

	// Hold the delivery of the finish_stage instruction if alice's wait is
	// already released by then, until she runs her pending reflection.
	b.settle()
	a, _ := b.sys.agent(alice)
	logged := len(b.task(task).SharedConversationPool)
	store.mu.Lock()
	store.armed = logged
	store.gate = func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.st.StepLock) == 0
	}
	store.wait = ranLate
	store.mu.Unlock()
	if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionFinishStage, TaskID: task, StageID: stage}); err != nil {
		t.Fatal(err)
	}
	b.settle()
	if calls := b.sc.callsOf("alice", SkillReflection); len(calls) > 0 {
		t.Errorf("finish_stage/finish_task/retry_stage release the waits of the ended stage before delivering the instruction that removes its steps: the released agent ran a %s step of stage %s after it ended", SkillReflection, calls[0].StageID)
	}
}

// TestOperatorToldWhenItsReplyCannotCome: the operator asks the manager a
// question and waits for the answer; the manager's reply step fails. The
// operator, who holds no step lock, is told in its inbox that the reply
// will not come and why, as an LLM waiter is released and told.
func TestOperatorToldWhenItsReplyCannotCome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bubbleBed(t, nil)
		b.sc.onAgent("manager", SkillSendMessage, func(context.Context, *ExecInput) *Output {
			return &Output{Err: errors.New("the answer has no <send_message> block")}
		})
		if _, err := b.sys.HumanSend(b.op(), HumanMessage{TaskID: b.sys.BaseTaskID(), Receiver: []string{b.mgr()},
			Content: "How many tasks are running?", NeedReply: true, Waiting: true}); err != nil {
			t.Fatal(err)
		}
		b.until("the operator to be told the manager cannot answer", time.Minute, func() bool {
			in, err := b.sys.Inbox(b.op())
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range in {
				if e.SenderID == SystemSender && strings.Contains(e.Content, "[No reply coming]") {
					if !strings.Contains(e.Content, b.mgr()) || !strings.Contains(e.Content, "no <send_message> block") {
						t.Errorf("the notice names neither the manager nor the reason: %s", e.Content)
					}
					return true
				}
			}
			return false
		})
	})
}
