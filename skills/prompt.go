package skills

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

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
	// foldedResultShown is how much of a folded step's result its one
	// line keeps: the first words, enough to recognise it.
	foldedResultShown = 120
)

// DefaultPromptBudget is the default cap on a prompt's variable sections,
// in characters (Config.PromptBudget).
const DefaultPromptBudget = 16000

// render assembles the skill's prompt: the system prompt (§5.1) as the
// system message, the other sections as the user message.
//
// The sections are the spec's (§5), ordered for providers' prompt caching:
// first everything that is the same in every call of this skill by this
// agent — role (§5.2), the skill's rules and return format (§5.3), the MCP
// guide (§5.11), the rules of persistent memory (§5.5) — then what changes:
// the memory's content (changes only when the agent edits it), then the
// skill's variable sections in the skill's order. The fixed part is
// byte-identical across calls, so an OpenAI-compatible endpoint serves it
// from its cache. The stage history comes before the current step, whose
// IDs change at every call: the history grows at its end and folds in
// blocks (foldHistory), so most of it is cached too.
//
// The variable sections share r.budget characters, and never take more
// when the budget is 3,000 characters or more (below that, the headings,
// IDs, folding notes and one-line entries may pass it). The current step,
// the tool step and the memory come first (fitCurrent): whole when they
// leave the history at least a quarter of the budget, else their longest
// parts are cut (keeping their beginning, saying how much was dropped)
// until they do. The stage history or the tool history gets the rest,
// folding its older steps to fit (foldHistory, writeToolHistory).
func (r *runner) render(in *engine.ExecInput) (system, user string) {
	system = r.system

	fixed := make(map[section]string, len(r.sk.sections))
	for _, sec := range r.sk.sections {
		if st, ok := r.static[sec]; ok {
			fixed[sec] = st
		}
	}
	if slices.Contains(r.sk.sections, secRole) {
		var role strings.Builder
		r.writeRole(&role, in)
		fixed[secRole] = role.String()
	}

	// Every variable section is written after a newline, the fixed parts
	// are joined by one: those count too.
	seps := len(fixed) - 1
	for _, sec := range r.sk.sections {
		switch sec {
		case secStep, secToolStep, secHistory, secToolHistory:
			seps++
		}
	}
	histories := slices.Contains(r.sk.sections, secHistory) || slices.Contains(r.sk.sections, secToolHistory)
	reserve := 0
	if histories {
		reserve = r.budget / 4
	}
	cur := r.current(in)
	memory, variable := r.writeCurrent(in, &cur)
	if over := seps + r.used(memory, variable) - (r.budget - reserve); over > 0 {
		r.fitCurrent(&cur, over)
		memory, variable = r.writeCurrent(in, &cur)
	}
	if slices.Contains(r.sk.sections, secToolHistory) {
		// Like the stage history: what the other variable sections leave.
		var b strings.Builder
		r.writeToolHistory(&b, in, r.budget-seps-r.used(memory, variable))
		variable[secToolHistory] = b.String()
	}
	if slices.Contains(r.sk.sections, secHistory) {
		var b strings.Builder
		r.writeHistory(&b, in, r.budget-seps-r.used(memory, variable))
		variable[secHistory] = b.String()
	}

	// One allocation for the prompt: its parts are known.
	size := len(memory) + 2*len(variable) + len(fixed)
	for _, part := range fixed {
		size += len(part)
	}
	for _, v := range variable {
		size += len(v)
	}
	var b strings.Builder
	b.Grow(size)
	for _, sec := range []section{secRole, secStep, secMCP, secMemory} {
		if part, ok := fixed[sec]; ok {
			if b.Len() > 0 {
				b.WriteString("\n")
			}
			b.WriteString(part)
		}
	}
	if slices.Contains(r.sk.sections, secMemory) {
		// Right after the memory rules, which end the fixed part.
		b.WriteString(memory)
	}
	for _, sec := range r.sk.sections {
		if v, ok := variable[sec]; ok {
			b.WriteString("\n")
			b.WriteString(v)
		}
	}
	return system, b.String()
}

// shown is what a prompt shows of the current step, of the tool step it
// prepares and of the memory: the parts of the variable sections other than
// the histories that may be long, each as written (in one line, indented or
// trimmed), so that fitCurrent can cut the longest of them.
type shown struct {
	goal, intention, text          string // the current step (secStep)
	toolIntention, toolText, guide string // the tool step (secToolStep)
	memory                         string // the memory's entries (secMemory)
}

func (s *shown) parts() []*string {
	return []*string{&s.goal, &s.intention, &s.text, &s.toolIntention, &s.toolText, &s.guide, &s.memory}
}

