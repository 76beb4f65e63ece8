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

// TestModelInstructionTextsAreBoundedAsTakenIn: the free texts of a task
// or agent instruction a model wrote (stage intentions, goals, a profile,
// a role) are cut to MaxTextChars with the note as they are taken in;
// a name or an ID past its bound, or a list past its, fails the step
// with an error naming the field and the limit, and changes nothing.
func TestModelInstructionTextsAreBoundedAsTakenIn(t *testing.T) {
	b := newTestbed(t, func(c *Config) { c.MaxTextChars = intakeMax })
	alice := b.newAgent("alice")
	task := b.newTask("t", alice)
	long := strings.Repeat("long ", 1000)
	outputs := map[string]*Output{
		"STAGE": {TaskInstruction: &TaskInstruction{Action: ActionAddStage, TaskID: task, Stages: []StageSpec{
			{StageIntention: "STAGED " + long, AgentAllocation: map[string]string{alice: "GOAL " + long}}}}},
		"STAFF": {AgentInstruction: &AgentInstruction{Action: ActionInitNewAgent, AgentConfig: &AgentConfig{
			Template: "researcher", Name: "bob", Role: "ROLE " + long, Profile: "PROFILE " + long}}},
		"NAMED": {AgentInstruction: &AgentInstruction{Action: ActionInitNewAgent, AgentConfig: &AgentConfig{
			Template: "researcher", Name: strings.Repeat("n", maxNameChars+1)}}},
		"TASKID": {TaskInstruction: &TaskInstruction{Action: ActionFinishTask, TaskID: strings.Repeat("t", 100_000), Summary: "done"}},
		"MANY":   {TaskInstruction: &TaskInstruction{Action: ActionAddStage, TaskID: task, Stages: make([]StageSpec, maxInstructionItems+1)}},
	}
	for text, out := range outputs {
		b.sc.onText(text, func(context.Context, *ExecInput) *Output { return out })
	}
	mgr := b.mgr()
	ids := map[string]string{}
	for _, text := range []string{"STAGE", "STAFF", "NAMED", "TASKID", "MANY"} {
		exec := SkillTaskManager
		if outputs[text].AgentInstruction != nil {
			exec = SkillAgentManager
		}
		ids[text] = b.inject(mgr, task, NoRelative, false, spec(exec, text))[0]
	}
	b.waitFor("the manager's steps", func() bool {
		for _, id := range ids {
			if !b.stepDone(mgr, id) {
				return false
			}
		}
		return true
	})
	for _, text := range []string{"STAGE", "STAFF"} {
		if st, _ := b.step(mgr, ids[text]); st.ExecutionState != StateFinished {
			t.Errorf("the %s step is %s: %v", text, st.ExecutionState, st.ExecuteResult["error"])
		}
	}
	stages := b.task(task).StageList
	if len(stages) != 1 {
		t.Fatalf("the task has %d stages, want the one added", len(stages))
	}
	if sg := stages[0]; !clippedTo(sg.StageIntention, intakeMax) || !clippedTo(sg.AgentAllocation[alice], intakeMax) {
		t.Errorf("the stage's intention (%d characters) and goal (%d) are not cut to %d with the note",
			utf8.RuneCountInString(sg.StageIntention), utf8.RuneCountInString(sg.AgentAllocation[alice]), intakeMax)
	}
	bob, ok := b.sys.Agent(b.agentNamed("bob"))
	if !ok {
		t.Fatalf("bob was not created\n%s", b.dump())
	}
	if !clippedTo(bob.Role, intakeMax) || !clippedTo(bob.Profile, intakeMax) {
		t.Errorf("bob's role (%d characters) and profile (%d) are not cut to %d with the note",
			utf8.RuneCountInString(bob.Role), utf8.RuneCountInString(bob.Profile), intakeMax)
	}
	for text, want := range map[string][]string{
		"NAMED":  {"agent_config.name", fmt.Sprint(maxNameChars+1, " characters"), fmt.Sprint(maxNameChars)},
		"TASKID": {"task_id", "100000 characters", fmt.Sprint(maxNameChars)},
		"MANY":   {"stages", fmt.Sprint(maxInstructionItems+1, " items"), fmt.Sprint(maxInstructionItems)},
	} {
		st, _ := b.step(mgr, ids[text])
		errText, _ := st.ExecuteResult["error"].(string)
		if st.ExecutionState != StateFailed {
			t.Errorf("the %s step is %s, want failed", text, st.ExecutionState)
		}
		for _, w := range want {
			if !strings.Contains(errText, w) {
				t.Errorf("the %s step's error %.300q does not name %q", text, errText, w)
			}
		}
		if len(errText) > 1000 {
			t.Errorf("the %s step's error is %d bytes: it quotes what it refuses", text, len(errText))
		}
	}
	if b.agentNamed(strings.Repeat("n", maxNameChars+1)) != "" {
		t.Error("the agent of the name past the bound was created")
	}
}

