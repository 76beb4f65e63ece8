package engine

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
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

// payloadStore is a MemoryStore that refuses any document or message over
// a size, as NATS refuses a message over its max_payload (1 MiB).
type payloadStore struct {
	*MemoryStore
	max     int
	refused atomic.Int32
}

var errMaxPayload = errors.New("nats: maximum payload exceeded")

func (s *payloadStore) check(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > s.max {
		s.refused.Add(1)
		return errMaxPayload
	}
	return nil
}

func (s *payloadStore) PutTask(ctx context.Context, t *TaskState) error {
	// The conversation is stored as messages, not in the document (as
	// the durable store does).
	doc := *t
	doc.SharedConversationPool = nil
	if err := s.check(&doc); err != nil {
		return err
	}
	return s.MemoryStore.PutTask(ctx, t)
}

func (s *payloadStore) PutAgent(ctx context.Context, a *AgentState) error {
	if err := s.check(a); err != nil {
		return err
	}
	return s.MemoryStore.PutAgent(ctx, a)
}

func (s *payloadStore) PutMessage(ctx context.Context, m *Message) error {
	if err := s.check(m); err != nil {
		return err
	}
	return s.MemoryStore.PutMessage(ctx, m)
}

// TestBigSummaryIsStoredAsSeen: a 2 MB summary is bounded as it is taken
// in, so the store takes it; what a restart (after a crash: no Close)
// reads back is what clients read before.
func TestBigSummaryIsStoredAsSeen(t *testing.T) {
	st := &payloadStore{MemoryStore: NewMemoryStore(), max: 1 << 20}
	var cfg Config
	b := newTestbed(t, func(c *Config) { c.Store = st; cfg = *c })
	alice := b.newAgent("alice")
	huge := strings.Repeat("fact ", 400_000) // 2 MB
	b.sc.onAgent("alice", SkillSummary, func(context.Context, *ExecInput) *Output { return &Output{Completion: &huge} })
	b.sc.onAgent("alice", SkillThink, func(context.Context, *ExecInput) *Output {
		return &Output{Result: map[string]any{"think": huge}}
	})
	b.sc.onAgent("alice", SkillPlanning, func(context.Context, *ExecInput) *Output {
		return &Output{AddSteps: []StepSpec{spec(SkillThink, "think hard")}}
	})
	id := b.newTask("report", alice)
	stages := b.addStages(id, StageSpec{StageIntention: "collect", AgentAllocation: map[string]string{alice: "collect facts"}})
	b.waitFor("alice's summary", func() bool {
		_, ok := b.stage(id, stages[0]).CompletionSummary[alice]
		return ok
	})
	b.settle()
	seenTask, seenAgent := b.task(id), b.agent(alice)
	summary := seenTask.StageList[0].CompletionSummary[alice]
	if !strings.Contains(summary, "characters dropped") || len(summary) > 100_000 {
		t.Fatalf("summary of %d bytes, want it bounded with a note", len(summary))
	}
	if n := st.refused.Load(); n != 0 {
		t.Errorf("the store refused %d writes", n)
	}

	img, err := st.Image()
	if err != nil {
		t.Fatal(err)
	}
	r := restartFrom(t, cfg, img, b.sc)
	gotTask, gotAgent := r.task(id), r.agent(alice)
	if got := gotTask.StageList[0].CompletionSummary[alice]; got != summary {
		t.Errorf("restored summary differs from the one clients saw (%d vs %d bytes)", len(got), len(summary))
	}
	results := func(a AgentState) map[string]any {
		out := map[string]any{}
		for _, s := range a.AgentStep.StepList {
			out[s.StepID] = jsonNorm(t, []any{s.ExecutionState, s.ExecuteResult})
		}
		return out
	}
	if diff := cmp.Diff(results(seenAgent), results(gotAgent)); diff != "" {
		t.Errorf("restored steps differ from what clients saw (-seen +restored):\n%s", diff)
	}
}

// refuseAgentStore refuses the agent documents refuse matches.
type refuseAgentStore struct {
	*MemoryStore
	refuse func(*AgentState) bool
}

func (s *refuseAgentStore) PutAgent(ctx context.Context, a *AgentState) error {
	if s.refuse(a) {
		return errMaxPayload
	}
	return s.MemoryStore.PutAgent(ctx, a)
}

