package skills

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/mas-mcp/mas-mcp/engine"
)

// section is one part of a skill prompt (spec §5).
type section int

const (
	secRole        section = iota // §5.2 agent role, skills and tools
	secStep                       // §5.3 the current step and the skill's rules
	secHistory                    // §5.6 this stage's steps, executed and pending
	secToolStep                   // §5.4 the tool step an instruction is generated for
	secMCP                        // §5.11 the MCP base prompt
	secToolHistory                // §5.9 this long-tail tool's calls so far
	secMemory                     // §5.5 persistent memory
)

// Bounds on what one history entry shows, so a long stage or a large tool
// result cannot crowd out the rest of the prompt.
const (
	maxTextShown   = 1500
	maxResultShown = 4000
)

// render assembles the skill's prompt in the spec's order: the system prompt
// (§5.1) as the system message, the other sections as the user message.
func (r *runner) render(in *engine.ExecInput) (system, user string) {
	p := r.cfg.Prompts
	system = p.Heading("system") + "\n" + strings.TrimSpace(p.SystemPrompt()) + "\n"
	var b strings.Builder
	for i, sec := range r.sk.sections {
		if i > 0 {
			b.WriteString("\n")
		}
		switch sec {
		case secRole:
			r.writeRole(&b, in)
		case secStep:
			r.writeStep(&b, in)
		case secHistory:
			r.writeHistory(&b, in)
		case secToolStep:
			r.writeToolStep(&b, in)
		case secMCP:
			fmt.Fprintf(&b, "%s\n%s\n", p.Heading("mcp"), strings.TrimSpace(p.MCPBasePrompt()))
		case secToolHistory:
			r.writeToolHistory(&b, in)
		case secMemory:
			r.writeMemory(&b, in)
		}
	}
	return system, b.String()
}

func (r *runner) writeRole(b *strings.Builder, in *engine.ExecInput) {
	p := r.cfg.Prompts
	a := &in.Agent
	fmt.Fprintf(b, "%s\n%s\n", p.Heading("role"), p.Heading("role_info"))
	fmt.Fprintf(b, "- agent_id: %s\n- name: %s\n- role: %s\n", a.AgentID, oneLine(a.Name), oneLine(a.Role))
	if strings.TrimSpace(a.Profile) != "" {
		fmt.Fprintf(b, "- profile: %s\n", indent(a.Profile))
	}
	fmt.Fprintf(b, "\n%s\n%s\n", p.Heading("skills_tools"), p.Heading("skills"))
	if len(a.Skills) == 0 {
		fmt.Fprintf(b, "%s\n", p.Heading("no_skills"))
	}
	for _, n := range engine.SkillNames { // spec order, whatever the config's order
		if !slices.Contains(a.Skills, n) {
			continue
		}
		fmt.Fprintf(b, "- **%s**: %s\n", n, r.guides[n])
	}
	fmt.Fprintf(b, "\n%s\n", p.Heading("tools"))
	guides := map[string]string{}
	if r.cfg.Tools != nil {
		guides = r.cfg.Tools.ToolGuides()
	}
	if len(a.Tools) == 0 {
		fmt.Fprintf(b, "%s\n", p.Heading("no_tools"))
	}
	for _, t := range a.Tools {
		fmt.Fprintf(b, "- **%s**: %s\n", t, oneLine(guides[t]))
	}
}

func (r *runner) writeStep(b *strings.Builder, in *engine.ExecInput) {
	p := r.cfg.Prompts
	s := &in.Step
	sp, _ := p.Skill(r.sk.name)
	fmt.Fprintf(b, "%s\n", p.Heading("current_step"))
	fmt.Fprintf(b, "- step_id: %s\n- executor: %s\n- task_id: %s\n- stage_id: %s\n", s.StepID, s.Executor, s.TaskID, s.StageID)
	if goal := stageGoal(in); goal != "" {
		fmt.Fprintf(b, "- stage_goal: %s\n", indent(goal))
	}
	fmt.Fprintf(b, "- step_intention: %s\n- text_content:\n\n%s\n\n", oneLine(s.StepIntention), strings.TrimSpace(s.TextContent))
	fmt.Fprintf(b, "%s\n\n%s\n", strings.TrimSpace(sp.UsePrompt.SkillPrompt), strings.TrimSpace(sp.UsePrompt.ReturnFormat))
}

