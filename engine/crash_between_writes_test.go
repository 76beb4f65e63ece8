package engine

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// freezeStore is a MemoryStore that takes no more writes from the first
// agent document or message a freeze function matches on (that one
// included): its image is what a crash right before that write leaves in
// a durable store.
type freezeStore struct {
	*MemoryStore
	freezeAgent   func(*AgentState) bool
	freezeMessage func(*Message) bool
	// freezeTask, and after, freeze the store right after the task
	// document it matches, or, with after, the agent document
	// freezeAgent matches, is taken: a crash right after that write.
	freezeTask func(*TaskState) bool
	after      bool
	// beforePut, when set, is called before an agent document is
	// written, and afterPut once one is stored, outside the store's lock:
	// a test holds a write in beforePut until afterPut saw another.
	beforePut, afterPut func(*AgentState)

	mu     sync.Mutex
	frozen bool
	froze  chan struct{}
}

func newFreezeStore() *freezeStore {
	return &freezeStore{MemoryStore: NewMemoryStore(), froze: make(chan struct{}),
		freezeAgent: func(*AgentState) bool { return false }, freezeMessage: func(*Message) bool { return false },
		freezeTask: func(*TaskState) bool { return false }}
}

// freezeAt sets what freezes the store (nil: nothing of that kind).
func (f *freezeStore) freezeAt(agent func(*AgentState) bool, message func(*Message) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if agent != nil {
		f.freezeAgent = agent
	}
	if message != nil {
		f.freezeMessage = message
	}
}

// take reports whether a write still goes to the store; match says
// whether this write freezes it.
func (f *freezeStore) take(match bool) bool {
	if !f.frozen && match {
		f.frozen = true
		close(f.froze)
	}
	return !f.frozen
}

func (f *freezeStore) PutTask(ctx context.Context, t *TaskState) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.take(false) {
		return nil
	}
	err := f.MemoryStore.PutTask(ctx, t)
	f.take(f.freezeTask(t))
	return err
}

// hookPuts sets beforePut and afterPut.
func (f *freezeStore) hookPuts(before, after func(*AgentState)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.beforePut, f.afterPut = before, after
}

func (f *freezeStore) PutAgent(ctx context.Context, a *AgentState) error {
	f.mu.Lock()
	before, after := f.beforePut, f.afterPut
	f.mu.Unlock()
	if before != nil {
		before(a)
	}
	stored, err := f.putAgent(ctx, a)
	if stored && err == nil && after != nil {
		after(a)
	}
	return err
}

// putAgent writes the document unless the store is frozen, and reports
// whether it did.
func (f *freezeStore) putAgent(ctx context.Context, a *AgentState) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	match := f.freezeAgent(a)
	if !f.take(match && !f.after) {
		return false, nil
	}
	err := f.MemoryStore.PutAgent(ctx, a)
	f.take(match && f.after)
	return true, err
}

func (f *freezeStore) PutMessage(ctx context.Context, m *Message) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.take(f.freezeMessage(m)) {
		return nil
	}
	return f.MemoryStore.PutMessage(ctx, m)
}

// newFreezeBed starts a testbed on a freezeStore and returns, with them,
// restart: once the store froze, it closes the testbed's System and
// starts another from the store's image, as a restart after a crash at
// that write would.
func newFreezeBed(t *testing.T) (b *testbed, store *freezeStore, restart func() (*testbed, *Image)) {
	t.Helper()
	return freezeBedWith(t, nil)
}

// freezeBedWith is newFreezeBed with a change of the Config first.
func freezeBedWith(t *testing.T, mod func(*Config)) (b *testbed, store *freezeStore, restart func() (*testbed, *Image)) {
	t.Helper()
	b, store, cfg := frozenBed(t, mod)
	restart = func() (*testbed, *Image) {
		t.Helper()
		img := crashed(t, b, store)
		return restartFrom(t, cfg, img, b.sc), img
	}
	return b, store, restart
}

// frozenBed starts a testbed on a freezeStore, with a change of the
// Config first, and returns the Config it runs on.
func frozenBed(t *testing.T, mod func(*Config)) (*testbed, *freezeStore, Config) {
	t.Helper()
	store := newFreezeStore()
	var cfg Config
	b := newTestbed(t, func(c *Config) {
		c.Store = store
		if mod != nil {
			mod(c)
		}
		cfg = *c
	})
	return b, store, cfg
}

// crash freezes the store now: what it holds is what a crash at this
// point leaves.
func (f *freezeStore) crash() {
	f.mu.Lock()
	f.take(true)
	f.mu.Unlock()
}

