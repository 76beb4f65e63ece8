package engine

import (
	"testing"
	"testing/synctest"
)

// The operator's daily budget holds all its tasks with one question, asked
// in one of them. When that task ends (cancel_task), its question goes
// with it; the operator's other tasks still held for the daily budget are
// asked about again, in one of them, and that question settles them all —
// as it does a task added past the daily budget afterwards.
func TestCancellingTheDailyBudgetQuestionsTaskAsksAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTestbed(t, func(c *Config) { c.Budgets.OperatorDailyTokens = 450 })
		t1, t2 := pastTheDailyBudget(b)
		// Everything the engine does at once is done when every goroutine
		// of the bubble is blocked: no fake time passes.
		synctest.Wait()
		for _, id := range []string{t1, t2} {
			if st := b.task(id); !st.Paused || st.Budget.HeldFor != holdDaily {
				t.Fatalf("task %s: paused %v, held for %q; want both held for the daily budget\n%s", id, st.Paused, st.Budget.HeldFor, b.dump())
			}
		}
		qs := openBudgetQuestions(b)
		if len(qs) != 1 {
			t.Fatalf("open budget questions %+v, want one", qs)
		}
		asked, other := qs[0].TaskID, t2
		if asked == t2 {
			other = t1
		}

		if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionCancelTask, TaskID: asked, Summary: "not this one"}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		qs = openBudgetQuestions(b)
		if st := b.task(other); !st.Paused || st.Budget.HeldFor != holdDaily || len(qs) != 1 || qs[0].TaskID != other {
			_, resumeErr := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionResumeTask, TaskID: other})
			t.Fatalf("after cancel_task of %s, whose daily-budget question it was: task %s paused %v (held for %q), open budget questions %+v; want it still held and asked about (resume_task says: %v)",
				asked, other, st.Paused, st.Budget.HeldFor, qs, resumeErr)
		}
		// A task added past the daily budget now is held, and the open
		// question is its question too.
		t3 := b.newTask("three")
		synctest.Wait()
		if st := b.task(t3); !st.Paused || st.Budget.HeldFor != holdDaily {
			t.Errorf("task %s added past the daily budget: paused %v, held for %q; want held for the daily budget", t3, st.Paused, st.Budget.HeldFor)
		}
		if qs := openBudgetQuestions(b); len(qs) != 1 {
			t.Fatalf("open budget questions after task %s was added: %+v, want one", t3, qs)
		}
		if err := b.sys.AnswerApproval(b.op(), qs[0].MessageID, Decision{Approve: true, Arguments: map[string]any{"tokens": 1000}}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		for _, id := range []string{other, t3} {
			if st := b.task(id); st.Paused || st.Budget.Held != "" {
				t.Errorf("task %s after the raise: paused %v, held %q; want released", id, st.Paused, st.Budget.Held)
			}
		}
	})
}
