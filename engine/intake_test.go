package engine

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"
)

// intakeMax is the MaxTextChars of these tests: small, so that a text
// past it is cheap to make.
const intakeMax = 300

// clippedTo reports whether text was cut to max characters with the note.
func clippedTo(text string, max int) bool {
	return strings.Contains(text, "more characters dropped") && utf8.RuneCountInString(text) <= max+120
}

// TestPlannedStepTextsAreClippedAsTakenIn: the texts of every step a
// skill plans (a plan, a reflection's or decision's steps, react_action,
// get_more_info) are cut to MaxTextChars with the note as they are taken
// in, and so are its executor and type, which the rejection quotes. A
// step of 2 MB would otherwise pass NATS's 1 MiB alone.
func TestPlannedStepTextsAreClippedAsTakenIn(t *testing.T) {
	b := newTestbed(t, nil)
	max := b.sys.cfg.MaxTextChars
	alice := b.newAgent("alice")
	long := strings.Repeat("long ", max/5+100)
	b.sc.onText("PLAN", func(context.Context, *ExecInput) *Output {
		return &Output{AddSteps: []StepSpec{
			{StepIntention: "PLANNED " + long, Type: StepSkill, Executor: SkillThink, TextContent: "PLANNED " + long},
			{StepIntention: "odd", Type: StepSkill, Executor: long, TextContent: "odd"},
		}}
	})
	b.sc.onText("REACT", func(context.Context, *ExecInput) *Output {
		return &Output{ReactAction: &StepSpec{StepIntention: "REACTED " + long, TextContent: "REACTED " + long}}
	})
	var asked atomic.Bool // the send_message that comes again sends
	b.sc.onText("ASK", func(context.Context, *ExecInput) *Output {
		if asked.Swap(true) {
			return &Output{}
		}
		return &Output{GetMoreInfo: &StepSpec{StepIntention: "MORE " + long, TextContent: "MORE " + long}}
	})
	base, stage := b.sys.BaseTaskID(), b.sys.BaseStageID()
	ids := b.inject(alice, base, stage, false,
		spec(SkillPlanning, "PLAN"), spec(SkillProcessMessage, "REACT"), spec(SkillSendMessage, "ASK"))
	b.waitFor("the three steps", func() bool {
		return b.stepDone(alice, ids[0]) && b.stepDone(alice, ids[1]) && b.stepDone(alice, ids[2])
	})
	for _, prefix := range []string{"PLANNED ", "REACTED ", "MORE "} {
		got := b.steps(alice, func(s StepState) bool { return strings.HasPrefix(s.StepIntention, prefix) })
		if len(got) != 1 {
			t.Fatalf("%d steps whose intention starts with %q, want 1\n%s", len(got), prefix, b.dump())
		}
		if s := got[0]; !clippedTo(s.StepIntention, max) || !clippedTo(s.TextContent, max) {
			t.Errorf("the step %q holds an intention of %d characters and a text of %d: not cut to %d with the note",
				prefix, utf8.RuneCountInString(s.StepIntention), utf8.RuneCountInString(s.TextContent), max)
		}
	}
	plan, _ := b.step(alice, ids[0])
	rej, _ := plan.ExecuteResult["rejected_steps"].([]any)
	if len(rej) != 1 {
		t.Fatalf("the plan's rejected_steps: %.300v, want the step of the odd executor", plan.ExecuteResult["rejected_steps"])
	}
	r := rej[0].(map[string]any)
	exec := fmt.Sprint(r["step"].(map[string]any)["executor"])
	if reason := fmt.Sprint(r["reason"]); !strings.Contains(reason, "no such skill") || !clippedTo(exec, maxNameChars) || len(reason) > 1000 {
		t.Errorf("the odd executor (%d characters) was rejected with a reason of %d: %.200q", utf8.RuneCountInString(exec), len(reason), reason)
	}
}

// TestPlannedStepsPerAnswerAreBounded: one answer adds at most
// MaxPlannedSteps steps, whatever its executor returns: the surplus is
// rejected in one entry that says how many steps were ignored and the
// limit.
func TestPlannedStepsPerAnswerAreBounded(t *testing.T) {
	b := newTestbed(t, nil)
	alice := b.newAgent("alice")
	b.sc.onText("PLAN", func(context.Context, *ExecInput) *Output {
		var specs []StepSpec
		for i := range MaxPlannedSteps + 50 {
			specs = append(specs, StepSpec{StepIntention: fmt.Sprintf("MANY %d", i), Type: StepSkill, Executor: SkillQuickThink, TextContent: "hold"})
		}
		return &Output{AddSteps: specs}
	})
	// The steps planned are held at their first: only how many were
	// added is looked at.
	hold := make(chan struct{})
	defer close(hold)
	b.sc.onText("hold", func(ctx context.Context, _ *ExecInput) *Output {
		select {
		case <-hold:
		case <-ctx.Done():
		}
		return &Output{}
	})
	id := b.inject(alice, b.sys.BaseTaskID(), b.sys.BaseStageID(), false, spec(SkillPlanning, "PLAN"))[0]
	b.waitFor("the plan", func() bool { return b.stepDone(alice, id) })
	if n := len(b.steps(alice, func(s StepState) bool { return strings.HasPrefix(s.StepIntention, "MANY ") })); n != MaxPlannedSteps {
		t.Errorf("the plan of %d steps added %d, want %d", MaxPlannedSteps+50, n, MaxPlannedSteps)
	}
	plan, _ := b.step(alice, id)
	rej, _ := plan.ExecuteResult["rejected_steps"].([]any)
	if len(rej) != 1 {
		t.Fatalf("rejected_steps holds %d entries, want one for the surplus: %.300v", len(rej), plan.ExecuteResult["rejected_steps"])
	}
	reason := fmt.Sprint(rej[0].(map[string]any)["reason"])
	if !strings.Contains(reason, "50 steps") || !strings.Contains(reason, fmt.Sprint(MaxPlannedSteps)) {
		t.Errorf("the surplus's rejection %q names neither the 50 steps ignored nor the limit", reason)
	}
}
