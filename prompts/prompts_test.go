package prompts

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// contractTags is the table of LLM_CONTRACT.md: the block tags each skill
// answers with.
var contractTags = map[string][]string{
	"planning":               {"planned_step"},
	"reflection":             {"reflection_step"},
	"summary":                {"summary"},
	"instruction_generation": {"tool_instruction"},
	"think":                  {"_think"},
	"quick_think":            {"quick_think"},
	"send_message":           {"send_message", "get_more_info"},
	"process_message":        {"process_message", "react_action"},
	"task_manager":           {"task_instruction"},
	"agent_manager":          {"agent_instruction"},
	"ask_info":               {"ask_info"},
	"tool_decision":          {"tool_decision"},
	"decision":               {"decision_step"},
}

// jsonTags are the blocks whose content is JSON (the others hold free text).
var jsonTags = map[string]bool{
	"planned_step": true, "reflection_step": true, "tool_instruction": true,
	"send_message": true, "get_more_info": true, "react_action": true,
	"task_instruction": true, "agent_instruction": true, "ask_info": true,
	"tool_decision": true, "decision_step": true,
}

// stepTags are the blocks that hold a list of steps.
var stepTags = map[string]bool{
	"planned_step": true, "reflection_step": true, "tool_decision": true, "decision_step": true,
}

