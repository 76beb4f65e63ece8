package engine

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestBudgetQuestionAskedOnceTheStoreTakesIt: a task reaches its budget
// while the store refuses the budget question's write (an outage). The
// task is held and paused, and waits on its operator's answer: the
// question must be asked once the store takes writes again, not only by
// the next restart (nothing else would ask it, and the task would stay
// held with nobody told).
func TestBudgetQuestionAskedOnceTheStoreTakesIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &refusingStore{MemoryStore: NewMemoryStore()}
		isQuestion := func(m *Message) bool { return strings.Contains(m.Message, "[Budget reached]") }
		st.refuse = isQuestion
		b := bubbleBed(t, func(c *Config) { c.Store = st; c.Budgets.TaskTokens = 150 })
		b.sc.onAgent("w", SkillPlanning, plan(spec(SkillThink, "t1"), spec(SkillThink, "t2"), spec(SkillThink, "t3")))
		b.sc.onSkill(SkillThink, costly)
		r := startStage(b)
		b.until("the task to be held for its budget", testStall, func() bool {
			ts := b.task(r.task)
			return ts.Paused && ts.Budget.Held != ""
		})
		// The outage lasts a while: the question is refused meanwhile.
		outage := time.NewTimer(time.Minute)
		<-outage.C
		synctest.Wait()
		if open := awaitingIn(b, r.task); len(open) != 0 {
			t.Fatalf("the store refused the budget question, yet %d question(s) await the operator: %+v", len(open), open)
		}

		st.mu.Lock()
		st.refuse = nil
		st.mu.Unlock()
		b.until("the budget question, once the store takes writes", testStall, func() bool {
			return len(awaitingIn(b, r.task)) == 1
		})
		q := awaitingIn(b, r.task)[0]
		if !strings.Contains(q.Content, "[Budget reached]") {
			t.Fatalf("open question %q, want the budget question", q.Content)
		}
		if ts := b.task(r.task); ts.Budget.Held == "" || !ts.Paused {
			t.Fatalf("task held %q, paused %v; want still held while its question is asked", ts.Budget.Held, ts.Paused)
		}
		// The question asked after the outage settles the hold.
		if err := b.sys.AnswerApproval(b.op(), q.MessageID, Decision{Approve: true}); err != nil {
			t.Fatal(err)
		}
		b.until("the task to be released and resumed", testStall, func() bool {
			ts := b.task(r.task)
			return ts.Budget.Held == "" && !ts.Paused
		})
	})
}
