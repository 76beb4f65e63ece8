package skills

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/prompts"
)

// longStage is a think step after n executed steps with 1.5 kB results;
// every tenth step, from the fourth on, failed.
func longStage(n int) *engine.ExecInput {
	in := &engine.ExecInput{Agent: testAgent()}
	in.Agent.PersistentMemory = map[string]string{}
	for i := range n {
		state := engine.StateFinished
		if i%10 == 3 {
			state = engine.StateFailed
		}
		s := withResult(mkStep(fmt.Sprintf("step-%02d", i), "stage-1", engine.StepSkill, engine.SkillThink, state,
			fmt.Sprintf("Examine part %d", i), "Examine the next part."),
			map[string]any{"think": fmt.Sprintf("result %d: ", i) + strings.Repeat("x", 1500)})
		in.Agent.AgentStep.StepList = append(in.Agent.AgentStep.StepList, s)
	}
	cur := mkStep("step-cur", "stage-1", engine.StepSkill, engine.SkillThink, engine.StateRunning, "Examine the last part", "Go on.")
	in.Agent.AgentStep.StepList = append(in.Agent.AgentStep.StepList, cur)
	in.Step = cur
	return in
}

func budgetRunner(t *testing.T, set *prompts.Set, budget int) *runner {
	t.Helper()
	return skillRunner(t, set, engine.SkillThink, budget)
}

// skillRunner is the runner of one skill with the set and the given
// PromptBudget (0: the default).
func skillRunner(t *testing.T, set *prompts.Set, name string, budget int) *runner {
	t.Helper()
	ex, err := Executors(Config{LLM: fakellm.NewInstant(nil), Prompts: set, Tools: testCatalog, PromptBudget: budget})
	if err != nil {
		t.Fatalf("Executors: %v", err)
	}
	return ex[name].(*runner)
}

// TestHistoryFolding: with the budget reached, the newest steps stay whole,
// older ones fold to one line each, the oldest into a digest that counts
// them; the prompt stops growing; the same input renders the same bytes.
func TestHistoryFolding(t *testing.T) {
	for _, lang := range prompts.Languages {
		t.Run(lang, func(t *testing.T) {
			set := loadSet(t, lang)
			r := budgetRunner(t, set, 8000)
			_, user20 := r.render(longStage(20))
			_, user60 := r.render(longStage(60))
			if _, again := r.render(longStage(60)); again != user60 {
				t.Error("the same input rendered two different prompts")
			}
			// Whole: the newest step's full result; folded: an older step's
			// one line; digest: the oldest steps counted.
			if !strings.Contains(user60, "result 59: "+strings.Repeat("x", 1500)) {
				t.Error("the newest step is not shown whole")
			}
			// Which steps fold depends on the fold blocks (foldHistory); at
			// this budget step 52 starts a block of one-line steps.
			if strings.Contains(user60, "result 52: "+strings.Repeat("x", 200)) {
				t.Error("step 52 is shown whole, want it folded")
			}
			if !strings.Contains(user60, "- step_id step-52 [finished] think: Examine part 52 → ") {
				t.Error("step 52 has no one-line form")
			}
			if strings.Contains(user60, "step-00") {
				t.Error("the oldest step is listed, want it counted in the digest")
			}
			if !strings.Contains(user60, set.Heading("history_folded")) {
				t.Error("the note on folded steps (ask_info) is missing")
			}
			digest := ""
			for l := range strings.Lines(user60) {
				if strings.Contains(l, "step-") || !strings.HasPrefix(l, "- ") {
					continue
				}
				if strings.Contains(l, "finished") || strings.Contains(l, "已完成") {
					digest = l
				}
			}
			if digest == "" {
				t.Fatal("no digest line")
			}
			// Check the counts against the template, for the steps it omitted.
			omitted := 0
			for i := range 60 {
				if !strings.Contains(user60, fmt.Sprintf("step-%02d ", i)) {
					omitted++
				}
			}
			failed := 0
			for i := range omitted {
				if i%10 == 3 {
					failed++
				}
			}
			want := set.Text("history_digest", map[string]any{"N": omitted, "Finished": omitted - failed, "Failed": failed}) + "\n"
			if digest != want {
				t.Errorf("digest = %q, want %q", digest, want)
			}
			// Flat: 40 more steps add at most 10%.
			n20, n60 := utf8.RuneCountInString(user20), utf8.RuneCountInString(user60)
			if float64(n60) > 1.1*float64(n20) {
				t.Errorf("prompt grew from %d to %d characters over 40 more steps", n20, n60)
			}
		})
	}
}

// TestHistoryWithinBudget: a short history under the budget is shown whole,
// without the folding note.
func TestHistoryWithinBudget(t *testing.T) {
	set := loadSet(t, "en")
	_, user := budgetRunner(t, set, 0).render(longStage(3))
	for i := range 3 {
		if !strings.Contains(user, fmt.Sprintf("result %d: ", i)+strings.Repeat("x", 1500)) {
			t.Errorf("step %d is not shown whole", i)
		}
	}
	if strings.Contains(user, set.Heading("history_folded")) {
		t.Error("the folding note is shown though nothing was folded")
	}
}

func TestPromptBudgetNegative(t *testing.T) {
	_, err := Executors(Config{LLM: fakellm.NewInstant(nil), Prompts: loadSet(t, "en"), PromptBudget: -1})
	if err == nil || !strings.Contains(err.Error(), "PromptBudget") {
		t.Errorf("Executors with PromptBudget -1: error %v, want one naming PromptBudget", err)
	}
}

// TestMemoryFullNotice: an agent whose last memory add was refused is told,
// in every language, that its memory is full; otherwise not.
func TestMemoryFullNotice(t *testing.T) {
	for _, lang := range prompts.Languages {
		set := loadSet(t, lang)
		r := budgetRunner(t, set, 0)
		for _, full := range []bool{false, true} {
			in := longStage(1)
			in.Agent.MemoryFull = full
			_, user := r.render(in)
			if got := strings.Contains(user, set.Heading("memory_full")); got != full {
				t.Errorf("%s: MemoryFull %v: notice shown = %v", lang, full, got)
			}
		}
	}
}

// TestHistoryFoldsInBlocks: folding moves in blocks, so that most
// consecutive prompts of a long stage share their history's beginning byte
// for byte (a provider's prompt cache serves it) instead of differing from
// the digest line on. (Without blocks none of them does.)
func TestHistoryFoldsInBlocks(t *testing.T) {
	set := loadSet(t, "en")
	r := budgetRunner(t, set, 8000)
	history := func(n int) string {
		_, user := r.render(longStage(n))
		return user[strings.Index(user, set.Heading("executed")):strings.Index(user, set.Heading("pending"))]
	}
	shared, pairs := 0, 0
	prev := history(30)
	for n := 31; n <= 60; n++ {
		cur := history(n)
		common := 0
		for common < len(prev) && common < len(cur) && prev[common] == cur[common] {
			common++
		}
		if common >= len(prev)/2 {
			shared++
		}
		pairs++
		prev = cur
	}
	if shared*3 < pairs {
		t.Errorf("%d of %d consecutive histories share at least half their beginning, want a third", shared, pairs)
	}
}