// TestMemoryOpsPerStepAreBounded: a step applies at most maxMemoryOps
// persistent-memory ops; the surplus is reported in one line naming
// persistent_memory and the limit, so the step's result stays small
// whatever the model wrote.
func TestMemoryOpsPerStepAreBounded(t *testing.T) {
	b := newTestbed(t, func(c *Config) { c.Now = fixedClock })
	alice := b.newAgent("alice")
	const ops = 1000
	b.sc.onText("remember", func(context.Context, *ExecInput) *Output {
		out := &Output{Result: map[string]any{"think": "a thought"}}
		out.Memory = append(out.Memory, MemoryOp{Add: "kept"})
		for i := range ops - 1 {
			out.Memory = append(out.Memory, MemoryOp{Delete: fmt.Sprintf("20260101T%06d", i)})
		}
		return out
	})
	id := b.inject(alice, b.sys.BaseTaskID(), b.sys.BaseStageID(), false, spec(SkillThink, "remember"))[0]
	b.waitFor("the step", func() bool { return b.stepDone(alice, id) })
	st, _ := b.step(alice, id)
	if st.ExecutionState != StateFinished || st.ExecuteResult["think"] != "a thought" {
		t.Fatalf("the step is %s with %.200v, want finished with its thought", st.ExecutionState, st.ExecuteResult)
	}
	report, _ := st.ExecuteResult["persistent_memory"].([]any)
	if len(report) != maxMemoryOps+1 {
		t.Fatalf("the report holds %d lines, want one per op applied (%d) and one for the rest", len(report), maxMemoryOps)
	}
	want := fmt.Sprintf("%d more persistent_memory operations were ignored: at most %d per step", ops-maxMemoryOps, maxMemoryOps)
	if last := fmt.Sprint(report[len(report)-1]); !strings.Contains(last, want) {
		t.Errorf("the report's last line is %q, want it to say %q", last, want)
	}
	if got := b.agent(alice).PersistentMemory; len(got) != 1 {
		t.Errorf("persistent memory holds %d entries, want the one added", len(got))
	}
}

// TestToolCallArgumentsAreBoundedAsTakenIn: a tool call a model wrote
// (instruction_generation's) goes onto its tool step whole, into the
// agent's document: arguments past maxToolArgBytes are refused, naming
// the field, the size and the limit, without quoting them (cut, they
// would be another call); a name past its bound too. A call within them
// is taken as it is.
func TestToolCallArgumentsAreBoundedAsTakenIn(t *testing.T) {
	b := newTestbed(t, nil)
	call := func(args map[string]any, tool string) *Output {
		return &Output{ToolInstruction: &ToolInstruction{StepID: "s", Instruction: &ToolCall{ToolName: tool, Arguments: args}}}
	}
	fine := call(map[string]any{"path": "a.txt", "content": strings.Repeat("x", 1000)}, "write_file")
	if err := b.sys.takeOutput(fine); err != nil {
		t.Errorf("a call of 1 KB: %v", err)
	}
	big := strings.Repeat("é", maxToolArgBytes/2+1)
	for name, out := range map[string]*Output{
		"arguments": call(map[string]any{"content": big}, "write_file"),
		"tool_name": call(nil, strings.Repeat("t", maxNameChars+1)),
	} {
		err := b.sys.takeOutput(out)
		if err == nil {
			t.Errorf("%s past its bound: taken", name)
			continue
		}
		for _, w := range []string{"instruction_content." + name, "limit"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %.300q does not name %q", name, err, w)
			}
		}
		if len(err.Error()) > 1000 {
			t.Errorf("%s: the error is %d bytes: it quotes what it refuses", name, len(err.Error()))
		}
	}
}