// TestRefusedOutcomeFailsTheStepVisibly: a step result the store refuses
// is taken back; the step fails with the reason, and memory equals the
// store.
func TestRefusedOutcomeFailsTheStepVisibly(t *testing.T) {
	const marker = "UNSTORABLE"
	st := &refuseAgentStore{MemoryStore: NewMemoryStore(), refuse: func(a *AgentState) bool {
		for _, s := range a.AgentStep.StepList {
			if r, _ := s.ExecuteResult["think"].(string); r == marker {
				return true
			}
		}
		return false
	}}
	b := newTestbed(t, func(c *Config) { c.Store = st })
	alice := b.newAgent("alice")
	b.sc.onAgent("alice", SkillThink, func(context.Context, *ExecInput) *Output {
		return &Output{Result: map[string]any{"think": marker}}
	})
	b.sc.onAgent("alice", SkillPlanning, func(context.Context, *ExecInput) *Output {
		return &Output{AddSteps: []StepSpec{spec(SkillThink, "think")}}
	})
	id := b.newTask("report", alice)
	b.addStages(id, StageSpec{StageIntention: "collect", AgentAllocation: map[string]string{alice: "collect facts"}})
	var think StepState
	b.waitFor("the think step to end", func() bool {
		steps := b.steps(alice, func(s StepState) bool { return s.Executor == SkillThink })
		if len(steps) == 1 && steps[0].ExecutionState == StateFailed {
			think = steps[0]
			return true
		}
		return false
	})
	if e, _ := think.ExecuteResult["error"].(string); !strings.Contains(e, "could not be stored") || !strings.Contains(e, "maximum payload") {
		t.Errorf("think step error %q, want the store's refusal", e)
	}
	b.settle()
	stored, _ := st.Agent(alice)
	states := func(a AgentState) []string {
		var out []string
		for _, s := range a.AgentStep.StepList {
			out = append(out, s.StepID+":"+s.ExecutionState)
		}
		return out
	}
	if diff := cmp.Diff(states(stored), states(b.agent(alice))); diff != "" {
		t.Errorf("memory differs from the store (-stored +memory):\n%s", diff)
	}
}

// refuseTaskStore refuses the task documents refuse matches; onMessage,
// when set, sees each message before it is stored.
type refuseTaskStore struct {
	*MemoryStore
	mu        sync.Mutex
	refuse    func(*TaskState) bool
	onMessage func(*Message)
}

func (s *refuseTaskStore) PutMessage(ctx context.Context, m *Message) error {
	s.mu.Lock()
	on := s.onMessage
	s.mu.Unlock()
	if on != nil {
		on(m)
	}
	return s.MemoryStore.PutMessage(ctx, m)
}

// refuseWhen sets which task documents are refused from now on.
func (s *refuseTaskStore) refuseWhen(refuse func(*TaskState) bool) {
	s.mu.Lock()
	s.refuse = refuse
	s.mu.Unlock()
}

func (s *refuseTaskStore) PutTask(ctx context.Context, t *TaskState) error {
	s.mu.Lock()
	refuse := s.refuse != nil && s.refuse(t)
	s.mu.Unlock()
	if refuse {
		return errStoreDown
	}
	return s.MemoryStore.PutTask(ctx, t)
}

// TestRefusedTaskWriteIsNotAnnounced: a change of a task document that the
// store refuses (here the operator's cancel_task) fails the call with the
// store's reason, is never announced on the event bus, and leaves memory
// as the store holds it: the task still runs, and its members are not
// told it ended.
func TestRefusedTaskWriteIsNotAnnounced(t *testing.T) {
	st := &refuseTaskStore{MemoryStore: NewMemoryStore()}
	b := newTestbed(t, func(c *Config) { c.Store = st })
	alice := b.newAgent("alice")
	id := b.newTask("report", alice)
	b.settle()
	st.refuseWhen(func(ts *TaskState) bool { return ts.TaskID == id && ts.ExecutionState == StateFailed })
	sub := b.sys.Subscribe(1 << 12)
	defer sub.Close()
	before := b.sys.EventSeq()

	_, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionCancelTask, TaskID: id, Summary: "stop"})
	if err == nil || !strings.Contains(err.Error(), errStoreDown.Error()) {
		t.Fatalf("cancel_task: %v, want the store's refusal", err)
	}
	b.settle()
	seen := b.task(id)
	stored, ok := st.Task(id)
	if !ok {
		t.Fatal("the task is not in the store")
	}
	if seen.ExecutionState == StateFailed || seen.ExecutionState != stored.ExecutionState || seen.TaskSummary != stored.TaskSummary {
		t.Errorf("clients see the task %s (%q), the store holds %s (%q): want both as before the refused cancel",
			seen.ExecutionState, seen.TaskSummary, stored.ExecutionState, stored.TaskSummary)
	}
	after := b.sys.EventSeq()
	for seq := before; seq < after; {
		ev := <-sub.C
		seq = ev.Seq
		if ev.TaskID == id && (ev.Detail == StateFailed || ev.Kind == EventMessageDelivered) {
			t.Errorf("the refused end of the task was announced: %+v", ev)
		}
	}
	// Once the store takes writes again, the same cancel succeeds.
	st.refuseWhen(nil)
	if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionCancelTask, TaskID: id, Summary: "stop"}); err != nil {
		t.Fatalf("cancel_task after the store recovered: %v", err)
	}
	if got := b.task(id).ExecutionState; got != StateFailed {
		t.Errorf("task %s after the cancel, want failed", got)
	}
}