// textFields documents the data fields of every text (see base.yaml). The
// texts run with missingkey=error, so rendering them with maps holding
// exactly these keys catches a misspelt field.
var textFields = map[string][]string{
	"start_task_intention":       {"TaskID", "TaskName"},
	"start_task_text":            {"TaskID", "TaskName", "TaskIntention"},
	"start_stage_intention":      {"TaskID", "StageID", "StageIntention"},
	"start_stage_text":           {"TaskID", "TaskName", "TaskIntention", "StageID", "StageIntention", "Goal", "Allocation"},
	"stage_started_notice":       {"TaskID", "StageID", "StageIntention", "Goal"},
	"stage_finished_notice":      {"TaskID", "StageID", "State"},
	"task_finished_notice":       {"TaskID", "TaskName", "State", "Summary"},
	"stage_complete":             {"TaskID", "StageID", "StageIntention", "Allocation", "Completion"},
	"task_judge":                 {"TaskID", "TaskName", "TaskIntention", "Stages"},
	"reply_intention":            {"SenderID", "SenderName"},
	"reply_text":                 {"SenderID", "SenderName", "Message", "Waiting"},
	"process_intention":          {"SenderID", "SenderName"},
	"process_text":               {"SenderID", "SenderName", "Message"},
	"wait_timeout_intention":     {"ReceiverIDs"},
	"wait_timeout_text":          {"ReceiverIDs", "Timeout"},
	"wait_cycle_intention":       {"PeerID"},
	"wait_cycle_text":            {"PeerID", "Cycle"},
	"reflection_intention":       {},
	"reflection_text":            {"Reason"},
	"summary_intention":          {},
	"summary_text":               {"Reason"},
	"budget_steps":               {"Budget"},
	"budget_reflections":         {"Budget"},
	"budget_unstaged":            {"Budget"},
	"summary_failed":             {"Reason"},
	"human_reply_needed":         {"SenderID", "SenderName"},
	"human_stage_started":        {"TaskID", "StageID"},
	"human_stage_finished":       {"TaskID", "StageID", "State"},
	"human_task_finished":        {"TaskID", "TaskName", "State", "Summary"},
	"ask_info_result":            {"Type"},
	"repair_request":             {"Error"},
	"tool_describe_intention":    {"ToolName"},
	"tool_describe_text":         {"ToolName"},
	"tool_result_intention":      {"ToolName"},
	"tool_result_text":           {"ToolName"},
	"tool_confirm":               {"AgentID", "AgentName", "Server", "ToolName", "Arguments", "StepIntention"},
	"tool_elicit":                {"AgentID", "AgentName", "Server", "ToolName", "Message", "Fields"},
	"tool_missing_arguments":     {"AgentID", "AgentName", "Server", "ToolName", "Problem", "Fields", "Arguments"},
	"text_clipped":               {"Dropped", "Limit"},
	"message_shortened":          {"TaskID"},
	"stall_no_stages":            {"TaskID", "TaskName"},
	"stall_stage":                {"TaskID", "TaskName", "StageID", "StageIntention", "Finished", "Open"},
	"stall_no_running_stage":     {"TaskID", "TaskName"},
	"stall_base":                 {"StepID", "Executor", "Reason"},
	"stall_last_failure":         {"Failed", "StepID", "Executor", "Reason"},
	"stall_notice":               {"TaskID", "TaskName", "Quiet", "Outstanding", "Notice", "Notices", "Base"},
	"stall_failed":               {"Notices", "Quiet", "Outstanding"},
	"llm_waiting":                {"Since", "Reason"},
	"llm_outage_began":           {"Since", "Reason"},
	"llm_outage_ended":           {"Since", "Duration"},
	"llm_outage_ended_restarted": {},
	"llm_outage_gave_up":         {"Since", "Duration"},
	"llm_outage_paused":          {"TaskID", "TaskName", "Reason"},
	"llm_outage_resumed":         {"TaskID", "TaskName"},
	"llm_outage_base_held":       {"Reason"},
	"llm_refused":                {"Reason"},
	"store_refusing":             {"TaskID", "TaskName", "Duration", "Reason"},
	"tool_waiting":               {"Server", "Since", "Reason"},
	"tool_outage_began":          {"Server", "Since", "Reason"},
	"tool_outage_ended":          {"Server", "Since", "Duration"},
	"tool_outage_gave_up":        {"Server", "Since", "Duration"},
	"reply_lost_intention":       {"ReceiverIDs", "Reason"},
	"reply_lost_text":            {"ReceiverIDs", "Reason"},
	"operator_task_failed":       {"TaskID", "TaskName", "Reason"},
	"operator_reply_lost":        {"Replier", "TaskID", "Reason"},
	"task_cancelled":             {"AgentID", "Name", "Operator"},
	"task_failed_no_reason":      {"AgentID", "Name", "Operator"},
	"budget_reached":             {"Kind", "Agent", "Used", "Limit", "Day"},
	"budget_question":            {"TaskID", "TaskName", "Reason", "Daily", "Used", "RaiseTokens", "RaiseAgent", "RaiseCost"},
	"budget_declined":            {"Reason"},
	"budget_waiting":             {"TaskID", "Reason"},
	"operator_waiting":           {"TaskID", "MessageID"},
	"interrupt_intention":        {"Reason", "Instruction"},
	"interrupt_text":             {"Reason", "Instruction"},
	"interrupt_dropped":          {"Agent", "StepID", "TaskID", "TaskEnded", "Instruction"},
	"history_digest":             {"N", "Finished", "Failed"},
	"pending_digest":             {"N"},
	"memory_added":               {"Key"},
	"memory_deleted":             {"Key"},
	"memory_no_key":              {"Key"},
	"memory_ignored":             {},
	"memory_ops_ignored":         {"N", "Max"},
	"memory_refused":             {"Entries", "MaxEntries", "Chars", "MaxChars", "Size"},
	"memory_refused_total":       {"Size"},
	"shared_info_step":           {"Executor", "State", "Reason"},
	"stage_no_step_left":         {},
	"stage_step_failed":          {"StepID", "Executor", "Reason"},
	"tool_instruction_intention": {"Intention"},
	"base_task_name":             {},
	"base_task_intention":        {},
	"base_stage_goal":            {},
	"reason_plan_ends":           {},
	"reason_goal_met":            {},
	"reason_reflection_ends":     {},
	"ask_info_none":              {},
	"ask_info_no_tools":          {},
	"ask_info_template":          {"Template", "Role", "Skills", "Tools", "Profile"},
	"ask_info_template_hint":     {},
	"ask_info_skills":            {},
	"ask_info_tools":             {},
	"ask_info_pool":              {},
	"ask_info_conversation":      {"N", "Total"},
	"ask_info_stage_goal":        {"Goal"},
	"ask_info_step":              {"StepID", "AgentName", "StepIntention", "Executor", "Type", "State", "TaskID", "StageID", "TextContent"},
	"ask_info_agent":             {"AgentID", "Name", "Role", "Profile", "Kind", "WorkingState", "Skills", "Tools", "Waits", "Pending"},
	"ask_info_steps":             {},
}

