package skills

import (
	"context"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/llm"
	"github.com/mas-mcp/mas-mcp/prompts"
)

var update = flag.Bool("update", false, "rewrite golden files")

// Golden files hold the system message, then the user message, each under
// one of these separator lines (neither occurs in any prompt).
const (
	goldenSystemSep = "======== system message ========"
	goldenUserSep   = "======== user message ========"
)

// Markers that only steps the prompt must never show carry.
const (
	markOtherStage = "OTHER-STAGE-MARKER"
	markOtherTask  = "OTHER-TASK-MARKER"
	markOldChain   = "OLD-CHAIN-MARKER"
)

var t0 = time.Date(2025, 6, 13, 10, 30, 22, 0, time.UTC)

// fakeCatalog is a ToolCatalog with fixed guides.
type fakeCatalog map[string]string

func (c fakeCatalog) ToolGuides() map[string]string { return c }

var testCatalog = fakeCatalog{
	"filesystem": "Read, write and list files under /data.",
	"web_search": "Search the web and return the top results with their links.",
}

// promptSets caches the loaded prompt sets: a Set is immutable and safe for
// concurrent use, and loading one under -race takes a while.
var promptSets = map[string]func() (*prompts.Set, error){
	"en": sync.OnceValues(func() (*prompts.Set, error) { return prompts.Load("en", "") }),
	"zh": sync.OnceValues(func() (*prompts.Set, error) { return prompts.Load("zh", "") }),
}

func loadSet(t testing.TB, lang string) *prompts.Set {
	t.Helper()
	load, ok := promptSets[lang]
	if !ok {
		t.Fatalf("no prompt set %q in the test cache", lang)
	}
	set, err := load()
	if err != nil {
		t.Fatalf("prompts.Load(%q): %v", lang, err)
	}
	return set
}

// newTestRunner returns the runner of one skill, built by Executors so that
// every field the constructor fills (logger, guides) is set as in production.
func newTestRunner(t testing.TB, set *prompts.Set, name string, client llm.Client) *runner {
	t.Helper()
	if client == nil {
		client = fakellm.NewInstant(nil)
	}
	ex, err := Executors(Config{LLM: client, Prompts: set, Tools: testCatalog})
	if err != nil {
		t.Fatalf("Executors: %v", err)
	}
	r, ok := ex[name].(*runner)
	if !ok {
		t.Fatalf("executor of %s is %T, want *runner", name, ex[name])
	}
	if r.sk.name != name {
		t.Fatalf("executor of %s runs skill %s", name, r.sk.name)
	}
	return r
}

// mkStep builds a step of agent-1 in task-1.
func mkStep(id, stage, typ, executor, state, intention, text string) engine.StepState {
	s := engine.StepState{
		TaskID: "task-1", StageID: stage, AgentID: "agent-1", StepID: id,
		StepIntention: intention, Type: typ, Executor: executor, ExecutionState: state,
		TextContent: text, CreatedAt: t0,
	}
	if state != engine.StateInit {
		s.StartedAt = t0.Add(time.Minute)
	}
	return s
}

func withResult(s engine.StepState, r map[string]any) engine.StepState {
	s.ExecuteResult = r
	return s
}

func withInstruction(s engine.StepState, ins *engine.ToolCall) engine.StepState {
	s.InstructionContent = ins
	return s
}

// testAgent is agent-1 "Alice" without steps. Its skills are listed out of
// spec order on purpose: the role section lists them in spec order.
func testAgent() engine.AgentState {
	temp := float32(0.2)
	return engine.AgentState{
		AgentID: "agent-1", Name: "Alice", Role: "Researcher",
		Profile:      "Finds, reads and condenses information on a topic, preferring primary and recent sources.",
		WorkingState: engine.WorkingWorking,
		LLMConfig:    &engine.LLMConfig{Model: "test-model", Temperature: &temp, MaxTokens: 2048},
		WorkingMemory: map[string]map[string][]string{
			"task-1": {"stage-1": {"step-3", "step-4", "step-5"}},
		},
		PersistentMemory: map[string]string{
			"20250613T103022": "The operator wants every report saved under /data/reports.",
			"20250612T090000": "### Team\nBob (agent-2) writes the final report.\nCarol (agent-3) reviews it.",
		},
		AgentStep: engine.AgentStep{AgentID: "agent-1"},
		Skills: []string{
			"send_message", "planning", "reflection", "summary", "think", "quick_think",
			"process_message", "instruction_generation", "tool_decision", "ask_info", "decision",
			"task_manager", "agent_manager",
		},
		Tools:     []string{"web_search", "filesystem"},
		Kind:      engine.KindLLM,
		CreatedAt: t0, UpdatedAt: t0,
	}
}