// TestBigMessageIsBoundedAtIngest: a 2 MB message an agent writes is
// bounded as it is taken in, with the note, so the store (which refuses
// anything over 1 MiB) takes it; a restart reads back the message clients
// saw.
func TestBigMessageIsBoundedAtIngest(t *testing.T) {
	st := &payloadStore{MemoryStore: NewMemoryStore(), max: 1 << 20}
	var cfg Config
	b := newTestbed(t, func(c *Config) { c.Store = st; cfg = *c })
	alice, bob := b.newAgent("alice"), b.newAgent("bob")
	huge := "HUGE " + strings.Repeat("word ", 400_000) // 2 MB
	b.sc.onAgent("alice", SkillPlanning, func(context.Context, *ExecInput) *Output {
		return &Output{AddSteps: []StepSpec{spec(SkillSendMessage, "tell bob everything")}}
	})
	b.sc.onText("tell bob everything", func(context.Context, *ExecInput) *Output {
		return &Output{SendMessage: &OutgoingMessage{Receiver: StringList{bob}, Message: huge}}
	})
	id := b.newTask("report", alice, bob)
	b.addStages(id, StageSpec{StageIntention: "talk", AgentAllocation: map[string]string{alice: "tell bob"}})
	var seen string
	b.waitFor("alice's message in the conversation", func() bool {
		for _, m := range b.task(id).SharedConversationPool {
			if strings.HasPrefix(m.Message, "HUGE ") {
				seen = m.Message
				return true
			}
		}
		return false
	})
	if !strings.Contains(seen, "characters dropped") || len(seen) > 100_000 {
		t.Fatalf("message of %d bytes, want it bounded with a note", len(seen))
	}
	b.settle()
	if n := st.refused.Load(); n != 0 {
		t.Errorf("the store refused %d writes", n)
	}
	img, err := st.Image()
	if err != nil {
		t.Fatal(err)
	}
	r := restartFrom(t, cfg, img, b.sc)
	var restored string
	for _, m := range r.task(id).SharedConversationPool {
		if strings.HasPrefix(m.Message, "HUGE ") {
			restored = m.Message
		}
	}
	if restored != seen {
		t.Errorf("restored message differs from the one clients saw (%d vs %d bytes)", len(restored), len(seen))
	}
}

// The task changes an operator or a manager makes (add_stage,
// finish_stage, retry_stage, add_task_participant) are stored before
// anyone is told: a refused one fails the call, and nobody is told of a
// stage or a group the store does not hold.

// TestRefusedAddStageIsNotDelivered: the store refuses the task document
// that holds the new stage. The operator's add_stage fails (as cancel_task
// does, TestRefusedTaskWriteIsNotAnnounced) and nobody is told to start a
// stage the store does not hold.
func TestRefusedAddStageIsNotDelivered(t *testing.T) {
	st := &refuseTaskStore{MemoryStore: NewMemoryStore()}
	b := newTestbed(t, func(c *Config) { c.Store = st })
	alice := b.newAgent("alice")
	id := b.newTask("report", alice)
	b.settle()
	st.refuseWhen(func(ts *TaskState) bool { return ts.TaskID == id && len(ts.StageList) > 0 })

	res, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionAddStage, TaskID: id,
		Stages: []StageSpec{{StageIntention: "collect", AgentAllocation: map[string]string{alice: "collect facts"}}}})
	if err != nil {
		if !strings.Contains(err.Error(), errStoreDown.Error()) {
			t.Errorf("add_stage failed with %v, want the store's refusal", err)
		}
		b.settle()
		if n := len(b.sc.callsOf("alice", SkillPlanning)); n != 0 {
			t.Errorf("add_stage failed (%v) but alice ran %d planning steps", err, n)
		}
		return
	}
	stageID := res.AddStage.StageIDs[0]
	b.settle()
	stored, _ := st.Task(id)
	seen := b.task(id)
	t.Errorf("add_stage reported success (stage %s) though the store refused it: the task holds %d stages in memory and %d in the store; alice's steps in it: %d",
		stageID, len(seen.StageList), len(stored.StageList),
		len(b.steps(alice, func(s StepState) bool { return s.StageID == stageID })))
}