// current collects the skill's shown parts of in, whole.
func (r *runner) current(in *engine.ExecInput) shown {
	var sh shown
	for _, sec := range r.sk.sections {
		switch sec {
		case secStep:
			sh.goal = indent(stageGoal(in))
			sh.intention = oneLine(in.Step.StepIntention)
			sh.text = strings.TrimSpace(in.Step.TextContent)
		case secToolStep:
			if t, ok := targetToolStep(in); ok {
				sh.toolIntention, sh.toolText = oneLine(t.StepIntention), strings.TrimSpace(t.TextContent)
				if r.cfg.Tools != nil {
					sh.guide = oneLine(r.cfg.Tools.ToolGuides()[t.Executor])
				}
			}
		case secMemory:
			sh.memory = memoryEntries(in.Agent.PersistentMemory)
		}
	}
	return sh
}

// writeCurrent renders the memory and the variable sections other than the
// histories with the parts sh.
func (r *runner) writeCurrent(in *engine.ExecInput, sh *shown) (memory string, variable map[section]string) {
	variable = make(map[section]string, len(r.sk.sections))
	for _, sec := range r.sk.sections {
		var b strings.Builder
		switch sec {
		case secStep:
			r.writeStep(&b, in, sh)
			variable[sec] = b.String()
		case secMemory:
			r.writeMemory(&b, in, sh)
			memory = b.String()
		case secToolStep:
			r.writeToolStep(&b, in, sh)
			variable[sec] = b.String()
		}
	}
	return memory, variable
}

// fitCurrent cuts the longest of sh's parts, all to the same length, so
// that together they are at least over characters shorter (each cut part
// counts its note of what was dropped).
func (r *runner) fitCurrent(sh *shown, over int) {
	parts := sh.parts()
	lens := make([]int, len(parts))
	total := 0
	for i, p := range parts {
		lens[i] = utf8.RuneCountInString(*p)
		total += lens[i]
	}
	// The largest length every part may keep: water-filling from the
	// shortest part up.
	left, sorted := max(total-over, 0), slices.Sorted(slices.Values(lens))
	limit := -1
	for i, n := range sorted {
		if n*(len(sorted)-i) > left {
			limit = left / (len(sorted) - i)
			break
		}
		left -= n
	}
	if limit < 0 {
		return // all fit
	}
	for i, p := range parts {
		if lens[i] > limit {
			*p = r.cut(*p, limit)
		}
	}
}

// cut shortens s to at most n characters: its beginning, cut on a
// character boundary by engine.Truncate, and the prompt set's note of how
// many characters were dropped. When n cannot hold the note, s is cut to
// nothing but the note.
func (r *runner) cut(s string, n int) string {
	n = max(n, 0)
	total := utf8.RuneCountInString(s)
	if total <= n {
		return s
	}
	note := func(kept int) string {
		return " " + r.cfg.Prompts.Text("text_clipped", map[string]any{"Dropped": total - kept, "Limit": n})
	}
	// The note's length with the most digits it can have, and Truncate's "…".
	keep := max(n-utf8.RuneCountInString(note(0))-1, 0)
	return engine.Truncate(s, keep) + note(keep)
}