// otherSteps are steps the prompt of a stage-1 step must never show: one of
// an earlier stage, one of another task with the same stage ID.
func otherSteps() (before, after []engine.StepState) {
	s0 := withResult(mkStep("step-0", "stage-0", engine.StepSkill, engine.SkillSummary, engine.StateFinished,
		"Summarise my work in stage-0 "+markOtherStage, "Summarise what I did "+markOtherStage),
		map[string]any{"summary": "Collected the brief " + markOtherStage})
	x1 := mkStep("step-x1", "stage-1", engine.StepSkill, engine.SkillThink, engine.StateInit,
		"Think about "+markOtherTask, "This step belongs to task-2 "+markOtherTask)
	x1.TaskID = "task-2"
	s9 := mkStep("step-9", "stage-2", engine.StepSkill, engine.SkillPlanning, engine.StateInit,
		"Plan stage-2 "+markOtherStage, "Later stage "+markOtherStage)
	return []engine.StepState{s0}, []engine.StepState{x1, s9}
}

// currentStep is the running step-3 of each skill with a realistic intention
// and text (tool_decision and instruction_generation have their own lists).
var currentStep = map[string][2]string{
	engine.SkillPlanning: {"Plan my part of stage stage-1: collect sources on MCP adoption",
		"A stage of task \"MCP report\" (task_id: task-1) has started and you are allocated to it.\n\nYour own goal in this stage:\nCollect five recent sources on the adoption of the Model Context Protocol and send the list to Bob (agent-2)."},
	engine.SkillReflection: {"Reflect on my progress in this stage",
		"Compare the steps executed so far with your goal in this stage. Add the steps that are still needed, ending with reflection, or end with summary."},
	engine.SkillSummary: {"Summarise my work in this stage",
		"Summarise what you did in this stage and what came out of it, and state honestly what remains undone."},
	engine.SkillThink: {"Rank the sources found so far",
		"Rank the sources found so far by relevance to MCP adoption and say which ones are primary."},
	engine.SkillQuickThink: {"Write search queries",
		"Write three web search queries about MCP adoption in 2025."},
	engine.SkillSendMessage: {"Send the source list to Bob",
		"Send Bob (agent-2) the list of sources with one line on each. He does not need to reply."},
	engine.SkillProcessMessage: {"Process the message from agent Bob (agent-2)",
		"Message from agent Bob (agent_id: agent-2); it needs no reply:\n----- message -----\n# Draft outline\n## Part 1: Adoption\nWho uses MCP today.\n## Part 2: Risks\nWhat can go wrong.\n----- end of message -----"},
	engine.SkillTaskManager: {"Add a review stage",
		"Add a stage to task task-1 in which Carol (agent-3) reviews the report Bob writes."},
	engine.SkillAgentManager: {"Create a reviewer",
		"Create a reviewer agent from the reviewer template and add it to task task-1."},
	engine.SkillAskInfo: {"Find the agents of this task",
		"Find out which agents take part in task task-1."},
	engine.SkillDecision: {"React to Bob's request",
		"Bob (agent-2) needs the source list before noon; decide what to do before the next step."},
}