// TestRefusedFinishStageIsNotDelivered: the store refuses the task
// document in which the first stage is finished. finish_stage fails, the
// agents stay in the first stage, and once the store takes writes again a
// repeated finish_stage starts the second stage with its agents told
// (were the refused finish delivered, the second stage's start_stage,
// carrying the same derived ID, would be taken as seen: the stage would
// run with nobody working in it).
func TestRefusedFinishStageIsNotDelivered(t *testing.T) {
	st := &refuseTaskStore{MemoryStore: NewMemoryStore()}
	b := newTestbed(t, func(c *Config) { c.Store = st })
	task, stages, agents := twoStageTask(b)
	b.waitFor("the first stage's summaries", func() bool { return summarised(b, task, stages[0]) })
	b.settle()
	st.refuseWhen(func(ts *TaskState) bool {
		for _, sg := range ts.StageList {
			if ts.TaskID == task && sg.StageID == stages[0] && sg.ExecutionState == StateFinished {
				return true
			}
		}
		return false
	})

	_, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionFinishStage, TaskID: task, StageID: stages[0]})
	if err == nil {
		t.Errorf("finish_stage reported success while the store refused it")
	}
	b.settle()
	if got := b.stage(task, stages[0]).ExecutionState; got != StateRunning {
		t.Fatalf("first stage %s, want it running (the refused finish withdrawn)", got)
	}
	for _, name := range []string{"one", "two"} {
		for _, c := range b.sc.callsOf(name, SkillPlanning) {
			if c.StageID == stages[1] {
				t.Errorf("%s was told to start stage %s, which the task holds as %s", name, stages[1], b.stage(task, stages[1]).ExecutionState)
			}
		}
	}
	if t.Failed() {
		return // the rest would wait for a stage its agents took as seen
	}

	// The store recovers; the operator finishes the first stage again.
	st.refuseWhen(nil)
	if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionFinishStage, TaskID: task, StageID: stages[0]}); err != nil {
		t.Fatalf("finish_stage after the store recovered: %v", err)
	}
	b.waitFor("the second stage's summaries", func() bool { return summarised(b, task, stages[1]) })
	sg := b.stage(task, stages[1])
	if len(sg.CompletionSummary) < len(agents) {
		t.Errorf("the second stage has %d of %d summaries", len(sg.CompletionSummary), len(agents))
	}
}

// TestRefusedRetryStageIsNotDelivered: the store refuses the task document
// that holds the retried stage. retry_stage fails, nobody is told to start
// the new stage, and the old one still runs.
func TestRefusedRetryStageIsNotDelivered(t *testing.T) {
	st := &refuseTaskStore{MemoryStore: NewMemoryStore()}
	b := newTestbed(t, func(c *Config) { c.Store = st })
	task, stages, agents := twoStageTask(b)
	b.waitFor("the first stage's summaries", func() bool { return summarised(b, task, stages[0]) })
	b.settle()
	st.refuseWhen(func(ts *TaskState) bool { return ts.TaskID == task && len(ts.StageList) > 2 })
	res, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionRetryStage, TaskID: task, OldStageID: stages[0],
		NewStageIntention: "again", NewAgentAllocation: map[string]string{agents[0]: "part one again"}})
	if err == nil {
		t.Fatalf("retry_stage reported success (new stage %s) while the store refused it", res.RetryStage.NewStage)
	}
	b.settle()
	if got := b.stage(task, stages[0]).ExecutionState; got != StateRunning {
		t.Errorf("first stage %s, want it running (the refused retry withdrawn)", got)
	}
	if n := len(b.task(task).StageList); n != 2 {
		t.Errorf("the task holds %d stages, want 2", n)
	}
	for _, c := range b.sc.callsOf("one", SkillPlanning) {
		if c.StageID != stages[0] {
			t.Errorf("one was told to start stage %s, which the store does not hold", c.StageID)
		}
	}
}