// sample returns data for a text: every field gets a distinct marker value,
// Waiting a bool and Budget an int.
func sample(key string) map[string]any {
	m := map[string]any{}
	for _, f := range textFields[key] {
		switch f {
		case "Waiting":
			m[f] = true
		case "Budget":
			m[f] = 40
		default:
			m[f] = "<<" + f + ">>"
		}
	}
	return m
}

func mustLoad(t *testing.T, lang, dir string) *Set {
	t.Helper()
	s, err := Load(lang, dir)
	if err != nil {
		t.Fatalf("Load(%q, %q): %v", lang, dir, err)
	}
	return s
}

func TestLoadBuiltIn(t *testing.T) {
	for _, lang := range Languages {
		s := mustLoad(t, lang, "")
		if s.Lang() != lang {
			t.Errorf("Lang() = %q, want %q", s.Lang(), lang)
		}
		for name, text := range map[string]string{
			"system_prompt":            s.SystemPrompt(),
			"persistent_memory_prompt": s.PersistentMemoryPrompt(),
			"mcp_base_prompt":          s.MCPBasePrompt(),
		} {
			if strings.TrimSpace(text) == "" {
				t.Errorf("%s: %s is empty", lang, name)
			}
		}
		if got := len(s.SkillGuides()); got != len(SkillNames) {
			t.Errorf("%s: SkillGuides has %d entries, want %d", lang, got, len(SkillNames))
		}
	}
	if s := mustLoad(t, "", ""); s.Lang() != "en" {
		t.Errorf(`Load("") language = %q, want "en"`, s.Lang())
	}
}

func TestContractTableCoversSkills(t *testing.T) {
	if got, want := slices.Sorted(maps.Keys(contractTags)), slices.Sorted(slices.Values(SkillNames)); !slices.Equal(got, want) {
		t.Fatalf("contract table skills %v, want %v", got, want)
	}
	if got, want := slices.Sorted(maps.Keys(textFields)), slices.Sorted(slices.Values(TextKeys)); !slices.Equal(got, want) {
		t.Fatalf("documented texts %v, want %v", got, want)
	}
}

func TestReturnFormatsNameTheirBlocks(t *testing.T) {
	for _, lang := range Languages {
		s := mustLoad(t, lang, "")
		for _, name := range SkillNames {
			sp, ok := s.Skill(name)
			if !ok {
				t.Fatalf("%s: skill %s missing", lang, name)
			}
			rf := sp.UsePrompt.ReturnFormat
			for _, tag := range append(slices.Clone(contractTags[name]), "persistent_memory") {
				if !strings.Contains(rf, "<"+tag+">") {
					t.Errorf("%s/%s: return_format does not mention <%s>", lang, name, tag)
				}
			}
		}
	}
}

// TestReturnFormatExamplesAreJSON parses every example block of the return
// formats strictly: a model copies what it is shown, so the examples must be
// valid JSON with JSON literals, and step lists must have the step shape.
func TestReturnFormatExamplesAreJSON(t *testing.T) {
	for _, lang := range Languages {
		s := mustLoad(t, lang, "")
		for _, name := range SkillNames {
			sp, _ := s.Skill(name)
			for _, tag := range contractTags[name] {
				if !jsonTags[tag] {
					continue
				}
				blocks := tagBlocks(sp.UsePrompt.ReturnFormat, tag)
				if len(blocks) == 0 {
					t.Errorf("%s/%s: no complete <%s> example", lang, name, tag)
				}
				for _, body := range blocks {
					body = strings.TrimSpace(body)
					if body == "" {
						continue // tool_decision's "stop" answer
					}
					var v any
					if err := json.Unmarshal([]byte(body), &v); err != nil {
						t.Errorf("%s/%s: <%s> example is not JSON: %v\n%s", lang, name, tag, err, body)
						continue
					}
					if stepTags[tag] {
						checkSteps(t, lang+"/"+name, body)
					}
				}
			}
		}
	}
}

