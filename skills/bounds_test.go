package skills

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
)

// variableChars is what the prompt of in takes beyond its fixed part
// (the role and the static sections): the part PromptBudget bounds.
func variableChars(r *runner, in *engine.ExecInput) int {
	_, user := r.render(in)
	var role strings.Builder
	r.writeRole(&role, in)
	n := utf8.RuneCountInString(user) - utf8.RuneCountInString(role.String())
	for _, s := range r.static {
		n -= utf8.RuneCountInString(s)
	}
	return n
}

// TestFenceScanIsLinear: a degenerate answer (a model looping on
// backticks) inside a fenced block parses in linear time: 1 MB of backticks
// takes milliseconds (an answer may be up to 16 MB), not the minutes a
// rescan of the run from every position took.
func TestFenceScanIsLinear(t *testing.T) {
	in := "<planned_step>\n```json\n[" + strings.Repeat("`", 1<<20) + "]\n</planned_step>"
	done := make(chan error, 1)
	go func() {
		var v any
		done <- ExtractJSON(in, "planned_step", &v)
	}()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case err := <-done:
		if err == nil {
			t.Error("ExtractJSON accepted a run of backticks")
		}
	case <-timer.C:
		t.Fatal("ExtractJSON on 1 MB of backticks inside a fence still running after 10s (quadratic scan in closingFence)")
	}
}

// TestPromptBudgetPendingSteps: a stage with many pending steps keeps the
// prompt's variable part within PromptBudget: the first ones are listed,
// one line each, and the others counted.
func TestPromptBudgetPendingSteps(t *testing.T) {
	r := skillRunner(t, loadSet(t, "en"), engine.SkillReflection, 0)
	in := longStage(5)
	for i := range 300 {
		in.Agent.AgentStep.StepList = append(in.Agent.AgentStep.StepList,
			mkStep(fmt.Sprintf("p-%03d", i), "stage-1", engine.StepSkill, engine.SkillThink, engine.StateInit,
				"Examine another part of the data set carefully", "x"))
	}
	if n := variableChars(r, in); n > DefaultPromptBudget {
		t.Errorf("300 pending steps: variable part of the prompt is %d characters, budget %d", n, DefaultPromptBudget)
	}
}

// TestPromptBudgetLongIntention: an executed step's step_intention is cut
// in the history like its text, so one long intention does not break the
// budget.
func TestPromptBudgetLongIntention(t *testing.T) {
	r := skillRunner(t, loadSet(t, "en"), engine.SkillReflection, 0)
	in := longStage(5)
	in.Agent.AgentStep.StepList[4].StepIntention = strings.Repeat("intent ", 20000/7)
	if n := variableChars(r, in); n > DefaultPromptBudget {
		t.Errorf("a 20,000-character step_intention in the history: variable part is %d characters, budget %d", n, DefaultPromptBudget)
	}
}

// TestRepairEchoIsBounded: the repair round shows the model its rejected
// answer cut to its start and end (a runaway answer of 1 MB does not make
// the repair prompt 1 MB longer).
func TestRepairEchoIsBounded(t *testing.T) {
	bad := strings.Repeat("I cannot decide. ", (1<<20)/17)
	_, calls := execute(t, engine.SkillSummary, fixture(engine.SkillSummary), replyWith(bad), replyWith(tagged("summary", "done")))
	if len(calls) != 2 {
		t.Fatalf("got %d calls, want 2", len(calls))
	}
	size := func(c fakellm.Call) int {
		n := 0
		for _, m := range c.Messages {
			n += utf8.RuneCountInString(m.Content)
		}
		return n
	}
	if grown := size(calls[1]) - size(calls[0]); grown > DefaultPromptBudget {
		t.Errorf("repair prompt is %d characters longer than the first prompt (budget %d): the whole answer is echoed", grown, DefaultPromptBudget)
	}
}

// TestParseErrorsQuoteBoundedValues: a validation error quotes the model's
// bad value cut, so a huge bogus action or type does not end up whole in
// the repair request and the step's error.
func TestParseErrorsQuoteBoundedValues(t *testing.T) {
	huge := strings.Repeat("x", 100000)
	for _, tc := range []struct{ skill, answer string }{
		{engine.SkillTaskManager, tagged("task_instruction", `{"action": "`+huge+`"}`)},
		{engine.SkillAgentManager, tagged("agent_instruction", `{"action": "`+huge+`"}`)},
		{engine.SkillAskInfo, tagged("ask_info", `{"type": "`+huge+`"}`)},
		{engine.SkillInstructionGeneration, tagged("tool_instruction", `{"instruction_type": "`+huge+`"}`)},
	} {
		r := skillRunner(t, loadSet(t, "en"), tc.skill, 0)
		_, err := r.parse(tc.answer, fixture(tc.skill))
		if err == nil {
			t.Errorf("%s: accepted", tc.skill)
			continue
		}
		if n := len(err.Error()); n > 2000 {
			t.Errorf("%s: parse error is %d bytes (the model's value quoted whole): %.100s…", tc.skill, n, err)
		}
	}
}

// TestStepListIsBounded: one answer adds at most maxStepsPerList steps; a
// longer plan is refused with a message the repair round shows the model.
func TestStepListIsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("[")
	for i := range 5000 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"step_intention": "s%d", "type": "skill", "executor": "think", "text_content": "x"}`, i)
	}
	b.WriteString("]")
	r := skillRunner(t, loadSet(t, "en"), engine.SkillPlanning, 0)
	out, err := r.parse(tagged("planned_step", b.String()), fixture(engine.SkillPlanning))
	if err == nil {
		t.Fatalf("planning kept %d steps from one answer, no limit and no message to the model", len(out.AddSteps))
	}
	if want := fmt.Sprintf("5000 steps, more than the %d", maxStepsPerList); !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v, want it to say %q", err, want)
	}
}
