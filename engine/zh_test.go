package engine

import (
	"strings"
	"testing"

	"github.com/mas-mcp/mas-mcp/prompts"
)

// TestChineseEngineTexts: in zh mode the texts the engine writes itself —
// the base task's name, intention and goal, the instruction_generation step
// it pairs with a tool step, the shared-info line of a step, the reasons of
// the steps it adds — are Chinese (issue 14 item 7).
func TestChineseEngineTexts(t *testing.T) {
	zh, err := prompts.Load("zh", "")
	if err != nil {
		t.Fatal(err)
	}
	s := bareSystem(t, func(c *Config) { c.Texts = zh })
	ag := &AgentState{AgentID: "a-1", Skills: []string{SkillPlanning, SkillReflection, SkillSummary, SkillInstructionGeneration}, Tools: []string{"search"}}
	kept, rej := s.checkPlan(ag, SkillPlanning, []StepSpec{{StepIntention: "检索资料", Type: StepTool, Executor: "search", TextContent: "检索"}})
	if len(rej) != 0 || len(kept) != 3 {
		t.Fatalf("checkPlan kept %d steps (%v), rejected %v; want instruction_generation, tool, reflection", len(kept), kept, rej)
	}
	got := map[string]string{
		"base task name":      s.cfg.BaseTaskName,
		"base task intention": s.cfg.BaseTaskIntention,
		"base stage goal":     s.cfg.BaseStageGoal,
		"paired intention":    kept[0].StepIntention,
		"added reflection":    kept[2].TextContent,
		"shared info":         s.text("shared_info_step", map[string]any{"Executor": "think", "State": StateFailed, "Reason": "超时"}),
	}
	if got["base task name"] != "MAS基础任务进程" {
		t.Errorf("base task name = %q, want MAS基础任务进程 (as the zh system prompt calls it)", got["base task name"])
	}
	for what, text := range got {
		for _, w := range []string{"Generate", "step", "base task", "plan ends", "failed", "Keep the MAS", "Answer the operator"} {
			if strings.Contains(text, w) {
				t.Errorf("%s = %q holds English %q", what, text, w)
			}
		}
	}
}

// TestChineseAskInfo: in zh mode an ask_info answer's own labels (headings,
// empty lists, the template hint, the lines of an agent and of a step) are
// Chinese; only field names, IDs and state values stay as they are.
func TestChineseAskInfo(t *testing.T) {
	zh, err := prompts.Load("zh", "")
	if err != nil {
		t.Fatal(err)
	}
	b := newTestbed(t, func(c *Config) {
		c.Texts, c.SkillGuides, c.Templates = zh, zh.SkillGuides(), templatesOf(zh)
	})
	w1 := b.newAgent("w1")
	task := b.newTask("报告", w1)
	stage := b.addStages(task, StageSpec{StageIntention: "收集资料", AgentAllocation: map[string]string{w1: "目标一"}})[0]
	b.waitFor("w1 to finish its stage", func() bool { return b.stage(task, stage).EveryAgentState[w1] == AgentFinished })
	b.settle()
	steps := b.agent(w1).AgentStep.StepList
	if len(steps) == 0 {
		t.Fatal("w1 has no steps")
	}
	queries := []AskInfoQuery{
		{Type: QueryAvailableAgentsConfig},
		{Type: QuerySkillsAndTools},
		{Type: QueryTaskInfo, TaskID: task},
		{Type: QueryStageAgents, TaskID: task, StageID: stage},
		{Type: QueryAgent, AgentID: StringList{w1}},
		{Type: QueryAgent, AgentID: StringList{w1}, StepID: steps[0].StepID},
		{Type: QueryManagedTaskAndStageInfo},
	}
	// The labels the engine writes in English mode (field names such as
	// profile, skills and execution_state are the protocol's and stay).
	english := []string{"(none", "- template ", "Create an agent", "newest", "stage goal", "of agent", "- state:",
		"- kind:", "waiting ID", "pending steps", "- steps (", "#### skills", "#### tools"}
	for _, q := range queries {
		res, err := b.sys.Query(w1, q)
		if err != nil {
			t.Fatalf("Query(%+v): %v", q, err)
		}
		for _, w := range english {
			if strings.Contains(res.Markdown, w) {
				t.Errorf("ask_info %s answer holds English %q:\n%s", q.Type, w, res.Markdown)
			}
		}
	}
}