// crashed waits until the store froze, closes the testbed's System and
// returns the store's image: what a restart after the crash finds.
func crashed(t *testing.T, b *testbed, store *freezeStore) *Image {
	t.Helper()
	select {
	case <-store.froze:
	case <-time.After(20 * time.Second):
		t.Fatalf("no write froze the store\n%s", b.dump())
	}
	b.sub.Close()
	_ = b.sys.Close()
	img, err := store.MemoryStore.Image()
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// restartFrozen is restartFrom on a freezeStore that holds img already: a
// crash of the restarted MAS (crash, crashed) leaves what a durable store
// would, the image and what was written since, the restore's own writes
// included.
func restartFrozen(t *testing.T, cfg Config, img *Image, sc *script) (*testbed, *freezeStore) {
	t.Helper()
	store := newFreezeStore()
	ctx := context.Background()
	for i := range img.Tasks {
		if err := store.MemoryStore.PutTask(ctx, &img.Tasks[i]); err != nil {
			t.Fatal(err)
		}
	}
	for i := range img.Agents {
		if err := store.MemoryStore.PutAgent(ctx, &img.Agents[i]); err != nil {
			t.Fatal(err)
		}
	}
	for i := range img.Messages {
		if err := store.MemoryStore.PutMessage(ctx, &img.Messages[i]); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Store = store
	return startFrom(t, cfg, img, sc), store
}

// crashIn runs a step of skill, answered with ask, and restarts the MAS
// as a crash would at one of two writes: the one that marks the step done
// (its effects, wait and message, are stored; its end is not), or, with
// lost, the one of the message it sends (its wait is stored, its message
// is not). It returns the new testbed, the asker's ID and the step's.
func crashIn(t *testing.T, skill string, lost bool, ask func(in *ExecInput, peer string) *Output) (*testbed, string, string) {
	t.Helper()
	var stepID atomic.Value
	b, store, restart := newFreezeBed(t)
	if lost {
		store.freezeAt(nil, func(m *Message) bool {
			id, _ := stepID.Load().(string)
			return id != "" && (m.MessageID == derivedID(id, "send") || m.MessageID == derivedID(id, "ask_answer"))
		})
	} else {
		store.freezeAt(func(a *AgentState) bool {
			id, _ := stepID.Load().(string)
			for _, s := range a.AgentStep.StepList {
				if s.StepID == id && (s.ExecutionState == StateFinished || s.ExecutionState == StateFailed) {
					return true
				}
			}
			return false
		}, nil)
	}
	asker, peer := b.newAgent("asker"), b.newAgent("peer")
	b.sc.onText("ask", func(_ context.Context, in *ExecInput) *Output {
		stepID.Store(in.Step.StepID)
		return ask(in, peer)
	})
	b.sc.onAgent("peer", SkillSendMessage, func(context.Context, *ExecInput) *Output {
		return &Output{SendMessage: &OutgoingMessage{Message: "the answer"}}
	})
	task := b.newTask("crash", asker, peer)
	b.inject(asker, task, NoRelative, false, spec(skill, "ask"))
	b2, img := restart()
	id := stepID.Load().(string)
	for _, a := range img.Agents {
		for _, st := range a.AgentStep.StepList {
			if st.StepID == id && st.ExecutionState != StateRunning {
				t.Fatalf("stored step %s: %s, want running (the crash came before its end)", id, st.ExecutionState)
			}
		}
		if lost && a.AgentID == asker && len(a.StepLock) == 0 {
			t.Fatalf("stored asker: no wait engaged, want the step's wait (the crash came after it)")
		}
	}
	return b2, asker, id
}

func askPeer(_ *ExecInput, peer string) *Output {
	return &Output{SendMessage: &OutgoingMessage{Receiver: StringList{peer}, Message: "the question", NeedReply: true, Waiting: true}}
}

func askInfo(*ExecInput, string) *Output {
	return &Output{AskInfo: &AskInfoQuery{Type: QueryAllAgents}}
}

// A send_message step that waits for the answer, interrupted by a crash
// after its message (and its wait) were stored but before it was marked
// finished, runs again after the restart: it must not engage its wait a
// second time (one answer releases one entry), nor engage it again once
// the answer came, or the agent stays blocked until the wait timeout.
func TestRerunSendMessageWaitsOnce(t *testing.T) {
	for range 20 { // the answer and the re-run race; both orders must work
		b, asker, step := crashIn(t, SkillSendMessage, false, askPeer)
		b.waitFor("the asker's step to end and its wait to be released", func() bool {
			return b.stepDone(asker, step) && len(b.agent(asker).StepLock) == 0 &&
				len(b.steps(asker, func(s StepState) bool { return s.Executor == SkillProcessMessage })) == 1
		})
	}
}

// The same for ask_info, whose answer comes from the engine itself.
func TestRerunAskInfoWaitsOnce(t *testing.T) {
	for range 20 {
		b, asker, step := crashIn(t, SkillAskInfo, false, askInfo)
		b.waitFor("the asker's step to end and its wait to be released", func() bool {
			return b.stepDone(asker, step) && len(b.agent(asker).StepLock) == 0
		})
	}
}

// A crash after a waiting step's wait was stored but before its message
// was: the restored wait would block the step's re-run, the only thing
// that can send the message; the restart drops it and the re-run waits
// anew.
func TestRerunAfterLostMessageIsNotBlockedByItsWait(t *testing.T) {
	for _, tc := range []struct {
		skill string
		ask   func(*ExecInput, string) *Output
	}{{SkillSendMessage, askPeer}, {SkillAskInfo, askInfo}} {
		t.Run(tc.skill, func(t *testing.T) {
			b, asker, step := crashIn(t, tc.skill, true, tc.ask)
			b.waitFor("the asker's step to end and its wait to be released", func() bool {
				return b.stepDone(asker, step) && len(b.agent(asker).StepLock) == 0 &&
					len(b.steps(asker, func(s StepState) bool { return s.Executor == SkillProcessMessage })) == 1
			})
		})
	}
}

// twoStageTask starts a task of two stages for two agents on b; the
// second stage starts when the operator finishes the first.
func twoStageTask(b *testbed) (task string, stages []string, agents []string) {
	agents = []string{b.newAgent("one"), b.newAgent("two")}
	task = b.newTask("two stages", agents...)
	alloc := map[string]string{agents[0]: "part one", agents[1]: "part two"}
	stages = b.addStages(task, StageSpec{StageIntention: "first", AgentAllocation: alloc}, StageSpec{StageIntention: "second", AgentAllocation: alloc})
	return task, stages, agents
}

// summarised reports whether every agent of a stage submitted its summary.
func summarised(b *testbed, task, stage string) bool {
	st, ok := b.sys.Task(task)
	if !ok {
		return false
	}
	for _, s := range st.StageList {
		if s.StageID == stage {
			return len(s.CompletionSummary) == len(s.AgentAllocation)
		}
	}
	return false
}

// A crash after a finish_stage was stored (the next stage running) but
// before the next stage's start_stage instructions were: the restart sends
// them, and the next stage's agents do their part.
func TestRestoreSendsLostStageStart(t *testing.T) {
	b, store, restart := newFreezeBed(t)
	task, stages, _ := twoStageTask(b)
	store.freezeAt(nil, func(m *Message) bool {
		return m.Instruction != nil && m.Instruction.StartStage != nil && m.Instruction.StartStage.StageID == stages[1]
	})
	b.waitFor("the first stage's summaries", func() bool { return summarised(b, task, stages[0]) })
	if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionFinishStage, TaskID: task, StageID: stages[0]}); err != nil {
		t.Fatal(err)
	}
	b, _ = restart()
	b.waitFor("the second stage's summaries", func() bool { return summarised(b, task, stages[1]) })
}

