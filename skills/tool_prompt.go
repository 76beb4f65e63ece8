package skills

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/mas-mcp/mas-mcp/engine"
)

// targetToolStep finds the tool step an instruction_generation step writes
// its call for: the step it was linked to when planned, else the next
// pending tool step of the same stage after it (spec §3.4, §5.4).
func targetToolStep(in *engine.ExecInput) (*engine.StepState, bool) {
	steps := in.Agent.AgentStep.StepList
	if id := in.Step.TargetStepID; id != "" {
		for i := range steps {
			if steps[i].StepID == id {
				return &steps[i], true
			}
		}
		return nil, false
	}
	after := false
	for i := range steps {
		s := &steps[i]
		if s.StepID == in.Step.StepID {
			after = true
			continue
		}
		if after && s.TaskID == in.Step.TaskID && s.StageID == in.Step.StageID &&
			s.Type == engine.StepTool && s.ExecutionState == engine.StateInit {
			return s, true
		}
	}
	return nil, false
}

// writeToolStep writes the tool step an instruction is generated for (spec
// §5.4), its texts and the tool's guide as sh holds them.
func (r *runner) writeToolStep(b *strings.Builder, in *engine.ExecInput, sh *shown) {
	p := r.cfg.Prompts
	fmt.Fprintf(b, "%s\n", p.Heading("tool_step"))
	t, ok := targetToolStep(in)
	if !ok {
		return // prepare refuses to run without one
	}
	// spec §5.4: the tool step's intention and goal, then the tool's own
	// description. The MCP base rules §5.4 also names are the skill's MCP
	// section, in the prompt's fixed part where a provider caches them.
	fmt.Fprintf(b, "- step_id: %s\n- tool: %s\n- step_intention: %s\n- text_content:\n\n%s\n\n- %s: %s\n",
		t.StepID, t.Executor, sh.toolIntention, sh.toolText, t.Executor, sh.guide)
}

// toolName is the tool a tool_decision step decides on: the
// <tool_name>…</tool_name> its text names (spec §4.2), else the latest tool
// step run before it in the stage.
func toolName(in *engine.ExecInput) string {
	if n, ok := Block(in.Step.TextContent, "tool_name"); ok && strings.TrimSpace(n) != "" {
		return strings.TrimSpace(n)
	}
	name := ""
	for _, s := range stageSteps(in) {
		if s.StepID == in.Step.StepID {
			break
		}
		if s.Type == engine.StepTool {
			name = s.Executor
		}
	}
	return name
}

// toolCall is one recovered [tool] -> [tool_decision] pair.
type toolCall struct {
	tool     engine.StepState
	decision *engine.StepState
}

// toolChain recovers the current long-tail chain of one tool in this stage
// (spec §5.9): starting from the latest tool step with that name, it walks
// back pairing each tool step with the tool_decision after it, skipping
// instruction_generation and send_message steps, and stops at anything
// else. Calls are returned oldest first.
func toolChain(in *engine.ExecInput, name string) []toolCall {
	var steps []engine.StepState
	for _, s := range stageSteps(in) {
		if s.StepID == in.Step.StepID {
			break
		}
		steps = append(steps, s)
	}
	gap := func(s engine.StepState) bool {
		return s.Executor == engine.SkillInstructionGeneration || s.Executor == engine.SkillSendMessage
	}
	isTool := func(s engine.StepState) bool { return s.Type == engine.StepTool && s.Executor == name }
	isDecision := func(s engine.StepState) bool { return s.Executor == engine.SkillToolDecision }

	i := len(steps) - 1
	for i >= 0 && !isTool(steps[i]) {
		i--
	}
	if i < 0 {
		return nil
	}
	chain := []toolCall{{tool: steps[i]}}
	for {
		// Back from the current tool step to the decision before it…
		j := i - 1
		for j >= 0 && gap(steps[j]) {
			j--
		}
		if j < 0 || !isDecision(steps[j]) {
			break
		}
		// …and from that decision to the tool step it decided on.
		k := j - 1
		for k >= 0 && gap(steps[k]) {
			k--
		}
		if k < 0 || !isTool(steps[k]) || stopped(steps[j]) {
			break
		}
		d := steps[j]
		chain = append(chain, toolCall{tool: steps[k], decision: &d})
		i = k
	}
	// Each entry pairs a tool step with the decision taken after it; the
	// latest call's decision is the step being run now. Oldest first:
	slices.Reverse(chain)
	return chain
}