// tagBlocks returns the contents of the complete <tag>…</tag> blocks of text.
// Like the skills' parser, it pairs each closing tag with the last opening
// tag before it, so prose that names the tag ("answer with one <tag> block")
// does not swallow the example that follows.
func tagBlocks(text, tag string) []string {
	open, closing := "<"+tag+">", "</"+tag+">"
	var out []string
	for {
		end := strings.Index(text, closing)
		if end < 0 {
			return out
		}
		if start := strings.LastIndex(text[:end], open); start >= 0 {
			out = append(out, text[start+len(open):end])
		}
		text = text[end+len(closing):]
	}
}

func checkSteps(t *testing.T, where, body string) {
	t.Helper()
	var steps []map[string]string
	if err := json.Unmarshal([]byte(body), &steps); err != nil {
		t.Errorf("%s: step list: %v", where, err)
		return
	}
	for _, st := range steps {
		if got := slices.Sorted(maps.Keys(st)); !slices.Equal(got, []string{"executor", "step_intention", "text_content", "type"}) {
			t.Errorf("%s: step has keys %v", where, got)
		}
		if st["type"] != "skill" && st["type"] != "tool" {
			t.Errorf("%s: step type %q", where, st["type"])
		}
		if st["type"] == "skill" && !slices.Contains(SkillNames, st["executor"]) {
			t.Errorf("%s: skill step with unknown executor %q", where, st["executor"])
		}
	}
}

var pythonLiteral = regexp.MustCompile(`[:\[,]\s*(True|False|None)\b`)

func TestNoPythonLiterals(t *testing.T) {
	for _, lang := range Languages {
		s := mustLoad(t, lang, "")
		texts := map[string]string{
			"mcp_base_prompt":          s.MCPBasePrompt(),
			"persistent_memory_prompt": s.PersistentMemoryPrompt(),
		}
		for _, name := range SkillNames {
			sp, _ := s.Skill(name)
			texts[name+".skill_prompt"] = sp.UsePrompt.SkillPrompt
			texts[name+".return_format"] = sp.UsePrompt.ReturnFormat
		}
		for where, text := range texts {
			if m := pythonLiteral.FindString(text); m != "" {
				t.Errorf("%s/%s: Python literal in JSON: %q", lang, where, m)
			}
		}
	}
}

// headingLevels returns the levels of the markdown headings in text.
func headingLevels(text string) []int {
	var levels []int
	for line := range strings.Lines(text) {
		line = strings.TrimRight(line, "\n")
		n := len(line) - len(strings.TrimLeft(line, "#"))
		if n > 0 && (len(line) == n || line[n] == ' ') {
			levels = append(levels, n)
		}
	}
	return levels
}

// TestHeadingLevels keeps the assembled prompt's outline intact: skill texts
// sit under "# Current step" (and the assembler's own "##" lines), the system
// prompt under "# System prompt", the memory rules under "## Rules…", the MCP
// guide under "# MCP call guide" with its own level-4 headings (spec §5.11).
func TestHeadingLevels(t *testing.T) {
	for _, lang := range Languages {
		s := mustLoad(t, lang, "")
		check := func(where, text string, minLevel int) {
			for _, l := range headingLevels(text) {
				if l < minLevel {
					t.Errorf("%s/%s: level-%d heading, want level %d or lower", lang, where, l, minLevel)
				}
			}
		}
		for _, name := range SkillNames {
			sp, _ := s.Skill(name)
			check(name+".skill_prompt", sp.UsePrompt.SkillPrompt, 3)
			check(name+".return_format", sp.UsePrompt.ReturnFormat, 3)
			check(name+".description", sp.UseGuide.Description, 3)
		}
		check("system_prompt", s.SystemPrompt(), 2)
		check("persistent_memory_prompt", s.PersistentMemoryPrompt(), 3)
		mcp := headingLevels(s.MCPBasePrompt())
		if len(mcp) == 0 {
			t.Errorf("%s/mcp_base_prompt: no headings", lang)
		}
		for _, l := range mcp {
			if l != 4 {
				t.Errorf("%s/mcp_base_prompt: level-%d heading, want level 4", lang, l)
			}
		}
		for _, k := range TextKeys {
			check("texts."+k, s.Text(k, sample(k)), 3)
		}
	}
}

