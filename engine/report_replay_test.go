package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

// gateTaskStore holds the task writes gate matches until open is closed.
type gateTaskStore struct {
	*MemoryStore
	once sync.Once
	gate func(*TaskState) bool
	open chan struct{}
}

// release opens the gate (once).
func (s *gateTaskStore) release() { s.once.Do(func() { close(s.open) }) }

func (s *gateTaskStore) PutTask(ctx context.Context, t *TaskState) error {
	if s.gate(t) {
		<-s.open
	}
	return s.MemoryStore.PutTask(ctx, t)
}

// TestReplayTakesNothingTwice: an agent's last report stays in its stored
// document after its task stored it (reportStored writes nothing; here the
// agent's "idle" write carried it), and the task's shared info pool is then
// shortened by its bound past the report's entry. The next start must not
// give the report to the task again (its usage counted twice, its shared
// info added again): the task knows the last report it took from each agent
// (TakenReports), not only its pool. With a direct report: the task then
// takes a report of the agent's that never was in its outbox (a step
// cleaned up while it ran, which apply reports directly); it must not count
// as the last one taken, or the restart would find no match and give the
// task every report again.
func TestReplayTakesNothingTwice(t *testing.T) {
	for _, direct := range []bool{false, true} {
		t.Run(fmt.Sprint("direct report ", direct), func(t *testing.T) { replayTakesNothingTwice(t, direct) })
	}
}

func replayTakesNothingTwice(t *testing.T, direct bool) {
	const limit = 64 << 10
	var alice string
	st := &gateTaskStore{MemoryStore: NewMemoryStore(), open: make(chan struct{})}
	st.gate = func(ts *TaskState) bool {
		return len(ts.StageList) > 0 && ts.StageList[0].CompletionSummary[alice] != ""
	}
	var cfg Config
	b := newTestbed(t, func(c *Config) { c.Store = st; c.MaxDocumentBytes = limit; cfg = *c })
	// Run before the testbed closes (cleanups run last first): a write
	// held at the gate would keep Close waiting if the test stops early.
	t.Cleanup(st.release)
	alice = b.newAgent("alice")
	b.sc.onAgent("alice", SkillSummary, func(context.Context, *ExecInput) *Output {
		done := "done"
		return &Output{Completion: &done, Usage: Usage{TotalTokens: 7, Calls: 1}}
	})
	id := b.newTask("report", alice)
	stages := b.addStages(id, StageSpec{StageIntention: "collect", AgentAllocation: map[string]string{alice: "collect facts"}})
	var summary string
	b.waitFor("alice to rest with her summary's report stored with her", func() bool {
		a, _ := st.Agent(alice)
		for _, r := range a.Reports {
			if r.Completion != nil && a.WorkingState == WorkingIdle {
				summary = r.StepID
				return true
			}
		}
		return false
	})
	st.release()
	b.waitFor("the task to store the summary's report", func() bool {
		ts, _ := st.Task(id)
		return ts.StageList[0].CompletionSummary[alice] != "" && b.sys.ReportsOnTheirWay() == 0
	})
	b.settle()

	tk, _ := b.sys.task(id)
	if direct {
		// A later step of alice's, cleaned up while it ran: sync.go
		// reports it with t.report, not through her outbox.
		if _, err := tk.report(StepReport{TaskID: id, StageID: stages[0], AgentID: alice, StepID: "cleaned-up-step", AgentState: AgentWorking}); err != nil {
			t.Fatal(err)
		}
	}
	long := strings.Repeat("z", 4000)
	for i := range 40 {
		if _, err := tk.report(StepReport{TaskID: id, StageID: stages[0], AgentID: "bob", StepID: fmt.Sprint("bob-", i), SharedInfo: long}); err != nil {
			t.Fatal(err)
		}
	}
	b.settle()
	before := b.task(id)
	if slices.ContainsFunc(before.SharedInfoPool, func(si SharedInfo) bool { return si.StepID == summary }) {
		t.Fatal("the pool still holds the summary's entry")
	}
	if a, _ := st.Agent(alice); !slices.ContainsFunc(a.Reports, func(r StepReport) bool { return r.StepID == summary }) {
		t.Fatal("alice's stored document no longer holds the summary's report")
	}
	b.sub.Close()
	_ = b.sys.Close()
	img, err := st.MemoryStore.Image()
	if err != nil {
		t.Fatal(err)
	}
	b2 := restartFrom(t, cfg, img, b.sc)
	b2.settle()
	after := b2.task(id)
	if after.Usage != before.Usage {
		t.Errorf("the restart changed the task's usage from %+v to %+v (the summary's, counted again)", before.Usage, after.Usage)
	}
	if slices.ContainsFunc(after.SharedInfoPool, func(si SharedInfo) bool { return si.StepID == summary }) {
		t.Errorf("the restart added the summary's old report to the shared info pool again")
	}
}
