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

func (r *runner) writeToolStep(b *strings.Builder, in *engine.ExecInput) {
	p := r.cfg.Prompts
	fmt.Fprintf(b, "%s\n", p.Heading("tool_step"))
	t, ok := targetToolStep(in)
	if !ok {
		return // prepare refuses to run without one
	}
	guide := ""
	if r.cfg.Tools != nil {
		guide = r.cfg.Tools.ToolGuides()[t.Executor]
	}
	// spec §5.4: the tool step's intention and goal, then the tool's own
	// description. The MCP base rules §5.4 also names are the skill's MCP
	// section, in the prompt's fixed part where a provider caches them.
	fmt.Fprintf(b, "- step_id: %s\n- tool: %s\n- step_intention: %s\n- text_content:\n\n%s\n\n- %s: %s\n",
		t.StepID, t.Executor, oneLine(t.StepIntention), strings.TrimSpace(t.TextContent),
		t.Executor, oneLine(guide))
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

// writeToolHistory writes this tool's calls so far (spec §5.9) in about
// budget characters: going back from the newest call, calls are shown whole
// while they fit (the newest always is), older ones in one line each.
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
	fmt.Fprintf(b, "- tool: %s\n- initial_step_intention: %s\n", name, engine.Truncate(oneLine(chain[0].tool.StepIntention), maxTextShown))
	entries := make([]string, len(chain))
	used, whole, folded := 0, true, false
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
			if k := utf8.RuneCountInString(e.String()); n == len(chain)-1 || used+k <= budget {
				entries[n], used = e.String(), used+k
				continue
			}
			whole = false
		}
		folded = true
		entries[n] = fmt.Sprintf("\n#### [%d] %s", n+1, foldedStep(c.tool))
	}
	if folded {
		fmt.Fprintf(b, "%s\n", p.Heading("history_folded"))
	}
	b.WriteString(strings.Join(entries, ""))
}
