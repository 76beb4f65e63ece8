package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// Store outages pause the work, never destroy it (docs/engine.md,
// Liveness): a change nobody can fail visibly is kept through the outage
// and committed once the store is back, the agent starts no step
// meanwhile, and every wait still ends.

// outageAgentStore refuses every write of one agent's document while down
// is set (a store outage longer than the store's retries); after (when
// set) may end the outage right after a refused write.
type outageAgentStore struct {
	*MemoryStore
	agent   string
	down    atomic.Bool
	refused atomic.Int32 // writes of the agent's document refused
	mu      sync.Mutex
	after   func(*AgentState) bool // ends the outage once it returns true
}

func (s *outageAgentStore) PutAgent(ctx context.Context, a *AgentState) error {
	if s.down.Load() && a.AgentID == s.agent {
		s.refused.Add(1)
		s.mu.Lock()
		if s.after != nil && s.after(a) {
			s.down.Store(false)
		}
		s.mu.Unlock()
		return errStoreDown
	}
	return s.MemoryStore.PutAgent(ctx, a)
}

// TestRefusedExpiryStillEndsTheWait: alice waits for the operator's
// answer. Its deadline passes while the store refuses alice's document,
// and the outage ends right after the expiry's write is refused. The
// wait must not be left without a timer (the deadline has passed, nobody
// was told, and supervision counts the task busy while it holds a
// step-lock entry): alice is told no reply came once the store is back.
func TestRefusedExpiryStillEndsTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &outageAgentStore{MemoryStore: NewMemoryStore()}
		b := bubbleBed(t, func(c *Config) {
			c.Store = st
			c.WaitTimeout = 300 * time.Millisecond
		})
		op := b.op()
		alice := b.newAgent("alice")
		b.join(b.sys.BaseTaskID(), alice)
		st.agent = alice
		// The outage ends right after the expiry's write is refused.
		st.after = func(a *AgentState) bool { return len(a.StepLock) == 0 }
		sayTo(b, "ask op", op, "may I?", true, true)
		runSteps(b, alice, "ask op")
		a, _ := b.sys.agent(alice)
		a.mu.Lock()
		engaged := len(a.st.StepLock)
		a.mu.Unlock()
		if engaged != 1 {
			t.Fatalf("alice holds %d waits, want 1", engaged)
		}
		st.down.Store(true) // fake time: before the deadline
		b.until("the expiry's write to be refused (the outage to end)", time.Minute, func() bool { return !st.down.Load() })

		a.mu.Lock()
		locks, waits, timer := len(a.st.StepLock), append([]Wait(nil), a.st.Waits...), a.waitTimer
		a.mu.Unlock()
		now := b.sys.now()
		base := b.task(b.sys.BaseTaskID())
		if locks > 0 && len(waits) > 0 && !waits[0].Deadline.After(now) && timer == nil {
			t.Errorf("alice still waits (lock %d, deadline %v ago) with no timer armed: nothing will ever release the wait; supervision counts the task busy: %v",
				locks, now.Sub(waits[0].Deadline).Round(time.Millisecond), b.sys.busy(&base))
		}
		b.until("alice to be told no reply came", time.Minute, func() bool {
			stored, _ := st.Agent(alice)
			return len(stored.StepLock) == 0 && len(b.steps(alice, func(s StepState) bool {
				return s.Executor == SkillProcessMessage && s.ExecutionState == StateFinished
			})) == 1
		})
	})
}

// TestWithdrawnReleaseRearmsTheWait: a released wait whose write is
// refused and withdrawn (the agent takes back its stored document) is a
// wait again: it has its timer and its edge in the wait graph, so it
// still ends and cycles through it are still seen.
func TestWithdrawnReleaseRearmsTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &outageAgentStore{MemoryStore: NewMemoryStore()}
		b := bubbleBed(t, func(c *Config) {
			c.Store = st
			c.WaitTimeout = time.Hour
		})
		op := b.op()
		alice := b.newAgent("alice")
		b.join(b.sys.BaseTaskID(), alice)
		st.agent = alice
		sayTo(b, "ask op", op, "may I?", true, true)
		runSteps(b, alice, "ask op")
		// The agent's loop is parked: the release below is the one
		// holder's change (a change of the loop made while its write is
		// refused would be grouped with it, and kept).
		synctest.Wait()
		a, _ := b.sys.agent(alice)
		a.mu.Lock()
		waits := append([]Wait(nil), a.st.Waits...)
		a.mu.Unlock()
		if len(waits) != 1 {
			t.Fatalf("alice holds %d waits, want 1", len(waits))
		}

		// A release of one holder, not kept: the refused write withdraws
		// it.
		st.down.Store(true)
		a.mu.Lock()
		a.releaseWaitLocked(waits[0].WaitingID)
		a.changedLocked(Event{Detail: "step_lock_released"})
		if err := a.mu.syncLocked(); err == nil {
			t.Fatal("the refused release reported no error")
		}
		locks, timer := len(a.st.StepLock), a.waitTimer
		a.mu.Unlock()
		st.down.Store(false)
		if locks != 1 {
			t.Fatalf("alice holds %d step-lock entries after the withdrawn release, want 1", locks)
		}
		if timer == nil {
			t.Error("the wait is back but no timer is armed: it would never time out")
		}
		if n := edgesOf(&b.sys.waits)[alice][op]; n != 1 {
			t.Errorf("the wait graph holds %d waits of alice on the operator, want 1", n)
		}
		b.until("the wait to time out", 2*time.Hour, func() bool {
			stored, _ := st.Agent(alice)
			return len(stored.StepLock) == 0
		})
	})
}