// used is the characters the variable sections rendered so far take.
func (r *runner) used(memory string, variable map[section]string) int {
	n := utf8.RuneCountInString(memory)
	for _, v := range variable {
		n += utf8.RuneCountInString(v)
	}
	return n
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

// systemMessage is the system prompt (spec §5.1) under its heading: the
// same in every call of every skill.
func (r *runner) systemMessage() string {
	p := r.cfg.Prompts
	return p.Heading("system") + "\n" + strings.TrimSpace(p.SystemPrompt()) + "\n"
}

// staticSection is the part of a section that is the same for every agent
// and every call of the skill: the skill's rules and return format (spec
// §5.3), the MCP guide (§5.11), the rules of persistent memory (§5.5); ""
// for the sections without one.
func (r *runner) staticSection(sec section) string {
	p := r.cfg.Prompts
	switch sec {
	case secStep:
		sp, _ := p.Skill(r.sk.name)
		return fmt.Sprintf("%s\n%s\n\n%s\n", p.Heading("skill_rules"), strings.TrimSpace(sp.UsePrompt.SkillPrompt), strings.TrimSpace(sp.UsePrompt.ReturnFormat))
	case secMCP:
		return fmt.Sprintf("%s\n%s\n", p.Heading("mcp"), strings.TrimSpace(p.MCPBasePrompt()))
	case secMemory:
		return fmt.Sprintf("%s\n%s\n%s\n", p.Heading("memory"), p.Heading("memory_rules"), strings.TrimSpace(p.PersistentMemoryPrompt()))
	}
	return ""
}

// fixedPart is the skill's prompt text that no agent or step changes: the
// system message and the static sections (issue 14 item 6 measures it).
func (r *runner) fixedPart() string {
	var b strings.Builder
	b.WriteString(r.systemMessage())
	for _, sec := range r.sk.sections {
		b.WriteString(r.staticSection(sec))
	}
	return b.String()
}

// writeStep writes the current step (spec §5.3); the skill's rules are
// written apart by writeRules, in the prompt's fixed part.
func (r *runner) writeStep(b *strings.Builder, in *engine.ExecInput, sh *shown) {
	p := r.cfg.Prompts
	s := &in.Step
	fmt.Fprintf(b, "%s\n", p.Heading("current_step"))
	fmt.Fprintf(b, "- step_id: %s\n- executor: %s\n- task_id: %s\n- stage_id: %s\n", s.StepID, s.Executor, s.TaskID, s.StageID)
	if sh.goal != "" {
		fmt.Fprintf(b, "- stage_goal: %s\n", sh.goal)
	}
	fmt.Fprintf(b, "- step_intention: %s\n- text_content:\n\n%s\n", sh.intention, sh.text)
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
	all := in.Agent.AgentStep.StepList
	other := func(s engine.StepState) bool { return s.TaskID != in.Step.TaskID || s.StageID != in.Step.StageID }
	if !slices.ContainsFunc(all, other) {
		// The engine's view holds the stage's steps only: read, not
		// copied (the callers do not change them).
		return all
	}
	return slices.DeleteFunc(slices.Clone(all), other)
}

// writeHistory writes this stage's other steps (spec §5.6) in at most
// budget characters (the newest executed step is always shown, cut when it
// alone does not fit):
// pending steps first take what they need, then executed steps are folded
// by foldHistory.
func (r *runner) writeHistory(b *strings.Builder, in *engine.ExecInput, budget int) {
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
	// The headings take their share.
	budget -= utf8.RuneCountInString(p.Heading("history") + p.Heading("executed") + p.Heading("pending") + "\n\n\n\n")
	// Pending steps: whole while they fit in half the budget, else one
	// line each (they have no result yet; their texts are the plan), the
	// first ones while they fit and a count of the others.
	var pb strings.Builder
	for _, s := range pending {
		writeHistoryStep(&pb, s, false)
	}
	if utf8.RuneCountInString(pb.String()) > budget/2 {
		pb.Reset()
		n := 0
		for i, s := range pending {
			line := foldedStep(s)
			if n += utf8.RuneCountInString(line); n > budget/2 && i > 0 {
				fmt.Fprintf(&pb, "%s\n", p.Text("pending_digest", map[string]any{"N": len(pending) - i}))
				break
			}
			pb.WriteString(line)
		}
	}
	pendingText := pb.String()
	if len(pending) == 0 {
		pendingText = "-\n"
	}

	fmt.Fprintf(b, "%s\n", p.Heading("executed"))
	if len(done) == 0 {
		b.WriteString("-\n")
	} else {
		b.WriteString(r.foldHistory(done, budget-utf8.RuneCountInString(pendingText)))
	}
	fmt.Fprintf(b, "\n%s\n%s", p.Heading("pending"), pendingText)
}

// wholeBlock and foldBlock are the grains of history folding: the
// boundary between one-line and whole steps moves in blocks of wholeBlock
// steps, the one between counted and one-line steps in blocks of foldBlock,
// so that consecutive prompts of a long stage share their history's
// beginning byte for byte (and a provider serves it from its prompt cache)
// instead of shifting it by one step at every call. foldBlock is smaller:
// one-line steps are many to a budget, and rounding drops up to
// foldBlock-1 of them.
const (
	wholeBlock = 8
	foldBlock  = 4
)

// foldHistory renders executed steps, oldest first, in at most budget
// characters, deterministically and without any LLM call: going back from
// the newest, steps are shown whole while they fit (the newest always is,
// cut when it alone does not fit), then one line each (foldedStep) while
// those fit, and the steps older than that are counted in one digest line
// at the top. Each boundary is moved forward to a multiple of its block
// (showing less, so still within budget; the newest step stays whole), the
// whole steps' first, so that the steps it folds leave room for more
// one-line steps. When anything is folded, a note says how to read a folded
// step's full result.
func (r *runner) foldHistory(done []engine.StepState, budget int) string {
	p := r.cfg.Prompts
	n := len(done)
	// Each step's whole text is rendered once: it is measured, then
	// written.
	whole := make([]string, n)
	wholeText := func(i int) string {
		if whole[i] == "" {
			var sb strings.Builder
			writeHistoryStep(&sb, done[i], true)
			whole[i] = sb.String()
		}
		return whole[i]
	}
	total := 0
	for i := range done {
		total += utf8.RuneCountInString(wholeText(i))
	}
	if total > budget {
		// Folding: the note and the digest line take their share, and
		// the newest step, always shown whole, is cut when it alone is
		// more than the rest.
		budget -= utf8.RuneCountInString(p.Heading("history_folded") + "\n" +
			p.Text("history_digest", map[string]any{"N": n, "Finished": n, "Failed": n}) + "\n")
		if utf8.RuneCountInString(wholeText(n-1)) > budget {
			whole[n-1] = r.cut(whole[n-1], budget-1) + "\n"
		}
	}
	used, wholeFrom := 0, n
	for i := n - 1; i >= 0; i-- {
		c := utf8.RuneCountInString(wholeText(i))
		if i < n-1 && used+c > budget {
			break
		}
		used, wholeFrom = used+c, i
	}
	if wholeFrom == 0 {
		var b strings.Builder
		for i := range done {
			b.WriteString(wholeText(i))
		}
		return b.String()
	}
	roundUp := func(i, block int) int { return (i + block - 1) / block * block }
	for i := wholeFrom; i < min(roundUp(wholeFrom, wholeBlock), n-1); i++ {
		used -= utf8.RuneCountInString(wholeText(i))
	}
	wholeFrom = min(roundUp(wholeFrom, wholeBlock), n-1)
	oldest := wholeFrom
	for i := wholeFrom - 1; i >= 0; i-- {
		c := utf8.RuneCountInString(foldedStep(done[i]))
		if used+c > budget {
			break
		}
		used, oldest = used+c, i
	}
	oldest = min(roundUp(oldest, foldBlock), wholeFrom)

	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", p.Heading("history_folded"))
	if oldest > 0 {
		finished, failed := 0, 0
		for _, s := range done[:oldest] {
			switch s.ExecutionState {
			case engine.StateFinished:
				finished++
			case engine.StateFailed:
				failed++
			}
		}
		fmt.Fprintf(&b, "%s\n", p.Text("history_digest", map[string]any{"N": oldest, "Finished": finished, "Failed": failed}))
	}
	for i := oldest; i < n; i++ {
		if i < wholeFrom {
			b.WriteString(foldedStep(done[i]))
		} else {
			b.WriteString(wholeText(i))
		}
	}
	return b.String()
}

// foldedStep is one step in one line: its ID, state, executor, intention
// and the first words of its result.
func foldedStep(s engine.StepState) string {
	line := fmt.Sprintf("- step_id %s [%s] %s: %s", s.StepID, s.ExecutionState, s.Executor, engine.Truncate(oneLine(s.StepIntention), foldedResultShown))
	if len(s.ExecuteResult) > 0 {
		line += " → " + compactJSON(s.ExecuteResult, foldedResultShown)
	}
	return line + "\n"
}

func writeHistoryStep(b *strings.Builder, s engine.StepState, results bool) {
	fmt.Fprintf(b, "- step_id %s [%s] %s (%s): %s\n", s.StepID, s.ExecutionState, s.Executor, s.Type, engine.Truncate(oneLine(s.StepIntention), maxTextShown))
	if t := strings.TrimSpace(s.TextContent); t != "" {
		fmt.Fprintf(b, "  - text_content: %s\n", indent(engine.Truncate(t, maxTextShown)))
	}
	if s.InstructionContent != nil {
		fmt.Fprintf(b, "  - instruction_content: %s\n", compactJSON(s.InstructionContent, maxResultShown))
	}
	if results && len(s.ExecuteResult) > 0 {
		fmt.Fprintf(b, "  - execute_result: %s\n", compactJSON(s.ExecuteResult, maxResultShown))
	}
}

func (r *runner) writeMemory(b *strings.Builder, in *engine.ExecInput, sh *shown) {
	p := r.cfg.Prompts
	fmt.Fprintf(b, "\n%s\n", p.Heading("memory_content"))
	if in.Agent.MemoryFull {
		fmt.Fprintf(b, "%s\n", p.Heading("memory_full"))
	}
	if len(in.Agent.PersistentMemory) == 0 {
		fmt.Fprintf(b, "%s\n", p.Heading("no_memory"))
		return
	}
	b.WriteString(sh.memory)
}

// memoryEntries lists persistent memory, oldest key first, one item each.
func memoryEntries(pm map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(pm)) {
		fmt.Fprintf(&b, "- %s: %s\n", k, indent(pm[k]))
	}
	return b.String()
}

// compactJSON renders v as one line of JSON, cut at max runes.
func compactJSON(v any, max int) string {
	bs, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%v", v)
	}
	return engine.Truncate(string(bs), max)
}

// indent makes multi-line text sit inside a list item.
func indent(s string) string { return strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n    ") }

// oneLine collapses whitespace.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