// TestRefusedParticipantIsNotTold: the store refuses the task document
// with the new participant. add_task_participant fails and the agent,
// not in the group the store holds, is not told to join.
func TestRefusedParticipantIsNotTold(t *testing.T) {
	st := &refuseTaskStore{MemoryStore: NewMemoryStore()}
	b := newTestbed(t, func(c *Config) { c.Store = st })
	alice, bob := b.newAgent("alice"), b.newAgent("bob")
	id := b.newTask("report", alice)
	b.settle()
	st.refuseWhen(func(ts *TaskState) bool { return ts.TaskID == id && slices.Contains(ts.TaskGroup, bob) })
	res, err := b.sys.AgentInstruction(b.op(), AgentInstruction{Action: ActionAddTaskParticipant, TaskID: id, Agents: StringList{bob}})
	if err == nil {
		t.Errorf("add_task_participant reported success (%+v) while the store refused it", res)
	}
	b.settle()
	if slices.Contains(b.task(id).TaskGroup, bob) {
		t.Error("bob is in the task group though the store refused it")
	}
	if _, ok := b.agent(bob).WorkingMemory[id]; ok {
		t.Error("bob was told to join the task: his working memory holds it")
	}
}

// TestRefusedShareFails: the store refuses the task document that shares
// the task with another operator. share_task fails, and that operator
// may not see the task (nothing was said it could).
func TestRefusedShareFails(t *testing.T) {
	st := &refuseTaskStore{MemoryStore: NewMemoryStore()}
	b := newTestbed(t, func(c *Config) { c.Store = st })
	alice := b.newAgent("alice")
	id := b.newTask("report", alice)
	other, err := b.sys.AddOperator("other")
	if err != nil {
		t.Fatal(err)
	}
	b.settle()
	st.refuseWhen(func(ts *TaskState) bool { return ts.TaskID == id && slices.Contains(ts.SharedWith, other) })
	if out, err := b.sys.ShareTask(b.op(), id, other); err == nil {
		t.Fatalf("share_task reported success (%v) while the store refused it", out)
	}
	if b.sys.Visible(other, id) {
		t.Error("the other operator sees the task whose share the store refused")
	}
	if got := b.task(id); slices.Contains(got.SharedWith, other) || slices.Contains(got.TaskGroup, other) {
		t.Errorf("after the refused share: shared_with %v, group %v", got.SharedWith, got.TaskGroup)
	}
}

// unreadableTaskStore refuses the task documents refuse matches and, while
// it does, every read of a task back (an outage: reads fail as writes do).
type unreadableTaskStore struct {
	refuseTaskStore
}

func (s *unreadableTaskStore) ReadTask(ctx context.Context, id string) (TaskState, error) {
	s.mu.Lock()
	down := s.refuse != nil
	s.mu.Unlock()
	if down {
		return TaskState{}, errStoreDown
	}
	return s.MemoryStore.ReadTask(ctx, id)
}

// TestRefusedAddStageDuringAnOutage: the store refuses the task document
// with the new stage and cannot be read either. add_stage fails, and the
// refused stage is gone, not kept to be stored by the task's next commit
// without anyone told to start it: once the store is back, the next
// add_stage's stage is the one that starts.
func TestRefusedAddStageDuringAnOutage(t *testing.T) {
	st := &unreadableTaskStore{refuseTaskStore{MemoryStore: NewMemoryStore()}}
	b := newTestbed(t, func(c *Config) { c.Store = st })
	alice := b.newAgent("alice")
	id := b.newTask("report", alice)
	b.settle()
	st.refuseWhen(func(ts *TaskState) bool { return ts.TaskID == id && len(ts.StageList) > 0 })
	if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionAddStage, TaskID: id,
		Stages: []StageSpec{{StageIntention: "refused", AgentAllocation: map[string]string{alice: "x"}}}}); err == nil {
		t.Fatal("add_stage reported success while the store refused it")
	}
	if n := len(b.task(id).StageList); n != 0 {
		t.Fatalf("the task holds %d stages after the refused add_stage, want 0", n)
	}
	st.refuseWhen(nil)
	stages := b.addStages(id, StageSpec{StageIntention: "collect", AgentAllocation: map[string]string{alice: "collect facts"}})
	b.waitFor("alice to plan the stage", func() bool {
		for _, c := range b.sc.since(0) {
			if c.Agent == "alice" && c.Skill == SkillPlanning && c.StageID == stages[0] {
				return true
			}
		}
		return false
	})
	got, err := st.MemoryStore.ReadTask(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.StageList) != 1 || got.StageList[0].StageID != stages[0] {
		t.Errorf("the store holds stages %+v, want only %s", got.StageList, stages[0])
	}
}