// fixture returns the ExecInput of each skill's golden prompt.
func fixture(name string) *engine.ExecInput {
	a := testAgent()
	before, after := otherSteps()
	var steps []engine.StepState
	var cur engine.StepState
	switch name {
	case engine.SkillInstructionGeneration:
		cur = mkStep("step-3", "stage-1", engine.StepSkill, name, engine.StateRunning,
			"Generate the call for: save the source list",
			"Save the source list of this stage to /data/reports/sources.md.")
		cur.TargetStepID = "step-4"
		steps = []engine.StepState{
			withResult(mkStep("step-1", "stage-1", engine.StepSkill, engine.SkillPlanning, engine.StateFinished,
				"Plan my part of stage stage-1", "Collect five recent sources and save them."),
				map[string]any{"planned_step": []any{map[string]any{"step_intention": "Save the source list", "type": "tool", "executor": "filesystem"}}}),
			withResult(mkStep("step-2", "stage-1", engine.StepSkill, engine.SkillQuickThink, engine.StateFinished,
				"List the sources", "List five sources."),
				map[string]any{"quick_think": "1. modelcontextprotocol.io\n2. github.com/modelcontextprotocol"}),
			cur,
			mkStep("step-4", "stage-1", engine.StepTool, "filesystem", engine.StateInit,
				"Save the source list",
				"Write the five sources, one per line, to /data/reports/sources.md."),
			mkStep("step-5", "stage-1", engine.StepSkill, engine.SkillReflection, engine.StateInit,
				"Reflect on my progress in this stage", "Check the list was saved."),
		}
	case engine.SkillToolDecision:
		cur = mkStep("step-7", "stage-1", engine.StepSkill, name, engine.StateRunning,
			"Decide on the next call of filesystem",
			"<tool_name>filesystem</tool_name>\nThe tool step step-6 of MCP server filesystem has finished; its result is in the tool history.")
		steps = []engine.StepState{
			// An earlier, finished use of the same tool, cut off by a reflection.
			withInstruction(withResult(mkStep("step-a", "stage-1", engine.StepTool, "filesystem", engine.StateFinished,
				"List /data "+markOldChain, "List the files "+markOldChain),
				map[string]any{"content": []any{map[string]any{"type": "text", "text": "reports/ " + markOldChain}}}),
				&engine.ToolCall{ToolName: "list_directory", Arguments: map[string]any{"path": "/data"}}),
			withResult(mkStep("step-b", "stage-1", engine.StepSkill, engine.SkillReflection, engine.StateFinished,
				"Reflect on my progress in this stage", "Compare the steps with the goal."),
				map[string]any{"reflection_step": []any{}}),
			withResult(mkStep("step-2", "stage-1", engine.StepSkill, engine.SkillInstructionGeneration, engine.StateFinished,
				"Generate the call for: read the report", "Read /data/report.md."),
				map[string]any{"instruction_generation": map[string]any{"instruction_type": "get_description"}, "tool_step_id": "step-3"}),
			withInstruction(withResult(mkStep("step-3", "stage-1", engine.StepTool, "filesystem", engine.StateFinished,
				"Read the report", "Read /data/report.md and quote its findings."),
				map[string]any{"capabilities_list_description": map[string]any{"tools": map[string]any{"read_file": map[string]any{"description": "Read the complete contents of a file"}}}}),
				&engine.ToolCall{InstructionType: "get_description"}),
			withResult(mkStep("step-4", "stage-1", engine.StepSkill, engine.SkillToolDecision, engine.StateFinished,
				"Decide on the next call of filesystem", "<tool_name>filesystem</tool_name>"),
				map[string]any{"tool_decision": []any{
					map[string]any{"step_intention": "Prepare the read_file call", "type": "skill", "executor": "instruction_generation", "text_content": "Generate the read_file call."},
					map[string]any{"step_intention": "Read the report file", "type": "tool", "executor": "filesystem", "text_content": "Read /data/report.md with read_file."},
				}}),
			withResult(mkStep("step-5", "stage-1", engine.StepSkill, engine.SkillInstructionGeneration, engine.StateFinished,
				"Prepare the read_file call", "Generate the read_file call."),
				map[string]any{"instruction_generation": map[string]any{"tool_name": "read_file", "arguments": map[string]any{"path": "/data/report.md"}}, "tool_step_id": "step-6"}),
			withInstruction(withResult(mkStep("step-6", "stage-1", engine.StepTool, "filesystem", engine.StateFinished,
				"Read the report file", "Read /data/report.md with read_file."),
				map[string]any{"content": []any{map[string]any{"type": "text", "text": "# Report\nMCP is used by 40% of teams."}}}),
				&engine.ToolCall{ToolName: "read_file", Arguments: map[string]any{"path": "/data/report.md"}}),
			cur,
			mkStep("step-8", "stage-1", engine.StepSkill, engine.SkillReflection, engine.StateInit,
				"Reflect on my progress in this stage", "Check the findings."),
		}
	default:
		txt := currentStep[name]
		cur = mkStep("step-3", "stage-1", engine.StepSkill, name, engine.StateRunning, txt[0], txt[1])
		steps = []engine.StepState{
			withResult(mkStep("step-1", "stage-1", engine.StepSkill, engine.SkillPlanning, engine.StateFinished,
				"Plan my part of stage stage-1", "Collect five recent sources on MCP adoption."),
				map[string]any{"planned_step": []any{map[string]any{"step_intention": "Write search queries", "type": "skill", "executor": "quick_think"}}}),
			withResult(mkStep("step-2", "stage-1", engine.StepSkill, engine.SkillQuickThink, engine.StateFinished,
				"Write search queries", "Write three web search queries."),
				map[string]any{"quick_think": "1. MCP adoption 2025\n2. Model Context Protocol servers"}),
			cur,
			mkStep("step-4", "stage-1", engine.StepSkill, engine.SkillSendMessage, engine.StateInit,
				"Send the source list to Bob", "Send Bob (agent-2) the list of sources."),
			mkStep("step-5", "stage-1", engine.StepSkill, engine.SkillReflection, engine.StateInit,
				"Reflect on my progress in this stage", "Check the goal is met."),
		}
	}
	a.AgentStep.StepList = slices.Concat(before, steps, after)
	for _, s := range a.AgentStep.StepList {
		if s.ExecutionState == engine.StateInit {
			a.AgentStep.TodoList = append(a.AgentStep.TodoList, s.StepID)
		}
	}
	return &engine.ExecInput{Agent: a, Step: cur, View: fixtureView{goal: fixtureGoal}}
}

