package skills

import (
	"cmp"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/prompts"
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

// atTextLimit is a text at the engine's MaxTextChars (16,000 characters),
// half of them three-byte runes, starting with a marker to find its
// beginning by.
func atTextLimit() string {
	const begin = "BEGIN-OF-LONG-TEXT "
	s := begin + strings.Repeat("任务 step ", 16000)
	return string([]rune(s)[:16000])
}

// TestPromptBudgetIsACap: whatever the current step holds — a text, an
// intention, a stage goal, a tool step or a memory at the engine's text
// limit (MaxTextChars), next to a history at its own limits — the prompt's
// variable part stays within the budget in every skill; a cut part keeps
// its beginning, on a rune boundary, and says how much was dropped. (The
// budgets tested: the default, and smaller ones down to 3,000, the least
// the cap holds for.)
func TestPromptBudgetIsACap(t *testing.T) {
	long := atTextLimit()
	toolStep := func(in *engine.ExecInput) *engine.StepState {
		for i, s := range in.Agent.AgentStep.StepList {
			if s.Type == engine.StepTool && s.ExecutionState == engine.StateInit {
				return &in.Agent.AgentStep.StepList[i]
			}
		}
		return nil
	}
	// atLimits fills every executed step of the stage to the engine's
	// limits: its texts, its instruction and its result.
	atLimits := func(in *engine.ExecInput) {
		for i, s := range in.Agent.AgentStep.StepList {
			if s.StageID != in.Step.StageID || s.TaskID != in.Step.TaskID || s.StepID == in.Step.StepID || s.ExecutionState != engine.StateFinished {
				continue
			}
			st := &in.Agent.AgentStep.StepList[i]
			st.StepIntention, st.TextContent = long, long
			st.ExecuteResult = map[string]any{"result": long}
			if st.Type == engine.StepTool {
				st.InstructionContent = &engine.ToolCall{ToolName: "read_file", Arguments: map[string]any{"path": long}}
			}
		}
	}
	cases := []struct {
		what   string
		change func(in *engine.ExecInput)
		// shown says whether the skill's prompt shows the long text.
		shown func(skill string) bool
	}{
		{"text_content", func(in *engine.ExecInput) { in.Step.TextContent = long }, nil},
		{"step_intention", func(in *engine.ExecInput) { in.Step.StepIntention = long }, nil},
		{"stage_goal", func(in *engine.ExecInput) { in.View = fixtureView{goal: long} }, nil},
		{"text_content, step_intention and stage_goal", func(in *engine.ExecInput) {
			in.Step.TextContent, in.Step.StepIntention, in.View = long, long, fixtureView{goal: long}
		}, nil},
		{"tool step", func(in *engine.ExecInput) {
			if s := toolStep(in); s != nil {
				s.StepIntention, s.TextContent = long, long
			}
		}, func(skill string) bool { return skill == engine.SkillInstructionGeneration }},
		{"memory", func(in *engine.ExecInput) { in.Agent.PersistentMemory["20250614T000000"] = long }, nil},
		{"text_content and a history at its limits", func(in *engine.ExecInput) {
			in.Step.TextContent = long
			atLimits(in)
		}, nil},
	}
	clipped := map[string]string{"en": "more characters dropped", "zh": "个字符被舍弃"}
	for _, lang := range prompts.Languages {
		set := loadSet(t, lang)
		for _, name := range engine.SkillNames {
			for _, tc := range cases {
				for _, budget := range []int{0, 6000, 3000} {
					in := fixture(name)
					tc.change(in)
					r := skillRunner(t, set, name, budget)
					_, user := r.render(in)
					if !utf8.ValidString(user) {
						t.Errorf("%s %s, long %s: the prompt is not valid UTF-8 (a rune cut in two)", lang, name, tc.what)
					}
					if tc.shown == nil || tc.shown(name) {
						if !strings.Contains(user, "BEGIN-OF-LONG-TEXT") {
							t.Errorf("%s %s, long %s: the beginning of the long text is not in the prompt", lang, name, tc.what)
						}
						if !strings.Contains(user, clipped[lang]) {
							t.Errorf("%s %s, long %s: the prompt does not say what was cut", lang, name, tc.what)
						}
					}
					if n, max := variableChars(r, in), cmp.Or(budget, DefaultPromptBudget); n > max {
						t.Errorf("%s %s, long %s: variable part of the prompt is %d characters, budget %d", lang, name, tc.what, n, max)
					}
				}
			}
		}
	}
}
