package engine

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
)

// The promise made to an operator during an LLM outage ("you will be told
// when it answers again") across more than one crash.

// outageCrashed runs alice's step in a task of the default operator: its
// call waits out an outage (the operator is told), and the process dies
// while it waits. later answers the step's runs after that one (the
// second first). It returns the MAS's Config, the image the crash left,
// alice's ID and the step's.
func outageCrashed(t *testing.T, later ...handler) (Config, *Image, *script, string, string) {
	t.Helper()
	b, store, cfg := frozenBed(t, nil)
	alice := b.newAgent("alice")
	task := b.newTask("t", alice)
	waiting := make(chan struct{})
	var runs atomic.Int32
	b.sc.onText("wait it out", func(ctx context.Context, in *ExecInput) *Output {
		n := int(runs.Add(1))
		if n == 1 {
			return waitingOnTheEndpoint(b, waiting)(ctx, in)
		}
		if n-2 < len(later) {
			return later[n-2](ctx, in)
		}
		return answered(ctx, in)
	})
	step := b.inject(alice, task, NoRelative, false, spec(SkillThink, "wait it out"))[0]
	<-waiting
	store.crash()
	img := crashed(t, b, store)
	for _, a := range img.Agents {
		if a.AgentID == alice && a.WaitingOn != PausedOutage {
			t.Fatalf("the image shows alice waiting on %q: the crash is not the one meant", a.WaitingOn)
		}
	}
	return cfg, img, b.sc, alice, step
}

// answered is a call the endpoint answers.
func answered(context.Context, *ExecInput) *Output {
	return &Output{Result: map[string]any{"think": "done"}, Usage: Usage{Calls: 1}}
}

// TestOutagePromiseSurvivesASecondCrash: the process dies while a call
// waits out an outage, its operator told it will hear when the endpoint
// answers again. It is restarted, and dies again before any call got an
// answer (the re-run step's call is still under way): the first restore
// had stored alice as no longer waiting. After the second restart the
// first answered call must still tell the operator, once; alice shows no
// wait at any point.
func TestOutagePromiseSurvivesASecondCrash(t *testing.T) {
	rerun := make(chan struct{})
	cfg, img, sc, alice, step := outageCrashed(t, func(ctx context.Context, _ *ExecInput) *Output {
		// After the first restart: no answer before the process dies.
		close(rerun)
		<-ctx.Done()
		return &Output{Err: ctx.Err()}
	})
	b2, store2 := restartFrozen(t, cfg, img, sc)
	<-rerun
	if a := b2.agent(alice); a.WaitingFor != "" {
		t.Errorf("after the first restart alice shows waiting_for %q, with no call waiting", a.WaitingFor)
	}
	// What the operator is owed is its own: another operator reading its
	// document does not see the notice's ID.
	bea := b2.operator("bea")
	own, _ := b2.sys.AgentFor(b2.op(), b2.op())
	other, _ := b2.sys.AgentFor(bea, b2.op())
	if own.OwedOutageNotice == "" || other.OwedOutageNotice != "" {
		t.Errorf("the operator reads the notice it is owed as %q, bea reads it as %q; want it stored, and shown to its operator only", own.OwedOutageNotice, other.OwedOutageNotice)
	}
	store2.crash()
	img2 := crashed(t, b2, store2)
	for _, a := range img2.Agents {
		if a.AgentID == alice && (a.WaitingOn != "" || a.WaitingFor != "") {
			t.Fatalf("the second image still shows alice waiting (%q, %q): the first restore's write is not in it, the crash is not the one meant", a.WaitingOn, a.WaitingFor)
		}
	}
	b3 := restartFrom(t, cfg, img2, sc)
	b3.waitFor("alice's step answered", func() bool { return b3.stepDone(alice, step) })
	if n := inboxCount(b3, b3.op(), "[LLM endpoint available]"); n != 1 {
		t.Errorf("the operator, promised a word when the endpoint answers again, got %d such notice(s) once a call was answered after a second crash, want 1", n)
	}
	if n := inboxCount(b3, b3.op(), "[LLM endpoint unavailable]"); n != 1 {
		t.Errorf("the operator was told %d times that the endpoint is unavailable, want once", n)
	}
	if a := b3.agent(alice); a.WaitingFor != "" {
		t.Errorf("alice shows waiting_for %q once the endpoint answered", a.WaitingFor)
	}
	if st := b3.agent(b3.op()); st.OwedOutageNotice != "" {
		t.Errorf("the operator, told, is still owed the notice %s: a later restart would tell it again", st.OwedOutageNotice)
	}
}

