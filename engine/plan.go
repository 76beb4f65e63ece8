package engine

import (
	"fmt"
	"slices"
	"strings"
)

// Rejection is a planned step the engine refused, with the reason the agent
// sees in its next reflection (execute_result.rejected_steps).
type Rejection struct {
	Step   StepSpec `json:"step"`
	Reason string   `json:"reason"`
}

// checkPlan applies LLM_CONTRACT.md's list rules for the skill that planned
// specs, against the agent's skills and tools:
//   - every step needs a known type and executor the agent has; type may be
//     omitted when the executor tells it;
//   - tool_decision is never planned (tool steps trigger it, spec §3.12);
//     summary only ends a reflection's list (spec §3.3);
//   - instruction_generation must directly precede a tool step, and a tool
//     step without one gets one (spec §4: [instruction_generation] -> [tool]);
//   - planning lists end in reflection (one is appended); a reflection list
//     that is empty means the goal is met (a summary is added), one that
//     ends neither in reflection nor summary gets a reflection appended;
//   - tool_decision's list is empty or one [instruction_generation, tool] pair;
//   - at most MaxPlannedSteps steps are taken; the rest are rejected in one
//     entry (one per step would make the step's result as long as the list).
func (s *System) checkPlan(ag *AgentState, skill string, specs []StepSpec) ([]StepSpec, []Rejection) {
	var kept []StepSpec
	var rej []Rejection
	reject := func(sp StepSpec, format string, a ...any) {
		rej = append(rej, Rejection{Step: sp, Reason: fmt.Sprintf(format, a...)})
	}
	if n := len(specs) - MaxPlannedSteps; n > 0 {
		reject(specs[MaxPlannedSteps], "this step and the %d after it (%d steps) were ignored: one answer may add at most %d steps; plan the next steps only, and plan again later",
			n-1, n, MaxPlannedSteps)
		specs = specs[:MaxPlannedSteps]
	}
	for i, sp := range specs {
		sp.Executor = strings.TrimSpace(sp.Executor)
		sp.Type = strings.ToLower(strings.TrimSpace(sp.Type))
		if sp.Type == "" {
			switch {
			case slices.Contains(SkillNames, sp.Executor):
				sp.Type = StepSkill
			case slices.Contains(ag.Tools, sp.Executor):
				sp.Type = StepTool
			}
		}
		last := i == len(specs)-1
		switch sp.Type {
		case StepSkill:
			switch {
			case !slices.Contains(SkillNames, sp.Executor):
				reject(sp, "executor %q: no such skill", sp.Executor)
				continue
			case !slices.Contains(ag.Skills, sp.Executor):
				reject(sp, "executor %q: you lack this skill (your skills: %s)", sp.Executor, strings.Join(ag.Skills, ", "))
				continue
			case sp.Executor == SkillToolDecision:
				reject(sp, "executor %q: tool_decision is never planned; tool steps trigger it", sp.Executor)
				continue
			case sp.Executor == SkillSummary && !(skill == SkillReflection && last):
				reject(sp, "executor %q: summary may only end a reflection's list", sp.Executor)
				continue
			}
		case StepTool:
			if !slices.Contains(ag.Tools, sp.Executor) {
				reject(sp, "executor %q: not one of your tools (%s)", sp.Executor, strings.Join(ag.Tools, ", "))
				continue
			}
		case "":
			reject(sp, "executor %q: neither a skill nor one of your tools (%s), and type is empty", sp.Executor, strings.Join(ag.Tools, ", "))
			continue
		default:
			reject(sp, "type %q: must be %q or %q", sp.Type, StepSkill, StepTool)
			continue
		}
		kept = append(kept, sp)
	}

	// Pair instruction_generation with tool steps.
	var paired []StepSpec
	for i, sp := range kept {
		nextIsTool := i+1 < len(kept) && kept[i+1].Type == StepTool
		prevIsIG := len(paired) > 0 && paired[len(paired)-1].Executor == SkillInstructionGeneration
		switch {
		case sp.Executor == SkillInstructionGeneration && !nextIsTool:
			reject(sp, "executor %q: instruction_generation must directly precede the tool step it prepares", sp.Executor)
			continue
		case sp.Type == StepTool && !prevIsIG:
			if !slices.Contains(ag.Skills, SkillInstructionGeneration) {
				reject(sp, "executor %q: a tool step needs an instruction_generation step, a skill you lack", sp.Executor)
				continue
			}
			paired = append(paired, StepSpec{
				StepIntention: s.text("tool_instruction_intention", map[string]any{"Intention": sp.StepIntention}),
				Type:          StepSkill,
				Executor:      SkillInstructionGeneration,
				TextContent:   sp.TextContent,
			})
		}
		paired = append(paired, sp)
	}
	kept = paired

	lastIs := func(exec ...string) bool {
		return len(kept) > 0 && slices.Contains(exec, kept[len(kept)-1].Executor)
	}
	switch skill {
	case SkillPlanning:
		if !lastIs(SkillReflection) {
			kept = append(kept, s.reflectionSpec(s.text("reason_plan_ends", nil)))
		}
	case SkillReflection:
		switch {
		case len(kept) == 0:
			kept = append(kept, s.summarySpec(s.text("reason_goal_met", nil)))
		case !lastIs(SkillReflection, SkillSummary):
			kept = append(kept, s.reflectionSpec(s.text("reason_reflection_ends", nil)))
		}
	case SkillToolDecision:
		if len(kept) > 2 {
			for _, sp := range kept[2:] {
				reject(sp, "tool_decision continues with exactly one [instruction_generation, tool] pair")
			}
			kept = kept[:2]
		}
	}
	return kept, rej
}

// reflectionSpec is a reflection step the engine adds, saying why.
func (s *System) reflectionSpec(reason string) StepSpec {
	return StepSpec{
		StepIntention: s.text("reflection_intention", nil),
		Type:          StepSkill,
		Executor:      SkillReflection,
		TextContent:   s.text("reflection_text", map[string]any{"Reason": reason}),
	}
}

// summarySpec is a summary step the engine adds, saying why.
func (s *System) summarySpec(reason string) StepSpec {
	return StepSpec{
		StepIntention: s.text("summary_intention", nil),
		Type:          StepSkill,
		Executor:      SkillSummary,
		TextContent:   s.text("summary_text", map[string]any{"Reason": reason}),
	}
}