func TestHeadings(t *testing.T) {
	level := map[string]string{
		"system": "# ", "role": "# ", "current_step": "# ", "history": "# ", "memory": "# ",
		"tool_step": "# ", "tool_history": "# ", "mcp": "# ", "skill_rules": "# ",
		"role_info": "## ", "skills_tools": "## ", "memory_rules": "## ", "memory_content": "## ",
		"executed": "## ", "pending": "## ",
		"skills": "### ", "tools": "### ",
	}
	// Headings keep the spec's English identifiers (spec §5).
	ident := map[string]string{
		"system": "system_prompt", "role_info": "agent_role", "skills_tools": "available_skills_and_tools",
		"current_step": "current_step", "history": "history_step", "memory": "persistent_memory",
		"tool_step": "tool_step", "tool_history": "tool_history", "mcp": "mcp_base_prompt",
		"skill_rules": "skill_prompt",
	}
	for _, lang := range Languages {
		s := mustLoad(t, lang, "")
		for _, k := range HeadingKeys {
			h := s.Heading(k)
			if strings.TrimSpace(h) == "" || strings.Contains(h, "\n") {
				t.Errorf("%s: heading %s = %q, want one non-empty line", lang, k, h)
				continue
			}
			if p, ok := level[k]; ok && !strings.HasPrefix(h, p) {
				t.Errorf("%s: heading %s = %q, want prefix %q", lang, k, h, p)
			}
			if _, ok := level[k]; !ok && strings.HasPrefix(h, "#") {
				t.Errorf("%s: placeholder %s = %q must not be a heading", lang, k, h)
			}
			if id, ok := ident[k]; ok && !strings.Contains(h, id) {
				t.Errorf("%s: heading %s = %q lacks identifier %q", lang, k, h, id)
			}
		}
	}
}