// refuseAgentsStore refuses every agent document while down is set, and
// counts the writes it refused.
type refuseAgentsStore struct {
	*MemoryStore
	down    atomic.Bool
	refused atomic.Int32
}

func (s *refuseAgentsStore) PutAgent(ctx context.Context, a *AgentState) error {
	if s.down.Load() {
		s.refused.Add(1)
		return errStoreDown
	}
	return s.MemoryStore.PutAgent(ctx, a)
}

func (s *refuseAgentsStore) ReadAgent(ctx context.Context, id string) (AgentState, error) {
	if s.down.Load() {
		return AgentState{}, errStoreDown
	}
	return s.MemoryStore.ReadAgent(ctx, id)
}

// TestRefusedAgentCreationLeavesNoGhost: creating an agent while the store
// refuses fails, and nothing writes that agent later: the refused agent
// schedules no retry of its commit (it does not exist), and the store does
// not hold it.
func TestRefusedAgentCreationLeavesNoGhost(t *testing.T) {
	st := &refuseAgentsStore{MemoryStore: NewMemoryStore()}
	b := newTestbed(t, func(c *Config) { c.Store = st })
	b.settle()
	st.down.Store(true)
	if _, err := b.sys.CreateAgent(AgentConfig{Template: "researcher", Name: "ghost"}); err == nil {
		t.Fatal("CreateAgent succeeded while the store refused it")
	}
	// The same creation, with the agent at hand to look at its owner.
	a := newAgentOwner(b.sys, AgentState{AgentID: newID(), Name: "ghost2", Kind: KindLLM,
		WorkingMemory: map[string]map[string][]string{}, PersistentMemory: map[string]string{}})
	if err := b.sys.enroll(a, false); err == nil {
		t.Fatal("enroll succeeded while the store refused it")
	}
	a.mu.Mutex.Lock()
	retry, closed := a.mu.retryTimer, a.mu.closed
	a.mu.Mutex.Unlock()
	if retry != nil || !closed {
		t.Errorf("the refused agent's owner: retry scheduled %v, closed %v; want no retry and closed", retry != nil, closed)
	}
	st.down.Store(false)
	img, err := st.MemoryStore.Image()
	if err != nil {
		t.Fatal(err)
	}
	for _, ag := range img.Agents {
		if strings.HasPrefix(ag.Name, "ghost") {
			t.Errorf("the refused agent %s is in the store", ag.Name)
		}
	}
}

// TestTaskOutageHoldsTheReportNotTheStep: while the store refuses a task's
// writes, a step of one of its agents still ends (its end is stored, with
// the report for the task); the task's write of the report is tried again,
// and the task shows nothing it has not stored. The agent's next step ends
// too but its report waits for the first. Once the store takes writes,
// the reports land in order and the stage completes: the outage paused the
// work, it lost nothing.
func TestTaskOutageHoldsTheReportNotTheStep(t *testing.T) {
	st := &refuseTaskStore{MemoryStore: NewMemoryStore()}
	b := newTestbed(t, func(c *Config) { c.Store = st })
	alice := b.newAgent("alice")
	b.sc.onAgent("alice", SkillPlanning, func(context.Context, *ExecInput) *Output {
		return &Output{AddSteps: []StepSpec{spec(SkillThink, "think")}}
	})
	id := b.newTask("report", alice)
	fromAlice := func(si SharedInfo) bool { return si.AgentID == alice }
	st.refuseWhen(func(ts *TaskState) bool { return ts.TaskID == id && slices.ContainsFunc(ts.SharedInfoPool, fromAlice) })
	b.addStages(id, StageSpec{StageIntention: "collect", AgentAllocation: map[string]string{alice: "collect facts"}})

	var held []StepReport
	b.waitFor("alice's planning and think steps to end, their reports stored with her", func() bool {
		stored, _ := st.Agent(alice)
		held = stored.Reports
		return len(held) == 2
	})
	steps := b.steps(alice, func(s StepState) bool { return s.TaskID == id })
	if len(steps) < 2 || steps[0].StepID != held[0].StepID || steps[1].StepID != held[1].StepID ||
		steps[0].ExecutionState != StateFinished || steps[1].ExecutionState != StateFinished {
		t.Fatalf("alice's steps %v, stored reports %v: want her planning and think steps finished, reported in order", steps, held)
	}
	if slices.ContainsFunc(b.task(id).SharedInfoPool, fromAlice) {
		t.Error("the task shows a report the store refused")
	}
	if stored, _ := st.Task(id); slices.ContainsFunc(stored.SharedInfoPool, fromAlice) {
		t.Error("the store holds a report it refused")
	}

	st.refuseWhen(nil)
	b.waitFor("the stage to complete", func() bool { return b.task(id).StageList[0].CompletionSummary[alice] != "" })
	b.settle()
	stored, _ := st.Task(id)
	var order []string
	for _, si := range stored.SharedInfoPool {
		if si.AgentID == alice {
			order = append(order, si.StepID)
		}
	}
	if len(order) < 2 || order[0] != held[0].StepID || order[1] != held[1].StepID {
		t.Errorf("the task stored alice's reports %v, want %s then %s first", order, held[0].StepID, held[1].StepID)
	}
}