// A crash after the last summary of a stage was stored (and its step
// marked finished) but before the manager's notice was: the restart sends
// it, so the manager learns the stage is done.
func TestRestoreSendsLostStageCompleteNotice(t *testing.T) {
	b, store, restart := newFreezeBed(t)
	store.freezeAt(nil, func(m *Message) bool { return m.MessageID == derivedID(m.StageRelative, "complete") })
	task, stages, _ := twoStageTask(b)
	notice := derivedID(stages[0], "complete")
	b, _ = restart()
	b.waitFor("the manager to take the notice", func() bool {
		return slices.Contains(b.agent(b.mgr()).Received, notice) &&
			slices.ContainsFunc(b.task(task).SharedConversationPool, func(m Message) bool { return m.MessageID == notice })
	})
}

// A crash after a task ended but before its finish_task instructions were
// stored: the restart sends them to the whole group.
func TestRestoreSendsLostFinishTask(t *testing.T) {
	b, store, restart := newFreezeBed(t)
	task, _, agents := twoStageTask(b)
	store.freezeAt(nil, func(m *Message) bool { return m.Instruction != nil && m.Instruction.FinishTask != nil })
	if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionFinishTask, TaskID: task, Summary: "ended early"}); err != nil {
		t.Fatal(err)
	}
	b, _ = restart()
	b.waitFor("every member to take its finish_task", func() bool {
		for _, id := range append([]string{b.mgr()}, agents...) {
			if !slices.Contains(b.agent(id).Received, derivedID("finish_task/"+task, id)) {
				return false
			}
		}
		return true
	})
	for _, id := range agents {
		if n := len(b.steps(id, func(s StepState) bool { return s.TaskID == task })); n != 0 {
			t.Errorf("agent %s keeps %d steps of the ended task", id, n)
		}
	}
}