func TestTextsRender(t *testing.T) {
	for _, lang := range Languages {
		s := mustLoad(t, lang, "")
		for _, k := range TextKeys {
			data := sample(k)
			got := s.Text(k, data)
			if strings.Contains(got, "[text ") || strings.Contains(got, "[missing text ") {
				t.Errorf("%s: Text(%s): %s", lang, k, got)
				continue
			}
			if strings.TrimSpace(got) == "" {
				t.Errorf("%s: Text(%s) is empty", lang, k)
			}
			if strings.Contains(got, "<no value>") {
				t.Errorf("%s: Text(%s) has <no value>: %s", lang, k, got)
			}
		}

		// Texts whose content matters to the engine.
		wantIn := map[string][]string{
			"reply_text":             {"<<Message>>", "<<SenderID>>"},
			"process_text":           {"<<Message>>", "<<SenderID>>"},
			"start_task_text":        {"<<TaskID>>", "<<TaskIntention>>", "add_stage", "add_task_participant", "init_new_agent", "available_agents_config", "all_agents"},
			"start_stage_text":       {"<<TaskID>>", "<<StageID>>", "<<StageIntention>>", "<<Goal>>", "<<Allocation>>", "summary", "reflection"},
			"stage_complete":         {"<<TaskID>>", "<<StageID>>", "<<Allocation>>", "<<Completion>>", "finish_stage", "retry_stage", "agent_manager"},
			"task_judge":             {"<<TaskID>>", "<<Stages>>", "finish_task", "add_stage", "ask_info"},
			"wait_timeout_text":      {"<<ReceiverIDs>>", "<<Timeout>>"},
			"wait_cycle_text":        {"<<PeerID>>", "<<Cycle>>"},
			"reflection_text":        {"<<Reason>>"},
			"summary_text":           {"<<Reason>>"},
			"summary_failed":         {"<<Reason>>"},
			"budget_steps":           {"40"},
			"budget_reflections":     {"40"},
			"human_reply_needed":     {"<agent_id><<SenderID>></agent_id>"},
			"ask_info_result":        {"ask_info", "<<Type>>"},
			"repair_request":         {"<<Error>>"},
			"tool_describe_text":     {"<tool_name><<ToolName>></tool_name>", "capabilities_list_description"},
			"tool_result_text":       {"<tool_name><<ToolName>></tool_name>", "mcp_server_result"},
			"tool_confirm":           {"<<AgentName>>", "<<Server>>", "<<ToolName>>", "<<Arguments>>"},
			"tool_elicit":            {"<<AgentName>>", "<<Server>>", "<<ToolName>>", "<<Message>>", "<<Fields>>"},
			"tool_missing_arguments": {"<<AgentName>>", "<<Server>>", "<<ToolName>>", "<<Problem>>", "<<Fields>>", "<<Arguments>>"},
			"stall_notice":           {"<<Quiet>>", "<<Outstanding>>"},
			"stall_failed":           {"<<Outstanding>>"},
			"reply_lost_text":        {"<<ReceiverIDs>>", "<<Reason>>"},
			"llm_refused":            {"<<Reason>>"},
			"budget_reached":         {"<<Used>>", "<<Limit>>"},
			"budget_question":        {"<<Reason>>", "<<RaiseTokens>>", "answer_approval"},
			"budget_declined":        {"<<Reason>>"},
			"task_cancelled":         {"<<Name>>", "<<AgentID>>"},
			"task_failed_no_reason":  {"<<Name>>", "<<AgentID>>"},
		}
		for k, wants := range wantIn {
			got := s.Text(k, sample(k))
			for _, w := range wants {
				if !strings.Contains(got, w) {
					t.Errorf("%s: Text(%s) lacks %q:\n%s", lang, k, w, got)
				}
			}
		}

		// Texts without fields render with nil data, as the engine passes it.
		for k, fields := range textFields {
			if len(fields) == 0 {
				if got := s.Text(k, nil); strings.Contains(got, "[text ") {
					t.Errorf("%s: Text(%s, nil): %s", lang, k, got)
				}
			}
		}

		// Waiting changes the reply text; an empty summary is left out.
		waiting := s.Text("reply_text", sample("reply_text"))
		d := sample("reply_text")
		d["Waiting"] = false
		if notWaiting := s.Text("reply_text", d); notWaiting == waiting {
			t.Errorf("%s: reply_text ignores Waiting", lang)
		}
		// A task's own budget question names the task and set_budget.
		d = sample("budget_question")
		d["Daily"] = false
		if got := s.Text("budget_question", d); !strings.Contains(got, "<<TaskID>>") || !strings.Contains(got, "set_budget") {
			t.Errorf("%s: budget_question of a task lacks its ID or set_budget: %q", lang, got)
		}
		d = sample("task_finished_notice")
		d["Summary"] = ""
		if got := s.Text("task_finished_notice", d); strings.Contains(got, "[text ") || strings.HasSuffix(strings.TrimSpace(got), ":") {
			t.Errorf("%s: task_finished_notice with empty summary: %q", lang, got)
		}
	}
}

func TestTextFailuresAreMarkers(t *testing.T) {
	s := mustLoad(t, "en", "")
	if got := s.Text("no_such_text", nil); got != "[missing text no_such_text]" {
		t.Errorf("unknown key: %q", got)
	}
	if got := s.Text("ask_info_result", map[string]any{"Typo": "x"}); !strings.HasPrefix(got, "[text ask_info_result:") {
		t.Errorf("missing field: %q", got)
	}
}

