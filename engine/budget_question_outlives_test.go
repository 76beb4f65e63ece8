package engine

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestBudgetQuestionOutlivesTheOperatorsAbsence: a task reaches its budget
// while the operator is away for more than a day. The task stays held and
// paused, and its budget question stays in the operator's inbox awaiting
// the answer the hold waits on (a question does not time out: its timeout
// would free no waiting step, only leave the task held with nothing
// asking). The operator who comes back answers it and the task carries on.
func TestBudgetQuestionOutlivesTheOperatorsAbsence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bubbleBed(t, func(c *Config) { c.Budgets.AgentTokens = 250 })
		b.sc.onAgent("w", SkillPlanning, plan(spec(SkillThink, "t1"), spec(SkillThink, "t2"), spec(SkillThink, "t3"), spec(SkillThink, "t4")))
		b.sc.onSkill(SkillThink, costly)
		r := startStage(b)
		b.until("the budget question", testStall, func() bool { return len(awaitingIn(b, r.task)) == 1 })
		q := awaitingIn(b, r.task)[0]
		if !strings.Contains(q.Content, "[Budget reached]") {
			t.Fatalf("open question %q, want the budget question", q.Content)
		}

		// The operator is away for more than a day.
		away := time.NewTimer(25 * time.Hour)
		<-away.C
		synctest.Wait()

		st := b.task(r.task)
		if st.Budget.Held == "" || !st.Paused || b.ended(r.task) {
			t.Fatalf("while the operator was away the task was released or ended: held %q, paused %v, %s", st.Budget.Held, st.Paused, st.ExecutionState)
		}
		open := awaitingIn(b, r.task)
		if len(open) != 1 || open[0].MessageID != q.MessageID {
			t.Fatalf("task held for its budget (%q) after a day: %d question(s) of it await the operator, want the budget question %s",
				st.Budget.Held, len(open), q.MessageID)
		}

		// The operator comes back and raises the budget.
		if err := b.sys.AnswerApproval(b.op(), q.MessageID, Decision{Approve: true}); err != nil {
			t.Fatal(err)
		}
		b.until("the task to be released and resumed", testStall, func() bool {
			st := b.task(r.task)
			return st.Budget.Held == "" && !st.Paused
		})
	})
}