// fixtureGoal is the fixture agent's goal in stage-1.
const fixtureGoal = "Collect five recent sources on MCP adoption, save them and tell the writer."

// fixtureView is the rest of the MAS as the fixtures see it: task-1, whose
// stage-1 allocates goal to the fixture agent.
type fixtureView struct{ goal string }

func (v fixtureView) Task(id string) (engine.TaskState, bool) {
	if id != "task-1" {
		return engine.TaskState{}, false
	}
	return engine.TaskState{TaskID: "task-1", StageList: []engine.StageState{{
		TaskID: "task-1", StageID: "stage-1", StageIntention: "Collect sources",
		AgentAllocation: map[string]string{testAgent().AgentID: v.goal, "agent-2": "Write the report."},
	}}}, true
}

func (v fixtureView) Stage(taskID, stageID string) (engine.StageState, bool) {
	t, ok := v.Task(taskID)
	if !ok {
		return engine.StageState{}, false
	}
	for _, st := range t.StageList {
		if st.StageID == stageID {
			return st, true
		}
	}
	return engine.StageState{}, false
}

func (fixtureView) AgentBrief(string) (engine.AgentBrief, bool) { return engine.AgentBrief{}, false }

// sectionKeys are the heading keys of the user message's sections.
var sectionKeys = []string{"role", "skill_rules", "current_step", "history", "tool_step", "mcp", "tool_history", "memory"}