func TestTemplates(t *testing.T) {
	en := mustLoad(t, "en", "").Templates()
	zh := mustLoad(t, "zh", "").Templates()
	if len(en) != len(zh) {
		t.Fatalf("en has %d templates, zh %d", len(en), len(zh))
	}
	var manager *AgentTemplate
	workers := 0
	for i, tpl := range en {
		if tpl.Name == "manager" {
			manager = &en[i]
		} else if !slices.Contains(tpl.Skills, "task_manager") {
			workers++
		}
		for _, must := range []string{"planning", "reflection", "summary", "send_message", "process_message"} {
			if !slices.Contains(tpl.Skills, must) {
				t.Errorf("template %s lacks skill %s", tpl.Name, must)
			}
		}
		if tpl.I18N != nil {
			t.Errorf("template %s: I18N not cleared", tpl.Name)
		}
		if z := zh[i]; z.Name != tpl.Name || z.Profile == tpl.Profile || z.Role == tpl.Role {
			t.Errorf("template %s: zh role/profile not translated (%q / %q)", tpl.Name, z.Role, z.Profile)
		}
	}
	if manager == nil {
		t.Fatal("no manager template")
	}
	for _, sk := range []string{"task_manager", "agent_manager", "ask_info"} {
		if !slices.Contains(manager.Skills, sk) {
			t.Errorf("manager lacks %s", sk)
		}
	}
	if workers < 3 {
		t.Errorf("%d worker templates, want at least 3", workers)
	}
	// Templates are copies: changing one must not change the set.
	s := mustLoad(t, "en", "")
	tpls := s.Templates()
	tpls[0].Name = "changed"
	tpls[0].Skills[0] = "changed"
	tpls[0].Tools = append(tpls[0].Tools, "changed")
	if tpls[0].LLMConfig == nil {
		tpls[0].LLMConfig = map[string]any{}
	}
	tpls[0].LLMConfig["model"] = "changed"
	again := s.Templates()[0]
	if again.Name == "changed" || again.Skills[0] == "changed" || slices.Contains(again.Tools, "changed") || again.LLMConfig["model"] == "changed" {
		t.Errorf("Templates shares memory with the set: %+v", again)
	}
}

