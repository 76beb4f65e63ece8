package engine

import (
	"log/slog"
	"slices"
	"testing"
	"testing/synctest"
)

// The stage counts (AgentState.StageCounts) are bounded: an entry goes
// when its stage or task ends for the agent, and the list holds at most
// MaxStageCounts entries, those of ended stages and tasks shed first.

// TestChainLimitHoldsInAnEndedStage: a stage's end does not end the
// conversations in it. Agents may go on messaging in a stage that has
// ended (stage_relative names any stage of the task, and a reply goes in
// the stage of the message it answers, spec §6.2.1), so the message-chain
// limit must hold there too: an agent keeps its count of an ended stage
// it takes messages in. Were no entry made for an ended stage, every
// message there would start a new chain and two agents answering each
// other would go on for ever.
func TestChainLimitHoldsInAnEndedStage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 6
		b := bubbleBed(t, func(c *Config) { c.MessageChainLimit = limit })
		alice, bob, task, sent := talkers(b, limit)
		stage := b.addStages(task, StageSpec{StageIntention: "talk", AgentAllocation: map[string]string{alice: "talk", bob: "talk"}})[0]
		synctest.Wait()
		if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionFinishStage, TaskID: task, StageID: stage}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if st := b.stage(task, stage).ExecutionState; st != StateFinished {
			t.Fatalf("stage %s, want finished", st)
		}
		b.inject(alice, task, stage, false, spec(SkillSendMessage, "start talking"))
		synctest.Wait()
		inStage := b.steps(bob, func(s StepState) bool { return s.Executor == SkillSendMessage && s.StageID == stage })
		if len(inStage) == 0 {
			t.Fatal("bob answered nothing in the ended stage: not the case meant")
		}
		if n := sent.Load(); n != limit+1 {
			t.Errorf("in the ended stage the agents tried to send %d messages, want the limit %d and the one refused", n, limit)
		}
		refused := slices.Concat(b.steps(alice, failedWith("messages between agents in a row")), b.steps(bob, failedWith("messages between agents in a row")))
		if len(refused) != 1 || refused[0].StageID != stage {
			t.Errorf("%d steps failed naming the chain limit (%v), want 1 in the ended stage", len(refused), refused)
		}
	})
}

// TestStageCountsAreCapped: an agent takes messages in many stages that
// have ended (each makes its count there again, until the task ends).
// Its counts stay within MaxStageCounts: the entries of ended stages go
// first, the count of the stage it still works in is kept, and nothing
// is logged. Past the cap with every entry live, one live entry goes,
// and a warning naming the agent and the limit is logged once.
func TestStageCountsAreCapped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit, ended = 4, 7
		logs := &logBuffer{}
		b := bubbleBed(t, func(c *Config) {
			c.MaxStageCounts = limit
			c.Logger = slog.New(slog.NewJSONHandler(logs, nil))
		})
		w := b.newAgent("w")
		// The stage w still works in: its count there (planning,
		// reflection, summary) must survive the cap.
		live := b.newTask("live", w)
		liveStage := b.addStages(live, StageSpec{StageIntention: "work", AgentAllocation: map[string]string{w: "work"}})[0]
		synctest.Wait()
		liveKey := StageCount{TaskID: live, StageID: liveStage}
		countOf := func(k StageCount) (StageCount, bool) {
			cs := b.agent(w).StageCounts
			i, ok := slices.BinarySearchFunc(cs, k, CompareStageCounts)
			if !ok {
				return StageCount{}, false
			}
			return cs[i], true
		}
		before, ok := countOf(liveKey)
		if !ok || before.Steps == 0 {
			t.Fatalf("w has no count of the stage it works in (%+v): not the case meant", b.agent(w).StageCounts)
		}

		// A task whose stages all ended, one after the other.
		old := b.newTask("old", w)
		specs := make([]StageSpec, ended)
		for i := range specs {
			specs[i] = StageSpec{StageIntention: "step", AgentAllocation: map[string]string{w: "work"}}
		}
		stages := b.addStages(old, specs...)
		for _, id := range stages {
			synctest.Wait()
			if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionFinishStage, TaskID: old, StageID: id}); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		// A message in each ended stage makes its count there again.
		for i, id := range stages {
			if _, err := b.sys.HumanSend(b.op(), HumanMessage{TaskID: old, Receiver: []string{w}, StageRelative: id, Content: "a late word"}); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			cs := b.agent(w).StageCounts
			if len(cs) > limit {
				t.Fatalf("after the message in ended stage %d w holds %d stage counts, want at most %d: %+v", i+1, len(cs), limit, cs)
			}
			if got, ok := countOf(liveKey); !ok || got.Steps != before.Steps {
				t.Fatalf("after the message in ended stage %d w's count of the stage it works in is %+v (found %v), want %+v kept", i+1, got, ok, before)
			}
		}
		if line := logs.line("stage counts", w); line != "" {
			t.Errorf("a warning for w with entries of ended stages to shed: %s", line)
		}

		// Every entry live: messages outside any stage of tasks that run.
		for i := range limit + 1 {
			task := b.newTask("more", w)
			if _, err := b.sys.HumanSend(b.op(), HumanMessage{TaskID: task, Receiver: []string{w}, Content: "a word"}); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			if cs := b.agent(w).StageCounts; len(cs) > limit {
				t.Fatalf("after the message in live task %d w holds %d stage counts, want at most %d: %+v", i+1, len(cs), limit, cs)
			}
		}
		if n := len(logs.matching("stage counts", w, `"limit":4`)); n != 1 {
			t.Errorf("%d warnings naming w and the limit of its stage counts, want 1:\n%s", n, logs.text())
		}
	})
}