// stopped reports whether a tool_decision ended its chain (an empty list):
// the tool use before it is a separate, finished one.
func stopped(d engine.StepState) bool {
	if d.ExecutionState != engine.StateFinished {
		return false
	}
	switch l := d.ExecuteResult["tool_decision"].(type) {
	case []engine.StepSpec:
		return len(l) == 0
	case []any:
		return len(l) == 0
	}
	return false
}

// writeToolHistory writes this tool's calls so far (spec §5.9) in at most
// budget characters: going back from the newest call, calls are shown whole
// while they fit (the newest always is, cut when it alone does not fit),
// older ones in one line each while those fit, the oldest counted.
func (r *runner) writeToolHistory(b *strings.Builder, in *engine.ExecInput, budget int) {
	p := r.cfg.Prompts
	fmt.Fprintf(b, "%s\n", p.Heading("tool_history"))
	name := toolName(in)
	chain := toolChain(in, name)
	if len(chain) == 0 {
		fmt.Fprintf(b, "%s\n", p.Heading("no_tool_history"))
		return
	}
	// Field-style labels, like the rest of the prompt, read the same in
	// every language set.
	// The first call's intention, up to a quarter of the budget: the calls
	// need the rest.
	initial := engine.Truncate(oneLine(chain[0].tool.StepIntention), min(maxTextShown, max(budget/4, foldedResultShown)))
	head := fmt.Sprintf("- tool: %s\n- initial_step_intention: %s\n", name, initial)
	b.WriteString(head)
	// The headings, the note on folded calls and the digest line of the
	// calls left out take their share.
	budget -= utf8.RuneCountInString(p.Heading("tool_history") + "\n" + head + p.Heading("history_folded") + "\n" +
		p.Text("history_digest", map[string]any{"N": len(chain), "Finished": len(chain), "Failed": len(chain)}) + "\n")
	entries := make([]string, len(chain))
	used, whole, folded, oldest := 0, true, false, 0
	for n := len(chain) - 1; n >= 0; n-- {
		c := chain[n]
		if whole {
			var e strings.Builder
			fmt.Fprintf(&e, "\n#### [%d] step_id %s (%s)\n", n+1, c.tool.StepID, c.tool.ExecutionState)
			fmt.Fprintf(&e, "- step_intention: %s\n", engine.Truncate(oneLine(c.tool.StepIntention), maxTextShown))
			if t := strings.TrimSpace(c.tool.TextContent); t != "" {
				fmt.Fprintf(&e, "- text_content: %s\n", indent(engine.Truncate(t, maxTextShown)))
			}
			fmt.Fprintf(&e, "- instruction_content: %s\n", compactJSON(c.tool.InstructionContent, maxResultShown))
			fmt.Fprintf(&e, "- execute_result: %s\n", compactJSON(c.tool.ExecuteResult, maxResultShown))
			if c.decision != nil {
				fmt.Fprintf(&e, "- tool_decision_result: %s\n", compactJSON(c.decision.ExecuteResult, maxResultShown))
			}
			k := utf8.RuneCountInString(e.String())
			if n == len(chain)-1 && k > budget {
				// The newest call is always shown whole, cut when it
				// alone does not fit.
				entries[n], used = r.cut(e.String(), budget-1)+"\n", budget
				continue
			}
			if n == len(chain)-1 || used+k <= budget {
				entries[n], used = e.String(), used+k
				continue
			}
			whole = false
		}
		folded = true
		line := fmt.Sprintf("\n#### [%d] %s", n+1, foldedStep(c.tool))
		if k := utf8.RuneCountInString(line); used+k > budget {
			oldest = n + 1
			break
		}
		entries[n], used = line, used+utf8.RuneCountInString(line)
	}
	if folded {
		fmt.Fprintf(b, "%s\n", p.Heading("history_folded"))
	}
	if oldest > 0 {
		finished, failed := 0, 0
		for _, c := range chain[:oldest] {
			switch c.tool.ExecutionState {
			case engine.StateFinished:
				finished++
			case engine.StateFailed:
				failed++
			}
		}
		fmt.Fprintf(b, "%s\n", p.Text("history_digest", map[string]any{"N": oldest, "Finished": finished, "Failed": failed}))
	}
	b.WriteString(strings.Join(entries, ""))
}