// wantSections is each skill's section order after the system prompt: the
// spec's sections (§3 "提示词顺序" and "提示词"), with the part that is the
// same in every call first — role, the skill's rules, the MCP guide, the
// memory rules (followed by the memory's content) — so that providers cache
// it (issue 14), then the variable sections in the spec's relative order,
// except that the stage history, which grows at its end, comes before the
// current step, which changes at every call.
var wantSections = map[string][]string{
	engine.SkillPlanning:              {"role", "skill_rules", "memory", "current_step"},
	engine.SkillReflection:            {"role", "skill_rules", "memory", "history", "current_step"},
	engine.SkillSummary:               {"role", "skill_rules", "memory", "history", "current_step"},
	engine.SkillInstructionGeneration: {"role", "skill_rules", "mcp", "memory", "current_step", "tool_step"},
	engine.SkillThink:                 {"role", "skill_rules", "memory", "history", "current_step"},
	engine.SkillQuickThink:            {"role", "skill_rules", "memory", "current_step"},
	engine.SkillSendMessage:           {"role", "skill_rules", "memory", "history", "current_step"},
	engine.SkillProcessMessage:        {"role", "skill_rules", "memory", "history", "current_step"},
	engine.SkillTaskManager:           {"role", "skill_rules", "memory", "history", "current_step"},
	engine.SkillAgentManager:          {"role", "skill_rules", "memory", "history", "current_step"},
	engine.SkillAskInfo:               {"role", "skill_rules", "memory", "current_step"},
	engine.SkillToolDecision:          {"role", "skill_rules", "mcp", "memory", "current_step", "tool_history"},
	engine.SkillDecision:              {"role", "skill_rules", "memory", "history", "current_step"},
}

func goldenPath(lang, name string) string {
	return filepath.Join("testdata", "golden", lang, name+".md")
}

func goldenText(system, user string) string {
	return goldenSystemSep + "\n" + system + goldenUserSep + "\n" + user
}

func TestPromptGolden(t *testing.T) {
	for _, lang := range prompts.Languages {
		set := loadSet(t, lang)
		for _, name := range engine.SkillNames {
			t.Run(lang+"/"+name, func(t *testing.T) {
				r := newTestRunner(t, set, name, nil)
				system, user := r.render(fixture(name))
				got := goldenText(system, user)
				path := goldenPath(lang, name)
				if *update {
					if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want, err := os.ReadFile(path)
				if errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("golden file %s is missing: run go test ./skills/ -run TestPromptGolden -update", path)
				}
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(string(want), got); diff != "" {
					t.Errorf("prompt of %s differs from %s (-want +got):\n%s\n(run with -update if the change is intended)", name, path, diff)
				}
			})
		}
	}
}

// headingLines returns the line numbers at which line occurs as a whole line.
func headingLines(text, line string) []int {
	var at []int
	for i, l := range strings.Split(text, "\n") {
		if l == line {
			at = append(at, i)
		}
	}
	return at
}