// TestStageCountsShedOrder: which counts go to make room for one more at
// MaxStageCounts. The agent has a step to run in stages "busy" and
// "old-busy" of task t1; ended names the stages the tasks said have ended
// (nil: nobody asked them, as when a step, not a message, makes a count).
func TestStageCountsShedOrder(t *testing.T) {
	tests := []struct {
		name   string
		limit  int
		counts []string // stages of task t1
		ended  []string
		want   []string // left, the new count made
		warned bool
	}{
		{"ended ones no step is in go, all of them", 3, []string{"busy", "old1", "old2"}, []string{"old1", "old2"}, []string{"busy"}, false},
		{"an ended one in use goes before a live one", 3, []string{"busy", "live", "old-busy"}, []string{"old-busy"}, []string{"busy", "live"}, false},
		{"none ended: a live one no step is in goes, said", 3, []string{"busy", "live", "old-busy"}, nil, []string{"busy", "old-busy"}, true},
		{"all in use: the first goes, said", 2, []string{"busy", "old-busy"}, nil, []string{"old-busy"}, true},
		{"below the limit nothing goes", 3, []string{"old1", "old2"}, []string{"old1", "old2"}, []string{"old1", "old2"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs := &logBuffer{}
			s := bareSystem(t, func(c *Config) {
				c.MaxStageCounts = tt.limit
				c.Logger = slog.New(slog.NewJSONHandler(logs, nil))
			})
			a := looseAgent(s, "w", SkillThink)
			a.mu.Lock()
			defer a.mu.Unlock()
			a.addStepsLocked("t1", "busy", []StepSpec{spec(SkillThink, "b")}, false, "")
			a.addStepsLocked("t1", "old-busy", []StepSpec{spec(SkillThink, "o")}, false, "")
			for _, st := range tt.counts {
				a.st.StageCounts = append(a.st.StageCounts, StageCount{TaskID: "t1", StageID: st, Steps: 1})
			}
			slices.SortFunc(a.st.StageCounts, CompareStageCounts)
			var ended map[stageKey]bool
			for _, st := range tt.ended {
				if ended == nil {
					ended = map[stageKey]bool{}
				}
				ended[stageKey{"t1", st}] = true
			}
			a.shedCountsLocked(ended)
			a.count(stageKey{"t2", NoRelative})
			var left []string
			for _, c := range a.st.StageCounts {
				if c.TaskID == "t1" {
					left = append(left, c.StageID)
				}
			}
			if !slices.Equal(left, tt.want) {
				t.Errorf("counts left %v, want %v", left, tt.want)
			}
			if a.countOf(stageKey{"t2", NoRelative}) == nil {
				t.Error("the new count was not made")
			}
			if warned := logs.line("stage counts", a.id, `"limit":`) != ""; warned != tt.warned {
				t.Errorf("warned %v, want %v:\n%s", warned, tt.warned, logs.text())
			}
		})
	}
}