// TestRefusedOutcomesLeaveNoStepRunning: the store is down while alice's
// think step ends and comes back right after the second refused write of
// its outcome (finished refused, failed refused). The step must not stay
// "running" in memory, in later writes and in what clients read with
// nothing running it: its failed outcome is kept and stored once the
// store is back.
func TestRefusedOutcomesLeaveNoStepRunning(t *testing.T) {
	st := &outageAgentStore{MemoryStore: NewMemoryStore()}
	b := newTestbed(t, func(c *Config) { c.Store = st })
	alice := b.newAgent("alice")
	st.agent = alice
	var think atomic.Value
	st.after = func(a *AgentState) bool {
		id, _ := think.Load().(string)
		for _, s := range a.AgentStep.StepList {
			if s.StepID == id && s.ExecutionState == StateFailed {
				return true
			}
		}
		return false
	}
	b.sc.onAgent("alice", SkillPlanning, func(context.Context, *ExecInput) *Output {
		return &Output{AddSteps: []StepSpec{spec(SkillThink, "think")}}
	})
	var runs atomic.Int32
	b.sc.onAgent("alice", SkillThink, func(_ context.Context, in *ExecInput) *Output {
		think.Store(in.Step.StepID)
		if runs.Add(1) == 1 {
			st.down.Store(true) // the outage begins while the step runs
		}
		return &Output{Result: map[string]any{"think": "an idea"}}
	})
	id := b.newTask("report", alice)
	stages := b.addStages(id, StageSpec{StageIntention: "collect", AgentAllocation: map[string]string{alice: "collect facts"}})
	b.waitFor("alice to summarise", func() bool { return summarised(b, id, stages[0]) })
	b.settle()
	stepID := think.Load().(string)
	s, _ := b.step(alice, stepID)
	stored, _ := st.Agent(alice)
	storedState := ""
	for _, x := range stored.AgentStep.StepList {
		if x.StepID == stepID {
			storedState = x.ExecutionState
		}
	}
	a, _ := b.sys.agent(alice)
	run, _ := a.runningStep()
	if s.ExecutionState == StateRunning && run != stepID {
		t.Errorf("after the outage the think step %s shows %q (stored %q) while alice runs %q: a step running with nobody to run it",
			stepID, s.ExecutionState, storedState, run)
	}
	if storedState != StateFailed {
		t.Errorf("the think step is stored %q, want its failed outcome (the refused result is not kept)", storedState)
	}
}

// TestStoreOutagePausesTheAgent: while the store refuses alice's
// document, her loop pauses: it does not run again the steps that ran
// since the outage began (an LLM step's start is never written, so a
// document taken back after a refusal lists them as queued), and starts
// none of the steps queued in memory meanwhile. The outage ends after a
// few refused writes, whoever makes them.
func TestStoreOutagePausesTheAgent(t *testing.T) {
	st := &outageAgentStore{MemoryStore: NewMemoryStore()}
	b := newTestbed(t, func(c *Config) { c.Store = st })
	alice := b.newAgent("alice")
	st.agent = alice
	const outage = 4 // refused writes
	st.after = func(*AgentState) bool { return st.refused.Load() >= outage }
	var runs atomic.Int32
	b.sc.onAgent("alice", SkillPlanning, func(context.Context, *ExecInput) *Output {
		return &Output{AddSteps: []StepSpec{spec(SkillThink, "think")}}
	})
	b.sc.onAgent("alice", SkillThink, func(_ context.Context, in *ExecInput) *Output {
		if runs.Add(1) == 1 {
			st.down.Store(true) // the outage begins while the step runs
		}
		return &Output{Result: map[string]any{"think": "an idea"}}
	})
	// The progress guard's reflection, queued during the outage, runs
	// once the store is back, not before.
	var early atomic.Int32
	b.sc.onAgent("alice", SkillReflection, func(context.Context, *ExecInput) *Output {
		if st.down.Load() {
			early.Add(1)
		}
		return &Output{}
	})
	id := b.newTask("report", alice)
	stages := b.addStages(id, StageSpec{StageIntention: "collect", AgentAllocation: map[string]string{alice: "collect facts"}})
	b.waitFor("alice to summarise", func() bool { return summarised(b, id, stages[0]) })
	if n := early.Load(); n > 0 {
		t.Errorf("alice started %d reflections while the store refused her document: the loop does not pause during an outage", n)
	}
	if n := runs.Load(); n > 1 {
		t.Errorf("the think step ran %d times in one process during a store outage: the loop re-runs withdrawn steps instead of pausing", n)
	}
	if n := st.refused.Load(); n < outage {
		t.Errorf("%d writes refused, want the outage of %d", n, outage)
	}
}