// TestPromptSectionOrder checks, by heading positions, that each skill's
// prompt has exactly the spec's sections in the spec's order, and what the
// sections show: the stage's steps only, memory, skills in spec order.
func TestPromptSectionOrder(t *testing.T) {
	for _, lang := range prompts.Languages {
		set := loadSet(t, lang)
		for _, name := range engine.SkillNames {
			t.Run(lang+"/"+name, func(t *testing.T) {
				in := fixture(name)
				system, user := newTestRunner(t, set, name, nil).render(in)

				if !strings.HasPrefix(system, set.Heading("system")+"\n") {
					t.Errorf("system message does not start with the system heading %q", set.Heading("system"))
				}
				for _, k := range sectionKeys {
					if at := headingLines(system, set.Heading(k)); len(at) > 0 {
						t.Errorf("system message holds the %s heading at lines %v", k, at)
					}
				}
				if at := headingLines(user, set.Heading("system")); len(at) > 0 {
					t.Errorf("user message holds the system heading at lines %v", at)
				}

				want := wantSections[name]
				var gotOrder []string
				pos := map[string]int{}
				for _, k := range sectionKeys {
					at := headingLines(user, set.Heading(k))
					switch {
					case len(at) > 1:
						t.Errorf("heading %s (%q) occurs %d times, at lines %v", k, set.Heading(k), len(at), at)
					case len(at) == 1:
						pos[k] = at[0]
						gotOrder = append(gotOrder, k)
					}
				}
				slices.SortFunc(gotOrder, func(a, b string) int { return pos[a] - pos[b] })
				if diff := cmp.Diff(want, gotOrder); diff != "" {
					t.Errorf("section order mismatch (-want +got):\n%s", diff)
				}
				if !strings.HasPrefix(user, set.Heading(want[0])+"\n") {
					t.Errorf("user message does not start with the %s heading", want[0])
				}

				// Role: identity, and the skills in spec order whatever the config's order.
				for _, l := range []string{"- agent_id: agent-1", "- name: Alice", "- role: Researcher"} {
					if !strings.Contains(user, "\n"+l+"\n") {
						t.Errorf("role section lacks %q", l)
					}
				}
				last := -1
				for _, sk := range engine.SkillNames {
					i := strings.Index(user, "- **"+sk+"**: ")
					if i < 0 {
						t.Errorf("skill %s is not listed", sk)
						continue
					}
					if i < last {
						t.Errorf("skill %s is listed out of spec order", sk)
					}
					last = i
				}
				for _, tool := range in.Agent.Tools {
					if !strings.Contains(user, "- **"+tool+"**: "+testCatalog[tool]+"\n") {
						t.Errorf("tool %s is not listed with its guide", tool)
					}
				}

				// Current step.
				if !strings.Contains(user, "- step_id: "+in.Step.StepID+"\n- executor: "+name+"\n") {
					t.Errorf("current step %s of %s is not shown", in.Step.StepID, name)
				}
				sp, _ := set.Skill(name)
				if !strings.Contains(user, strings.TrimSpace(sp.UsePrompt.ReturnFormat)) {
					t.Errorf("return format of %s is missing", name)
				}

				// Never another stage's or task's steps; never the old tool chain.
				for _, m := range []string{markOtherStage, markOtherTask, markOldChain} {
					if strings.Contains(user, m) {
						t.Errorf("prompt shows a step it must not (%s)", m)
					}
				}

				// Memory, in key order, in every skill.
				i1 := strings.Index(user, "- 20250612T090000: ### Team")
				i2 := strings.Index(user, "- 20250613T103022: The operator wants")
				if i1 < 0 || i2 < 0 || i1 > i2 {
					t.Errorf("memory entries missing or out of key order (%d, %d)", i1, i2)
				}
				if pos["memory"] > lineOf(user, i1) {
					t.Errorf("memory entries are not inside the memory section")
				}

				if slices.Contains(want, "history") {
					checkHistory(t, set, user, in)
				}
			})
		}
	}
}

// lineOf is the line number of byte offset i in s.
func lineOf(s string, i int) int {
	if i < 0 {
		return -1
	}
	return strings.Count(s[:i], "\n")
}

// checkHistory checks the history section of the default fixture: executed
// steps (with results) under "executed", pending ones (without) under
// "pending", the current step in neither.
func checkHistory(t *testing.T, set *prompts.Set, user string, in *engine.ExecInput) {
	t.Helper()
	exe := strings.Index(user, "\n"+set.Heading("executed")+"\n")
	pen := strings.Index(user, "\n"+set.Heading("pending")+"\n")
	if exe < 0 || pen < 0 || exe > pen {
		t.Fatalf("history lacks executed/pending subsections in order (%d, %d)", exe, pen)
	}
	at := func(id string) int { return strings.Index(user, "- step_id "+id+" [") }
	for _, id := range []string{"step-1", "step-2"} {
		if i := at(id); i < exe || i > pen {
			t.Errorf("executed step %s is not under executed steps", id)
		}
	}
	for _, id := range []string{"step-4", "step-5"} {
		if i := at(id); i < pen {
			t.Errorf("pending step %s is not under pending steps", id)
		}
	}
	if at(in.Step.StepID) >= 0 {
		t.Errorf("the current step %s is listed in the history", in.Step.StepID)
	}
	if !strings.Contains(user, `  - execute_result: {"quick_think":"1. MCP adoption 2025\n2. Model Context Protocol servers"}`) {
		t.Errorf("executed step-2's result is not shown")
	}
}