// TestRefusedLastReportIsTriedAgain: the report of an agent's last step
// (its summary, which completes the stage) is refused by the store; no
// later change of the task would carry it, so the report's own writer
// tries again until the store takes it, and the stage completes.
func TestRefusedLastReportIsTriedAgain(t *testing.T) {
	st := &refuseTaskStore{MemoryStore: NewMemoryStore()}
	b := newTestbed(t, func(c *Config) { c.Store = st })
	alice := b.newAgent("alice")
	id := b.newTask("report", alice)
	completed := func(ts *TaskState) bool {
		return ts.TaskID == id && len(ts.StageList) > 0 && ts.StageList[0].CompletionSummary[alice] != ""
	}
	refused := make(chan struct{})
	var once sync.Once
	st.refuseWhen(func(ts *TaskState) bool {
		if completed(ts) {
			once.Do(func() { close(refused) })
			return true
		}
		return false
	})
	var early atomic.Bool
	st.onMessage = func(m *Message) {
		if stored, _ := st.MemoryStore.Task(id); m.SenderID == SystemSender && m.Receiver[0] == b.mgr() && !completed(&stored) &&
			len(stored.StageList) > 0 && m.MessageID == derivedID(stored.StageList[0].StageID, "complete") {
			early.Store(true)
		}
	}
	b.addStages(id, StageSpec{StageIntention: "collect", AgentAllocation: map[string]string{alice: "collect facts"}})
	<-refused
	b.waitFor("alice to finish her part", func() bool {
		stored, _ := st.Agent(alice)
		return slices.ContainsFunc(stored.Reports, func(r StepReport) bool { return r.Completion != nil })
	})
	if ts := b.task(id); completed(&ts) {
		t.Error("the task shows a completion the store refused")
	}
	st.refuseWhen(nil)
	b.waitFor("the stage to complete", func() bool { ts := b.task(id); return completed(&ts) })
	if stored, _ := st.Task(id); !completed(&stored) {
		t.Error("the completion is shown but not stored")
	}
	b.waitFor("the manager to be told", func() bool {
		stored, _ := st.Task(id)
		return slices.Contains(b.agent(b.mgr()).Received, derivedID(stored.StageList[0].StageID, "complete"))
	})
	if early.Load() {
		t.Error("the manager was told the stage completed before the task stored the completion")
	}
}

// TestStoreRefusingReportsTellsTheOperator: when the store keeps refusing a
// task's writes past the first retries, the agent waiting for its report
// to be stored is not left waiting with only a log line: the task's
// operator is told why its agents wait, once (whichever agents' reports
// wait).
func TestStoreRefusingReportsTellsTheOperator(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &refuseTaskStore{MemoryStore: NewMemoryStore()}
		b := newTestbed(t, func(c *Config) { c.Store = st })
		alice := b.newAgent("alice")
		id := b.newTask("report", alice)
		st.refuseWhen(func(ts *TaskState) bool {
			return ts.TaskID == id && slices.ContainsFunc(ts.SharedInfoPool, func(si SharedInfo) bool { return si.AgentID == alice })
		})
		b.addStages(id, StageSpec{StageIntention: "collect", AgentAllocation: map[string]string{alice: "collect facts"}})
		told := func() int {
			entries, err := b.sys.Inbox(b.op())
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, e := range entries {
				if strings.Contains(e.Content, "[Store refusing writes]") && strings.Contains(e.Content, id) {
					n++
				}
			}
			return n
		}
		b.until("the operator to be told the store refuses the task's writes", time.Minute, func() bool { return told() > 0 })
		if n := told(); n != 1 {
			t.Errorf("the operator was told %d times, want once", n)
		}
		st.refuseWhen(nil)
		b.until("the stage to complete once the store takes writes", time.Minute, func() bool {
			return b.task(id).StageList[0].CompletionSummary[alice] != ""
		})
	})
}