// TestStoreOutageKeepsADeliveredInstruction: the start_stage instruction
// reaches alice while the store refuses her document. The planning step
// it queues and the "received" record must not be withdrawn (only a
// restart would deliver the instruction again): once the store is back
// alice works in the stage, and supervision does not fail the task.
func TestStoreOutageKeepsADeliveredInstruction(t *testing.T) {
	st := &outageAgentStore{MemoryStore: NewMemoryStore()}
	b := newTestbed(t, func(c *Config) {
		c.Store = st
		c.StallTimeout = 200 * time.Millisecond
		c.StallNotices = 1
	})
	alice := b.newAgent("alice")
	st.agent = alice
	id := b.newTask("report", alice)
	b.settle()
	st.down.Store(true)
	stages := b.addStages(id, StageSpec{StageIntention: "collect", AgentAllocation: map[string]string{alice: "collect facts"}})
	st.down.Store(false) // the outage is over: it lasted one delivery
	ts := b.task(id)
	if n := len(b.steps(alice, func(s StepState) bool { return s.StageID == stages[0] })); n == 0 && !b.sys.busy(&ts) {
		t.Errorf("after the outage alice has no step in stage %s and the task is neither progressing nor waiting", stages[0])
	}
	b.waitFor("the stage's summary or the task's end", func() bool {
		tk := b.task(id)
		return summarised(b, id, stages[0]) || tk.ExecutionState == StateFailed
	})
	if tk := b.task(id); tk.ExecutionState == StateFailed {
		t.Errorf("the task was failed by supervision: %q", tk.TaskSummary)
	}
}

// refuseStartStore refuses the writes of an agent's document that show a
// given step running, a few times.
type refuseStartStore struct {
	*MemoryStore
	step    atomic.Value // the step ID whose start is refused
	refused atomic.Int32
	times   int32
}

func (s *refuseStartStore) PutAgent(ctx context.Context, a *AgentState) error {
	id, _ := s.step.Load().(string)
	for i := range a.AgentStep.StepList {
		if st := &a.AgentStep.StepList[i]; id != "" && st.StepID == id && st.ExecutionState == StateRunning && s.refused.Load() < s.times {
			s.refused.Add(1)
			return errStoreDown
		}
	}
	return s.MemoryStore.PutAgent(ctx, a)
}

// TestRefusedToolStartIsNotRun: a tool step's start is stored before the
// call (a crash then does not repeat an unsafe call). When the store
// refuses that write, the call is not made: the step waits, queued, for
// the store, and runs once (with its start stored) when the store takes
// writes again.
func TestRefusedToolStartIsNotRun(t *testing.T) {
	st := &refuseStartStore{MemoryStore: NewMemoryStore(), times: 2}
	var calls atomic.Int32
	unstored := make(chan string, 4)
	var agentID string
	tool := ExecutorFunc(func(ctx context.Context, in *ExecInput) *Output {
		calls.Add(1)
		got, err := st.MemoryStore.ReadAgent(ctx, agentID)
		if err != nil {
			unstored <- err.Error()
		} else {
			for _, s := range got.AgentStep.StepList {
				if s.StepID == in.Step.StepID && s.ExecutionState != StateRunning {
					unstored <- "the store holds the step as " + s.ExecutionState
				}
			}
		}
		return &Output{Result: map[string]any{"called": true}}
	})
	b := newTestbed(t, func(c *Config) {
		c.Store = st
		c.Tools = toolCatalog{"search": "web"}
		c.Tool = tool
	})
	id, err := b.sys.CreateAgent(AgentConfig{Name: "tooled", Role: "r", Skills: []string{SkillInstructionGeneration}, Tools: []string{"search"}})
	if err != nil {
		t.Fatal(err)
	}
	agentID = id
	b.join(b.sys.BaseTaskID(), id)
	b.sc.onAgent("tooled", SkillInstructionGeneration, func(_ context.Context, in *ExecInput) *Output {
		st.step.Store(in.Step.TargetStepID) // its start is refused, twice
		return &Output{ToolInstruction: &ToolInstruction{StepID: in.Step.TargetStepID, Instruction: &ToolCall{ToolName: "lookup"}}}
	})
	ids := b.inject(id, b.sys.BaseTaskID(), b.sys.BaseStageID(), false,
		spec(SkillInstructionGeneration, "prepare"), StepSpec{StepIntention: "call", Type: StepTool, Executor: "search"})
	b.waitFor("the tool step", func() bool { return b.stepDone(id, ids[1]) })
	if n := st.refused.Load(); n == 0 {
		t.Fatal("no start of the tool step was refused: the test did not test")
	}
	close(unstored)
	for why := range unstored {
		t.Errorf("the tool was called while its step's start was not stored: %s", why)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the tool was called %d times, want once", n)
	}
	if s, _ := b.step(id, ids[1]); s.ExecutionState != StateFinished {
		t.Errorf("the tool step is %s (%v), want finished", s.ExecutionState, s.ExecuteResult)
	}
}