// TestPromptRecognition feeds each rendered prompt to fakellm and checks
// that it recognises skill, agent and step: the whole test suite of the
// engine relies on it.
func TestPromptRecognition(t *testing.T) {
	for _, lang := range prompts.Languages {
		set := loadSet(t, lang)
		for _, name := range engine.SkillNames {
			t.Run(lang+"/"+name, func(t *testing.T) {
				fake := fakellm.NewInstant(func(*fakellm.Call) fakellm.Reply { return fakellm.Reply{Content: "ok"} })
				in := fixture(name)
				system, user := newTestRunner(t, set, name, fake).render(in)
				_, err := fake.Complete(context.Background(), &llm.Request{Messages: []llm.Message{
					{Role: llm.RoleSystem, Content: system}, {Role: llm.RoleUser, Content: user},
				}})
				if err != nil {
					t.Fatal(err)
				}
				calls := fake.Calls()
				if len(calls) != 1 {
					t.Fatalf("got %d calls, want 1", len(calls))
				}
				c := calls[0]
				got := [4]string{c.Skill, c.AgentID, c.AgentName, c.StepID}
				want := [4]string{name, "agent-1", "Alice", in.Step.StepID}
				if got != want {
					t.Errorf("recognised (skill, agent_id, name, step_id) = %q, want %q", got, want)
				}
				if c.Repair {
					t.Errorf("a first attempt was recognised as a repair round")
				}
			})
		}
	}
}

// TestPromptMultilineProfile: a profile is free text (agent_manager's
// init_new_agent takes it from the model), so it may span lines and hold
// markdown headings. Like memory entries and history texts, it must stay
// inside its list item: a line "# Rules" at the start of a line would be a
// top-level section of the prompt, breaking spec §5's structure.
func TestPromptMultilineProfile(t *testing.T) {
	set := loadSet(t, "en")
	in := fixture(engine.SkillPlanning)
	in.Agent.Profile = "Reviews reports.\n# Rules\nNever approve a report without sources."
	_, user := newTestRunner(t, set, engine.SkillPlanning, nil).render(in)
	for _, l := range strings.Split(user, "\n") {
		if l == "# Rules" || l == "Never approve a report without sources." {
			t.Errorf("profile line %q escapes the role section's list item", l)
		}
	}
}

// TestPromptHistoryKeepsStageGoal: reflection, summary and send_message are
// told that the agent's goal is "stated in the text of the stage's first
// planning step". The engine writes that text from start_stage_text, which
// puts the agent's own goal last, after the task intention and the stage's
// allocation; the history cuts every text at maxTextShown runes, so with a
// long task intention (a pasted brief) the goal is exactly what is lost.
func TestPromptHistoryKeepsStageGoal(t *testing.T) {
	set := loadSet(t, "en")
	const goal = "Collect five recent sources on MCP adoption and send the list to Bob (agent-2)."
	text := set.Text("start_stage_text", map[string]any{
		"TaskID": "task-1", "TaskName": "MCP report",
		"TaskIntention":  strings.Repeat("The operator's brief, pasted in full. ", 50),
		"StageID":        "stage-1",
		"StageIntention": "Collect sources",
		"Goal":           goal,
		"Allocation":     "- agent-1: " + goal + "\n- agent-2: Write the report.",
	})
	for _, name := range []string{engine.SkillReflection, engine.SkillSummary} {
		in := fixture(name)
		in.View = fixtureView{goal: goal} // the current step states it
		for i := range in.Agent.AgentStep.StepList {
			if in.Agent.AgentStep.StepList[i].StepID == "step-1" {
				in.Agent.AgentStep.StepList[i].TextContent = text
			}
		}
		_, user := newTestRunner(t, set, name, nil).render(in)
		if !strings.Contains(user, goal) {
			t.Errorf("%s: the agent's stage goal is not in the prompt", name)
		}
	}
}
