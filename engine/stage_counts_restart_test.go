package engine

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
)

// The stage budgets and the message-chain limit across restarts: what an
// agent ran in a stage, and the chain of the last message it took there,
// are limits only if a crash does not give them a fresh allowance.

// freezeAfterAgent freezes store right after the first agent document
// match holds is written: a crash right after that write.
func freezeAfterAgent(store *freezeStore, match func(*AgentState) bool) {
	store.mu.Lock()
	store.after = true
	store.mu.Unlock()
	store.freezeAt(match, nil)
}

// TestStageStepBudgetSurvivesARestart: a worker spends its stage's step
// budget (planning, t1, t2: 3 steps) and the process dies right after t2's
// end is stored, t3 still to run. After the restart the budget is still
// spent: t3 is skipped for it, not run.
func TestStageStepBudgetSurvivesARestart(t *testing.T) {
	b, store, restart := freezeBedWith(t, func(c *Config) { c.StageStepBudget = 3 })
	var ranT3 atomic.Bool
	b.sc.onAgent("w", SkillPlanning, plan(spec(SkillThink, "t1"), spec(SkillThink, "t2"), spec(SkillThink, "t3")))
	b.sc.onText("t3", func(context.Context, *ExecInput) *Output {
		ranT3.Store(true)
		return &Output{}
	})
	freezeAfterAgent(store, func(a *AgentState) bool {
		for _, s := range a.AgentStep.StepList {
			if s.TextContent == "t2" && s.ExecutionState == StateFinished {
				return true
			}
		}
		return false
	})
	r := startStage(b)
	b2, img := restart()
	var t3 string
	for _, a := range img.Agents {
		for _, s := range a.AgentStep.StepList {
			if a.AgentID == r.w && s.TextContent == "t3" && s.ExecutionState == StateInit {
				t3 = s.StepID
			}
		}
	}
	if t3 == "" {
		t.Fatal("the image does not hold t3 still to run: the crash is not the one meant")
	}
	b2.waitFor("t3 dealt with after the restart", func() bool { return b2.stepDone(r.w, t3) })
	s, _ := b2.step(r.w, t3)
	if ranT3.Load() || s.ExecuteResult["skipped"] != true {
		t.Errorf("after the restart t3 ran (%v) and ended %s %v: the stage's step budget (3), spent before the crash, was given again", ranT3.Load(), s.ExecutionState, s.ExecuteResult)
	}
}

// TestMessageChainLimitSurvivesARestart: two agents answer each other
// until the chain reaches MessageChainLimit; the process dies right after
// alice took bob's message at the limit and queued her reply. After the
// restart her reply is past the limit still: it is refused, not sent as
// the first message of a new chain.
func TestMessageChainLimitSurvivesARestart(t *testing.T) {
	const limit = 4
	b, store, restart := freezeBedWith(t, func(c *Config) { c.MessageChainLimit = limit })
	alice, bob, task, _ := talkers(b, limit)
	// alice sends 1, bob 2, alice 3, bob 4: alice's second reply to bob
	// would be the fifth message in a row.
	repliesToBob := func(a *AgentState) []StepState {
		var out []StepState
		for _, s := range a.AgentStep.StepList {
			if s.Executor == SkillSendMessage && s.ReplyTo == bob {
				out = append(out, s)
			}
		}
		return out
	}
	freezeAfterAgent(store, func(a *AgentState) bool {
		replies := repliesToBob(a)
		return a.AgentID == alice && len(replies) == limit/2 && replies[len(replies)-1].ExecutionState == StateInit
	})
	b.inject(alice, task, NoRelative, false, spec(SkillSendMessage, "start talking"))
	b2, img := restart()
	var reply string
	for _, a := range img.Agents {
		if a.AgentID == alice {
			if replies := repliesToBob(&a); len(replies) == limit/2 {
				reply = replies[len(replies)-1].StepID
			}
		}
	}
	if reply == "" {
		t.Fatal("the image does not hold alice's reply past the limit still to run: the crash is not the one meant")
	}
	b2.waitFor("alice's reply past the limit dealt with after the restart", func() bool { return b2.stepDone(alice, reply) })
	if s, _ := b2.step(alice, reply); !failedWith("messages between agents in a row")(s) {
		t.Errorf("after the restart alice's reply, the fifth message in a row (limit %d), ended %s %v: want refused for the chain limit", limit, s.ExecutionState, s.ExecuteResult)
	}
}

// TestStageCountsHideAnotherOperatorsTask: an agent works in the default
// operator's task. Bea, who may not see that task, reads the agent: its
// stage counts name that task (and say how far its work went), so none of
// them is shown to her; the task's operator sees its own.
func TestStageCountsHideAnotherOperatorsTask(t *testing.T) {
	b := newTestbed(t, nil)
	bea := b.operator("bea")
	w := b.newAgent("w")
	task := b.newTask("t", w)
	id := b.inject(w, task, NoRelative, false, spec(SkillThink, "work"))[0]
	b.waitFor("w's step", func() bool { return b.stepDone(w, id) })
	of := func(viewer string) bool {
		st, _ := b.sys.AgentFor(viewer, w)
		return slices.ContainsFunc(st.StageCounts, func(c StageCount) bool { return c.TaskID == task })
	}
	if b.sys.Visible(bea, task) || !of(b.op()) {
		t.Fatal("bea sees the task, or its operator does not see w's count there: not the case meant")
	}
	if of(bea) {
		t.Errorf("bea, who may not see task %s, reads w's stage counts there", task)
	}
}