// TestOperatorKeepsMessagesThroughARefusedWrite: while the store refuses
// the operator's document, a message another operator sends it, and one it
// sends itself, are stored and delivered: they stay in its conversations
// (its inbox, its record of what it sent) and are written once the store
// takes the document again — not withdrawn and lost.
func TestOperatorKeepsMessagesThroughARefusedWrite(t *testing.T) {
	var refusing atomic.Bool
	var op string
	st := &refuseAgentStore{MemoryStore: NewMemoryStore(), refuse: func(a *AgentState) bool {
		return refusing.Load() && a.AgentID == op
	}}
	b := newTestbed(t, func(c *Config) { c.Store = st })
	op = b.op()
	bea, err := b.sys.AddOperator("bea")
	if err != nil {
		t.Fatal(err)
	}
	base := b.sys.BaseTaskID()
	refusing.Store(true)
	in, err := b.sys.HumanSend(bea, HumanMessage{TaskID: base, Receiver: []string{op}, Content: "to the operator"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := b.sys.HumanSend(op, HumanMessage{TaskID: base, Receiver: []string{bea}, Content: "from the operator"})
	if err != nil {
		t.Fatal(err)
	}
	has := func(a AgentState, id string) bool {
		for _, msgs := range a.ConversationPool.ConversationPrivates {
			if slices.ContainsFunc(msgs, func(p PrivateMessage) bool { return p.MessageID == id }) {
				return true
			}
		}
		return false
	}
	refusing.Store(false)
	// The owner's retries write the document (the first after 50 ms);
	// readers see it once stored.
	b.waitFor("the operator's conversations to show both messages", func() bool {
		a := b.agent(op)
		return has(a, in[0].MessageID) && has(a, out[0].MessageID)
	})
	img, err := st.Image()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range img.Agents {
		if a.AgentID == op && (!has(a, in[0].MessageID) || !has(a, out[0].MessageID)) {
			t.Errorf("the operator's stored conversations lost a message sent while its writes were refused (received: %v, sent: %v)",
				has(a, in[0].MessageID), has(a, out[0].MessageID))
		}
	}
}

// TestManyLongSummariesKeepTheTaskWritable: a task whose stages each end
// with a long completion summary stays within the store's limit: past
// MaxDocumentBytes (its shared info gone) the summaries of its oldest
// ended stages are shortened, so its writes are taken and the newest
// stage's summary is whole. A summary of control characters (each
// written as six bytes, \u0001) is bounded by its stored size.
func TestManyLongSummariesKeepTheTaskWritable(t *testing.T) {
	for _, c := range []struct{ name, long string }{
		{"words", strings.Repeat("finding ", 1500)},          // 12,000 bytes
		{"control characters", strings.Repeat("\x01", 2000)}, // 12,000 bytes stored
	} {
		t.Run(c.name, func(t *testing.T) { longSummariesKeepTheTaskWritable(t, c.long) })
	}
}

func longSummariesKeepTheTaskWritable(t *testing.T, long string) {
	const docBound, stages = 40_000, 6
	st := &payloadStore{MemoryStore: NewMemoryStore(), max: docBound * 3 / 2}
	b := newTestbed(t, func(c *Config) { c.Store = st; c.MaxDocumentBytes = docBound })
	alice := b.newAgent("alice")
	b.sc.onAgent("alice", SkillSummary, func(context.Context, *ExecInput) *Output { return &Output{Completion: &long} })
	id := b.newTask("report", alice)
	var ids []string
	for i := range stages {
		sg := b.addStages(id, StageSpec{StageIntention: "stage " + strconv.Itoa(i), AgentAllocation: map[string]string{alice: "collect"}})[0]
		ids = append(ids, sg)
		b.waitFor("alice's summary", func() bool { _, ok := b.stage(id, sg).CompletionSummary[alice]; return ok })
		if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionFinishStage, TaskID: id, StageID: sg}); err != nil {
			t.Fatal(err)
		}
	}
	b.settle()
	if n := st.refused.Load(); n != 0 {
		t.Errorf("the store refused %d writes", n)
	}
	if got := b.stage(id, ids[0]).CompletionSummary[alice]; len(got) >= len(long) {
		t.Errorf("the oldest stage's summary is %d bytes: not shortened", len(got))
	}
	if got := b.stage(id, ids[stages-1]).CompletionSummary[alice]; got != long {
		t.Errorf("the newest stage's summary is %d bytes, want it whole (%d)", len(got), len(long))
	}
}