// TestOutageNoticeStoredBeforeACrashIsNotSentAgain: after a restart the
// endpoint answers and the operator is sent the notice; the process dies
// after the notice was stored but before the operator's document took it.
// The next restart delivers the stored notice; the promise is kept: a call
// answered then must not send a second one.
func TestOutageNoticeStoredBeforeACrashIsNotSentAgain(t *testing.T) {
	proceed := make(chan struct{})
	cfg, img, sc, alice, step := outageCrashed(t, func(ctx context.Context, in *ExecInput) *Output {
		<-proceed
		return answered(ctx, in)
	})
	b2, store2 := restartFrozen(t, cfg, img, sc)
	op := b2.op()
	store2.freezeAt(func(a *AgentState) bool {
		if a.AgentID != op || a.ConversationPool == nil {
			return false
		}
		for _, p := range a.ConversationPool.ConversationPrivates[SystemSender] {
			if strings.HasPrefix(p.Content, "[LLM endpoint available]") {
				return true
			}
		}
		return false
	}, nil)
	close(proceed)
	img2 := crashed(t, b2, store2)
	stored := 0
	for _, m := range img2.Messages {
		if strings.HasPrefix(m.Message, "[LLM endpoint available]") {
			stored++
		}
	}
	if stored != 1 {
		t.Fatalf("the second image holds %d notices that the endpoint answers: the crash is not the one meant", stored)
	}
	b3 := restartFrom(t, cfg, img2, sc)
	b3.waitFor("alice's step answered again", func() bool { return b3.stepDone(alice, step) })
	b3.waitFor("the stored notice delivered", func() bool { return inboxCount(b3, b3.op(), "[LLM endpoint available]") > 0 })
	if n := inboxCount(b3, b3.op(), "[LLM endpoint available]"); n != 1 {
		t.Errorf("the operator got %d notices that the endpoint answers again, want 1: the one stored before the crash", n)
	}
}

// TestOutageGiveUpKeepsARestartsPromise: after a restart, the operator
// promised a word when the endpoint answers again is told instead that
// the calls stopped waiting (the re-run's call waited and gave up): as
// without the restart, that ends what it was told of the outage. After one
// more crash and restart an answered call must not tell it the endpoint
// answers again (its task, paused for the outage, says it resumed).
func TestOutageGiveUpKeepsARestartsPromise(t *testing.T) {
	var b2 *testbed
	ready := make(chan struct{})
	cfg, img, sc, alice, _ := outageCrashed(t, func(_ context.Context, in *ExecInput) *Output {
		<-ready
		waitOutLLM(b2, in)
		return gaveUp()
	})
	b2, store2 := restartFrozen(t, cfg, img, sc)
	close(ready)
	b2.waitFor("the operator told the calls stopped waiting", func() bool {
		return inboxCount(b2, b2.op(), "[LLM endpoint still unavailable]") == 1
	})
	store2.crash()
	img2 := crashed(t, b2, store2)
	b3 := restartFrom(t, cfg, img2, sc)
	b3.sc.onText("answered", answered)
	id := b3.inject(alice, b3.sys.baseTaskID, NoRelative, false, spec(SkillThink, "answered"))[0]
	b3.waitFor("alice's answered step", func() bool { return b3.stepDone(alice, id) })
	if n := inboxCount(b3, b3.op(), "[LLM endpoint available]"); n != 0 {
		t.Errorf("the operator, told the calls gave up on the endpoint, is told %d time(s) after a restart that it answers again", n)
	}
}
