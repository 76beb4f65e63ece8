package engine

import (
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// The operator's daily question asked again when the task it was asked in
// ends (cancel_task) is worked out again first: a new day began since the
// hold (the daily spend starts again), so the daily budget holds nobody any
// more, and the operator's tasks held for it are released instead of being
// asked about with yesterday's reason.
func TestDailyQuestionAskedAgainOnANewDayReleasesInstead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var later atomic.Int64 // what the clock is ahead of the bubble's
		b := newTestbed(t, func(c *Config) {
			c.Budgets.OperatorDailyTokens = 450
			c.Now = func() time.Time { return time.Now().Add(time.Duration(later.Load())) }
		})
		t1, t2 := pastTheDailyBudget(b)
		synctest.Wait()
		qs := openBudgetQuestions(b)
		if len(qs) != 1 {
			t.Fatalf("open budget questions %+v, want one\n%s", qs, b.dump())
		}
		asked, other := qs[0].TaskID, t2
		if asked == t2 {
			other = t1
		}
		if st := b.task(other); !st.Paused || st.Budget.HeldFor != holdDaily {
			t.Fatalf("task %s: paused %v, held for %q; want held for the daily budget", other, st.Paused, st.Budget.HeldFor)
		}

		later.Store(int64(24 * time.Hour)) // a new day (UTC)
		if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionCancelTask, TaskID: asked, Summary: "not this one"}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		st := b.task(other)
		if st.Budget.Held != "" || st.Paused {
			t.Errorf("on a new day, after the daily question's task ended: task %s held %q (paused %v), want released: the daily budget holds nobody today",
				other, st.Budget.Held, st.Paused)
		}
		if qs := openBudgetQuestions(b); len(qs) != 0 {
			t.Errorf("on a new day the operator is asked about a daily budget not reached: %q", qs[0].Content)
		}
	})
}

// After a restart, the tasks held for the daily budget are asked about
// with the reason as it is now, not as it was stored with the hold: with
// the daily limit changed (still reached) the question says the new
// limit; on a new day the hold no longer applies and the tasks are
// released instead of asked about.
func TestDailyQuestionAfterARestartSaysTheReasonNow(t *testing.T) {
	for _, tc := range []struct {
		name     string
		restart  func(c *Config)
		released bool
		want     string // what the question says
	}{
		{name: "the daily limit changed", restart: func(c *Config) { c.Budgets.OperatorDailyTokens = 500 }, want: "the daily budget is 500"},
		{name: "a new day", released: true, restart: func(c *Config) {
			now := c.Now
			c.Now = func() time.Time { return now().Add(24 * time.Hour) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Noon (UTC) today: the real day does not change under the test.
			n := time.Now().UTC()
			noon := n.Truncate(24 * time.Hour).Add(12 * time.Hour).Sub(n)
			store := NewMemoryStore()
			b := newTestbed(t, func(c *Config) {
				c.Budgets.OperatorDailyTokens = 450
				c.Store = store
				c.Now = func() time.Time { return time.Now().Add(noon) }
			})
			t1, t2 := pastTheDailyBudget(b)
			b.waitFor("the daily budget question", func() bool { return len(openBudgetQuestions(b)) == 1 })
			settleHeld(b)
			img := b.crashImage(store)
			c := b.sys.cfg
			tc.restart(&c)
			nb := restartFrom(t, c, img, b.sc)
			if tc.released {
				nb.waitFor("both tasks released", func() bool {
					return nb.task(t1).Budget.Held == "" && nb.task(t2).Budget.Held == ""
				})
				nb.settle()
				if qs := openBudgetQuestions(nb); len(qs) != 0 {
					t.Errorf("on a new day the operator is asked about a daily budget not reached: %q", qs[0].Content)
				}
				return
			}
			nb.waitFor("the daily budget question asked again", func() bool { return len(openBudgetQuestions(nb)) == 1 })
			if q := openBudgetQuestions(nb)[0]; !strings.Contains(q.Content, tc.want) {
				t.Errorf("the question asked again after the restart: %q; want the reason now (%q)", q.Content, tc.want)
			}
		})
	}
}

// A task held for the daily budget that a limit of its own holds too: on a
// new day the daily hold lifts, and the task stays held for its own limit,
// asked about that limit (not about yesterday's daily spend, and not left
// held with nothing asking).
func TestNewDayLeavesATaskHeldForItsOwnLimitAsked(t *testing.T) {
	n := time.Now().UTC()
	noon := n.Truncate(24 * time.Hour).Add(12 * time.Hour).Sub(n)
	store := NewMemoryStore()
	b := newTestbed(t, func(c *Config) {
		c.Budgets.OperatorDailyTokens, c.Budgets.TaskTokens = 250, 250
		c.Store = store
		c.Now = func() time.Time { return time.Now().Add(noon) }
	})
	b.sc.onAgent("w", SkillPlanning, plan(spec(SkillThink, "t1"), spec(SkillThink, "t2"), spec(SkillThink, "t3")))
	b.sc.onSkill(SkillThink, costly)
	r := startStage(b)
	b.waitFor("the daily budget question", func() bool { return len(openBudgetQuestions(b)) == 1 })
	settleHeld(b)
	if st := b.task(r.task); st.Budget.HeldFor != holdDaily {
		t.Fatalf("task held for %q (%s), want the daily budget first", st.Budget.HeldFor, st.Budget.Held)
	}
	img := b.crashImage(store)
	c := b.sys.cfg
	c.Now = func() time.Time { return time.Now().Add(noon + 24*time.Hour) }
	nb := restartFrom(t, c, img, b.sc)
	nb.waitFor("the task's own budget question", func() bool {
		qs := openBudgetQuestions(nb)
		return len(qs) == 1 && !strings.Contains(qs[0].Content, "daily")
	})
	q := openBudgetQuestions(nb)[0]
	if !strings.Contains(q.Content, "the task used 300 tokens, its budget is 250") {
		t.Errorf("question %q, want it about the task's own budget", q.Content)
	}
	if st := nb.task(r.task); !st.Paused || st.Budget.HeldFor != holdTask {
		t.Errorf("task paused %v, held for %q (%s); want held for its own budget", st.Paused, st.Budget.HeldFor, st.Budget.Held)
	}
}