// A crash after an operator's add_task stored the task but before any of
// its instructions were: the restart sends them, so the manager staffs and
// stages the task and every member knows it.
func TestRestoreSendsLostStartTask(t *testing.T) {
	b, store, restart := newFreezeBed(t)
	base := b.sys.BaseTaskID()
	store.freezeAt(nil, func(m *Message) bool { return m.Instruction != nil && m.TaskID != base })
	task, err := b.sys.AddTask(b.op(), AddTaskRequest{TaskName: "lost start", TaskIntention: "Get going after a crash."})
	if err != nil {
		t.Fatal(err)
	}
	b, _ = restart()
	b.waitFor("the manager to plan the task", func() bool {
		return slices.Contains(b.agent(b.mgr()).Received, derivedID("start_task/"+task, b.mgr())) &&
			len(b.steps(b.mgr(), func(s StepState) bool { return s.TaskID == task && s.Executor == SkillPlanning })) == 1
	})
	for _, id := range []string{b.mgr(), b.op()} {
		if _, ok := b.agent(id).WorkingMemory[task]; !ok {
			t.Errorf("agent %s's working memory lacks the task", id)
		}
	}
}

// summaryReport reports whether a stored agent document holds, with its
// step reports, the completion of its summary step.
func summaryReport(a *AgentState) bool {
	return slices.ContainsFunc(a.Reports, func(r StepReport) bool { return r.Completion != nil })
}

// TestCrashAfterAStepsEndBeforeItsTaskLearnsIt: a step's end is stored with
// the report its task takes from it, and the task stores the report next.
// A crash between the two writes (here after the summary's end, before its
// task stored the completion) loses nothing: the restart gives the task
// the report, the stage completes, and the manager is told.
func TestCrashAfterAStepsEndBeforeItsTaskLearnsIt(t *testing.T) {
	b, store, restart := newFreezeBed(t)
	store.after = true
	store.freezeAt(summaryReport, nil)
	alice := b.newAgent("alice")
	id := b.newTask("report", alice)
	b.addStages(id, StageSpec{StageIntention: "collect", AgentAllocation: map[string]string{alice: "collect facts"}})
	b2, img := restart()
	for _, ts := range img.Tasks {
		if ts.TaskID == id && ts.StageList[0].CompletionSummary[alice] != "" {
			t.Fatal("the stored task has the completion: the crash came after the task's write, not before")
		}
	}
	b2.waitFor("the restored task to take the stored completion", func() bool {
		st := b2.task(id).StageList[0]
		return st.CompletionSummary[alice] == "done by alice" && st.EveryAgentState[alice] == AgentFinished
	})
	b2.waitFor("the manager to be told the stage completed", func() bool {
		mgr := b2.agent(b2.mgr())
		return slices.Contains(mgr.Received, derivedID(b2.task(id).StageList[0].StageID, "complete"))
	})
}

// TestReplayedReportIsTakenOnce: a crash after the task stored a report,
// before the agent's document dropped it, leaves the report in both; the
// restart does not give it to the task a second time.
func TestReplayedReportIsTakenOnce(t *testing.T) {
	b, store, restart := newFreezeBed(t)
	store.freezeTask = func(ts *TaskState) bool {
		st := ts.StageList
		return len(st) > 0 && st[0].CompletionSummary != nil && st[0].CompletionSummary[b.agentNamed("alice")] != ""
	}
	alice := b.newAgent("alice")
	b.sc.onAgent("alice", SkillSummary, func(context.Context, *ExecInput) *Output {
		done := "done"
		return &Output{Completion: &done, Usage: Usage{TotalTokens: 7, Calls: 1}}
	})
	id := b.newTask("report", alice)
	b.addStages(id, StageSpec{StageIntention: "collect", AgentAllocation: map[string]string{alice: "collect facts"}})
	b2, img := restart()
	var step string
	for _, a := range img.Agents {
		for _, r := range a.Reports {
			if a.AgentID == alice && r.Completion != nil {
				step = r.StepID
			}
		}
	}
	if step == "" {
		t.Fatal("the stored agent has no report of its summary: the crash came after it was dropped")
	}
	b2.settle()
	n := 0
	for _, si := range b2.task(id).SharedInfoPool {
		if si.StepID == step {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the summary's report is in the task %d times, want once", n)
	}
	if u := b2.task(id).Usage; u.TotalTokens != 7 || u.Calls != 1 {
		t.Errorf("task usage %+v, want the summary's 7 tokens in 1 call, counted once", u)
	}
}