// stageGoal is the agent's own goal in the step's stage (its entry in the
// stage's agent_allocation), so every step of a stage keeps it in view, not
// only the first planning step (spec §3.2).
func stageGoal(in *engine.ExecInput) string {
	if in.View == nil || in.Step.StageID == engine.NoRelative {
		return ""
	}
	st, ok := in.View.Stage(in.Step.TaskID, in.Step.StageID)
	if !ok {
		return ""
	}
	return st.AgentAllocation[in.Agent.AgentID]
}

// stageSteps returns the agent's steps in the current step's task and stage,
// in execution order (spec §5.6: stages never mix, §10.3).
func stageSteps(in *engine.ExecInput) []engine.StepState {
	var out []engine.StepState
	for _, s := range in.Agent.AgentStep.StepList {
		if s.TaskID == in.Step.TaskID && s.StageID == in.Step.StageID {
			out = append(out, s)
		}
	}
	return out
}

func (r *runner) writeHistory(b *strings.Builder, in *engine.ExecInput) {
	p := r.cfg.Prompts
	fmt.Fprintf(b, "%s\n", p.Heading("history"))
	var done, pending []engine.StepState
	for _, s := range stageSteps(in) {
		switch {
		case s.StepID == in.Step.StepID:
			continue // shown as the current step
		case s.ExecutionState == engine.StateInit || s.ExecutionState == engine.StatePending:
			pending = append(pending, s)
		default:
			done = append(done, s)
		}
	}
	if len(done)+len(pending) == 0 {
		fmt.Fprintf(b, "%s\n", p.Heading("no_history"))
		return
	}
	fmt.Fprintf(b, "%s\n", p.Heading("executed"))
	for _, s := range done {
		writeHistoryStep(b, s, true)
	}
	if len(done) == 0 {
		b.WriteString("-\n")
	}
	fmt.Fprintf(b, "\n%s\n", p.Heading("pending"))
	for _, s := range pending {
		writeHistoryStep(b, s, false)
	}
	if len(pending) == 0 {
		b.WriteString("-\n")
	}
}

func writeHistoryStep(b *strings.Builder, s engine.StepState, results bool) {
	fmt.Fprintf(b, "- step_id %s [%s] %s (%s): %s\n", s.StepID, s.ExecutionState, s.Executor, s.Type, oneLine(s.StepIntention))
	if t := strings.TrimSpace(s.TextContent); t != "" {
		fmt.Fprintf(b, "  - text_content: %s\n", indent(truncate(t, maxTextShown)))
	}
	if len(s.InstructionContent) > 0 {
		fmt.Fprintf(b, "  - instruction_content: %s\n", compactJSON(s.InstructionContent, maxResultShown))
	}
	if results && len(s.ExecuteResult) > 0 {
		fmt.Fprintf(b, "  - execute_result: %s\n", compactJSON(s.ExecuteResult, maxResultShown))
	}
}

func (r *runner) writeMemory(b *strings.Builder, in *engine.ExecInput) {
	p := r.cfg.Prompts
	fmt.Fprintf(b, "%s\n%s\n%s\n\n%s\n", p.Heading("memory"), p.Heading("memory_rules"),
		strings.TrimSpace(p.PersistentMemoryPrompt()), p.Heading("memory_content"))
	pm := in.Agent.PersistentMemory
	if len(pm) == 0 {
		fmt.Fprintf(b, "%s\n", p.Heading("no_memory"))
		return
	}
	keys := make([]string, 0, len(pm))
	for k := range pm {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(b, "- %s: %s\n", k, indent(pm[k]))
	}
}

// compactJSON renders v as one line of JSON, cut at max runes.
func compactJSON(v any, max int) string {
	bs, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%v", v)
	}
	return truncate(string(bs), max)
}

// indent makes multi-line text sit inside a list item.
func indent(s string) string { return strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n    ") }

// oneLine collapses whitespace.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
