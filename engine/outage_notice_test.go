package engine

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
)

// outageNotices returns the outage pause notices the operator got about a
// task, in the order they arrived: "paused" or "resumed".
func outageNotices(b *testbed, taskID string) []string {
	var out []string
	for _, p := range b.agent(b.op()).ConversationPool.ConversationPrivates[SystemSender] {
		if !strings.Contains(p.Content, "("+taskID+")") {
			continue
		}
		switch {
		case strings.HasPrefix(p.Content, "[Task paused: LLM endpoint unavailable]"):
			out = append(out, "paused")
		case strings.HasPrefix(p.Content, "[Task resumed: LLM endpoint available]"):
			out = append(out, "resumed")
		}
	}
	return out
}

// resumeInTheHold makes the endpoint answer (as another agent's call
// would) right after holdOutage paused taskID, and lets everything that
// answer starts run out before the hold goes on. done is closed then.
func resumeInTheHold(t *testing.T, taskID string) (done chan struct{}) {
	done = make(chan struct{})
	outagePausedHook = func(s *System, id string) {
		if id != taskID {
			return
		}
		s.endpointAnswered()
		synctest.Wait() // the test's goroutine waits on done meanwhile
		close(done)
	}
	t.Cleanup(func() { outagePausedHook = nil })
	return done
}

// TestOutageNoticesFollowTheTask: the endpoint answers again just after a
// step's give-up paused its task, while another task is already paused for
// the outage: both resume. The operator's notices about the task must
// alternate paused/resumed and the last one say what the task is: a
// "paused" told after the resume would leave the operator believing a
// running task waits for the endpoint.
func TestOutageNoticesFollowTheTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bubbleBed(t, nil)
		alice, bob := b.newAgent("alice"), b.newAgent("bob")
		first, second := b.newTask("first", bob), b.newTask("second", alice)
		var runs atomic.Int32
		b.sc.onText("bob holds", func(_ context.Context, in *ExecInput) *Output { return gaveUp() })
		b.sc.onText("alice holds", func(_ context.Context, in *ExecInput) *Output {
			if runs.Add(1) == 1 {
				return gaveUp()
			}
			return &Output{Result: map[string]any{"think": "done"}}
		})
		b.inject(bob, first, NoRelative, false, spec(SkillThink, "bob holds"))
		synctest.Wait()
		if ts := b.task(first); ts.PausedFor != PausedOutage {
			t.Fatalf("the first task is not paused for the outage (%q)\n%s", ts.PausedFor, b.dump())
		}
		done := resumeInTheHold(t, second)
		b.inject(alice, second, NoRelative, false, spec(SkillThink, "alice holds"))
		<-done
		synctest.Wait()
		ts := b.task(second)
		notices := outageNotices(b, second)
		for i, n := range notices {
			if want := []string{"paused", "resumed"}[i%2]; n != want {
				t.Errorf("notice %d about the task says %q, want %q (notices: %v)", i+1, n, want, notices)
			}
		}
		state := "resumed"
		if ts.Paused {
			state = "paused"
		}
		if len(notices) > 0 && notices[len(notices)-1] != state {
			t.Errorf("the operator's last notice says the task %s; it is %s (paused=%v for %q; notices: %v)",
				notices[len(notices)-1], state, ts.Paused, ts.PausedFor, notices)
		}
		if ts.Paused || runs.Load() != 2 {
			t.Errorf("the task is paused=%v for %q, its step run %d times after the endpoint answered; want it resumed and run again\n%s",
				ts.Paused, ts.PausedFor, runs.Load(), b.dump())
		}
	})
}

// TestOutageAnswerDuringTheHoldResumes: the endpoint answers just after a
// step's give-up paused its task, before the hold has recorded that a task
// waits for it: that answer resumes the task, as any later one would. No
// probe runs here: a missed answer would leave the task paused until the
// next call answers, which a paused task does not make.
func TestOutageAnswerDuringTheHoldResumes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bubbleBed(t, nil)
		alice := b.newAgent("alice")
		task := b.newTask("t", alice)
		var runs atomic.Int32
		b.sc.onText("hold me", func(_ context.Context, in *ExecInput) *Output {
			if runs.Add(1) == 1 {
				return gaveUp()
			}
			return &Output{Result: map[string]any{"think": "done"}}
		})
		done := resumeInTheHold(t, task)
		b.inject(alice, task, NoRelative, false, spec(SkillThink, "hold me"))
		<-done
		synctest.Wait()
		if ts := b.task(task); ts.Paused || runs.Load() != 2 {
			t.Errorf("the task is paused=%v for %q, its step run %d times after the endpoint answered; want it resumed and run again\n%s",
				ts.Paused, ts.PausedFor, runs.Load(), b.dump())
		}
		if notices := outageNotices(b, task); len(notices) > 0 && notices[len(notices)-1] != "resumed" {
			t.Errorf("the operator's last notice says the running task is %s (notices: %v)", notices[len(notices)-1], notices)
		}
	})
}