func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestOverride(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "en/skills/planning.yaml", "use_prompt:\n  skill_prompt: Plan in at most three steps.\n")
	writeFile(t, dir, "en/base.yaml", "texts:\n  ask_info_result: 'Answer to {{.Type}}'\nheadings:\n  no_memory: '(nothing yet)'\n")
	writeFile(t, dir, "en/skills/think.yaml", "# all commented out\n# name: think\n")
	writeFile(t, dir, "agents/foo.yaml", "name: foo\nrole: Foo\nprofile: Does foo.\nskills: [planning, reflection, summary]\ntools: [fs]\n")
	writeFile(t, dir, "agents/writer.yaml", "name: writer\nrole: Poet\nskills: [planning]\n")
	writeFile(t, dir, "agents/notes.txt", "ignored")

	base := mustLoad(t, "en", "")
	s := mustLoad(t, "en", dir)

	got, _ := s.Skill("planning")
	want, _ := base.Skill("planning")
	if got.UsePrompt.SkillPrompt != "Plan in at most three steps." {
		t.Errorf("skill_prompt not overridden: %q", got.UsePrompt.SkillPrompt)
	}
	if got.Name != "planning" || got.UsePrompt.ReturnFormat != want.UsePrompt.ReturnFormat || got.UseGuide.Description != want.UseGuide.Description {
		t.Error("override of skill_prompt lost the other keys")
	}
	if got, want := s.Text("ask_info_result", map[string]any{"Type": "all_agents"}), "Answer to all_agents"; got != want {
		t.Errorf("overridden text = %q, want %q", got, want)
	}
	if got, want := s.Text("reply_intention", sample("reply_intention")), base.Text("reply_intention", sample("reply_intention")); got != want {
		t.Errorf("other text changed: %q, want %q", got, want)
	}
	if s.Heading("no_memory") != "(nothing yet)" || s.Heading("system") != base.Heading("system") {
		t.Error("heading override not merged")
	}
	if s.SystemPrompt() != base.SystemPrompt() {
		t.Error("system prompt changed by an override that does not set it")
	}
	think, _ := s.Skill("think")
	baseThink, _ := base.Skill("think")
	if think != baseThink {
		t.Error("comment-only override changed the skill")
	}

	names := map[string]AgentTemplate{}
	for _, tpl := range s.Templates() {
		names[tpl.Name] = tpl
	}
	if foo, ok := names["foo"]; !ok || !slices.Equal(foo.Tools, []string{"fs"}) {
		t.Errorf("override template foo = %+v", foo)
	}
	if names["writer"].Role != "Poet" {
		t.Errorf("override did not replace template writer: %+v", names["writer"])
	}
	if _, ok := names["manager"]; !ok || len(names) != len(base.Templates())+1 {
		t.Errorf("templates = %v", slices.Sorted(maps.Keys(names)))
	}

	// The override directory holds only English files: zh is unaffected.
	zh, zhBase := mustLoad(t, "zh", dir), mustLoad(t, "zh", "")
	if a, b := zh.Text("ask_info_result", map[string]any{"Type": "x"}), zhBase.Text("ask_info_result", map[string]any{"Type": "x"}); a != b {
		t.Errorf("zh text changed by en override: %q", a)
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name  string
		lang  string
		files map[string]string
		dir   string // used instead of a temp dir with files when set
		want  []string
	}{
		{name: "unknown language", lang: "fr", want: []string{`"fr"`, "en, zh"}},
		{name: "missing directory", lang: "en", dir: filepath.Join(t.TempDir(), "nope"), want: []string{"override directory"}},
		{
			name:  "unknown key",
			lang:  "en",
			files: map[string]string{"en/skills/think.yaml": "use_promt:\n  skill_prompt: x\n"},
			want:  []string{"en/skills/think.yaml", "use_promt"},
		},
		{
			name:  "unknown skill in template",
			lang:  "zh",
			files: map[string]string{"agents/bad.yaml": "name: bad\nrole: Bad\nskills: [planning, flying]\n"},
			want:  []string{"agents/bad.yaml", `"flying"`},
		},
		{
			name:  "template without role",
			lang:  "en",
			files: map[string]string{"agents/norole.yaml": "name: norole\n"},
			want:  []string{"agents/norole.yaml", "role"},
		},
		{
			name:  "text does not parse",
			lang:  "en",
			files: map[string]string{"en/base.yaml": "texts:\n  summary_text: '{{.Reason'\n"},
			want:  []string{"en/base.yaml", "texts.summary_text"},
		},
		{
			name:  "wrong skill name",
			lang:  "en",
			files: map[string]string{"en/skills/decision.yaml": "name: decide\n"},
			want:  []string{"en/skills/decision.yaml", `"decide"`},
		},
		{
			name:  "emptied field",
			lang:  "en",
			files: map[string]string{"en/skills/summary.yaml": "use_prompt:\n  return_format: ''\n"},
			want:  []string{"en/skills/summary.yaml", "use_prompt.return_format"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := tt.dir
			if dir == "" && tt.files != nil {
				dir = t.TempDir()
				for name, content := range tt.files {
					writeFile(t, dir, name, content)
				}
			}
			s, err := Load(tt.lang, dir)
			if err == nil {
				t.Fatalf("Load succeeded (%v), want an error", s.Lang())
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}

	// A file where a directory is expected.
	f := filepath.Join(t.TempDir(), "file")
	writeFile(t, filepath.Dir(f), "file", "x")
	if _, err := Load("en", f); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("Load(file) error = %v", err)
	}
}

// TestBaseTaskNamedAsInSystemPrompt: the base task's name (the engine's
// default) is the one each language's system prompt gives it.
func TestBaseTaskNamedAsInSystemPrompt(t *testing.T) {
	for _, lang := range Languages {
		s := mustLoad(t, lang, "")
		name := s.Text("base_task_name", nil)
		if !strings.Contains(s.SystemPrompt(), `"`+name+`"`) {
			t.Errorf("%s: base task name %q is not what the system prompt calls it", lang, name)
		}
	}
}
