package engine

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mas-mcp/mas-mcp/llm"
)

// Outage notices when the calls that waited do not end by the endpoint:
// an interrupt (the call leaves), a crash (the call is lost). Found by an
// exploratory run of the real binary.

// waitingOnTheEndpoint is a step's call that waits out an outage until its
// context ends, as the LLM client does, and then leaves.
func waitingOnTheEndpoint(b *testbed, waiting chan<- struct{}) handler {
	return func(ctx context.Context, in *ExecInput) *Output {
		a, _ := b.sys.agent(in.Agent.AgentID)
		step := in.Step
		o := &stepOutage{a: a, step: &step}
		o.OutageBegan(time.Now(), "status 503: overloaded")
		close(waiting)
		<-ctx.Done()
		o.OutageEnded(llm.OutageLeft)
		return &Output{Err: ctx.Err()}
	}
}

// TestInterruptDuringAnOutageTellsNoGiveUp: an operator interrupts an agent
// whose call waits out an outage. Nobody gave up on the endpoint and no
// task is paused, so the operator must not be told so; told of the outage,
// it is told when the endpoint answers again.
func TestInterruptDuringAnOutageTellsNoGiveUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bubbleBed(t, nil)
		alice := b.newAgent("alice")
		task := b.newTask("t", alice)
		waiting := make(chan struct{})
		b.sc.onText("wait it out", waitingOnTheEndpoint(b, waiting))
		b.sc.onText("after", func(context.Context, *ExecInput) *Output {
			return &Output{Result: map[string]any{"think": "done"}, Usage: Usage{Calls: 1}}
		})
		b.inject(alice, task, NoRelative, false, spec(SkillThink, "wait it out"))
		<-waiting
		synctest.Wait()
		if !b.inboxHas("[LLM endpoint unavailable]") {
			t.Fatalf("the operator was not told of the outage\n%s", b.dump())
		}
		if _, err := b.sys.Interrupt(b.op(), alice, "", "start over"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if b.inboxHas("[LLM endpoint still unavailable]") {
			t.Errorf("after an interrupt the operator is told the calls gave up on the endpoint and their tasks are paused (task paused: %v)", b.task(task).Paused)
		}
		if a := b.agent(alice); a.WaitingFor != "" {
			t.Errorf("alice still shows waiting_for %q after her call left", a.WaitingFor)
		}
		// An answered call: the endpoint is back, and the operator is told.
		b.inject(alice, task, NoRelative, false, spec(SkillThink, "after"))
		synctest.Wait()
		if !b.inboxHas("[LLM endpoint available]") {
			t.Errorf("the endpoint answered again and the operator, told of the outage, was not told\n%s", b.dump())
		}
	})
}

// TestOutageWaitLostWithACrash: the process ends while a step's call waits
// out an outage (its agent stored as waiting for the endpoint, its
// operator told). After the restart no call waits: the agent must not show
// it waits, and the operator, promised a word when the endpoint answers,
// gets it when the first call does.
func TestOutageWaitLostWithACrash(t *testing.T) {
	b, store, restart := newFreezeBed(t)
	alice := b.newAgent("alice")
	task := b.newTask("t", alice)
	waiting := make(chan struct{})
	runs := 0
	b.sc.onText("wait it out", func(ctx context.Context, in *ExecInput) *Output {
		if runs++; runs == 1 {
			return waitingOnTheEndpoint(b, waiting)(ctx, in)
		}
		return &Output{Result: map[string]any{"think": "done"}, Usage: Usage{Calls: 1}}
	})
	b.inject(alice, task, NoRelative, false, spec(SkillThink, "wait it out"))
	<-waiting
	// The crash, now: alice's call waits until the process ends, and the
	// write that would show her no longer waiting is never made.
	store.mu.Lock()
	store.take(true)
	store.mu.Unlock()
	b2, img := restart()
	for _, a := range img.Agents {
		if a.AgentID == alice && a.WaitingFor == "" {
			t.Fatal("the image does not show alice waiting for the endpoint: the crash is not the one meant")
		}
	}
	b2.waitFor("the operator to be told the endpoint answers again", func() bool {
		return b2.inboxHas("[LLM endpoint available]")
	})
	in, err := b2.sys.Inbox(b2.op())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range in {
		if strings.HasPrefix(e.Content, "[LLM endpoint unavailable]") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the operator was told %d times that the endpoint is unavailable, want once", n)
	}
	if a := b2.agent(alice); a.WaitingFor != "" {
		t.Errorf("alice shows waiting_for %q once the endpoint answered", a.WaitingFor)
	}
}

// TestAnAnswerTheStepFailsOnResumesTheOutage: a task paused for an outage
// resumes on any answer of the endpoint, also one its step then fails on
// (an output that does not parse): with no probe configured, nothing else
// would resume it.
func TestAnAnswerTheStepFailsOnResumesTheOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bubbleBed(t, nil)
		alice, bob := b.newAgent("alice"), b.newAgent("bob")
		task := b.newTask("t", alice)
		var runs atomic.Int32
		b.sc.onText("hold me", func(context.Context, *ExecInput) *Output {
			if runs.Add(1) == 1 {
				return gaveUp()
			}
			return &Output{Result: map[string]any{"think": "done"}, Usage: Usage{Calls: 1}}
		})
		b.sc.onText("garbled", func(context.Context, *ExecInput) *Output {
			return &Output{Err: errors.New("think: the answer has no <think> block"), Usage: Usage{Calls: 1}}
		})
		b.inject(alice, task, NoRelative, false, spec(SkillThink, "hold me"))
		synctest.Wait()
		if ts := b.task(task); ts.PausedFor != PausedOutage {
			t.Fatalf("task not paused for the outage (%q)\n%s", ts.PausedFor, b.dump())
		}
		b.inject(bob, b.sys.baseTaskID, NoRelative, false, spec(SkillThink, "garbled"))
		synctest.Wait()
		if ts := b.task(task); ts.Paused {
			t.Errorf("the endpoint answered (bob's step failed on what it said) and the task is still paused for %q", ts.PausedFor)
		}
	})
}
