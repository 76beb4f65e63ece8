package engine

// Bounds on what an executor's output hands the engine, as it is taken in
// (sync.go's apply): a model's answer can be of any size, and what it puts
// into a step, a stage or an agent is stored in a document NATS takes up
// to 1 MiB of.

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"unicode/utf8"
)

// MaxPlannedSteps bounds the steps one answer may add (a plan, a
// reflection's, a decision's or a tool_decision's steps): a longer list is
// a runaway answer, and each step is an LLM call to come. The skills
// refuse such a list to the model (asking for the next steps only); the
// engine keeps the first MaxPlannedSteps of any executor's list and
// rejects the rest.
const MaxPlannedSteps = 100

// maxNameChars bounds a name or an ID in what a model wrote (a planned
// step's executor and type; in an instruction a task's name, an agent's
// name or template, a task, stage or agent ID, a skill, a tool, a model):
// the server's limits.name_bytes holds operators' to 256 bytes, and
// nothing longer names anything in the MAS.
const maxNameChars = 256

// maxInstructionItems bounds each list of an agent's instruction (stages,
// an allocation, agents, skills, tools), as limits.list_items (64 by
// default) bounds an operator's.
const maxInstructionItems = 64

// maxMemoryOps bounds the persistent-memory ops one step applies: the
// memory's caps (30 entries by default) leave nothing for more to do, and
// each op adds a line to the step's result.
const maxMemoryOps = 64

// maxToolArgBytes bounds the arguments of one tool call a model wrote, as
// JSON: the call goes onto its tool step whole, in the agent's document
// (MaxDocumentBytes, 640 KiB by default), and cut it would be another
// call. A file of a quarter of a megabyte is written in several calls.
const maxToolArgBytes = 256 << 10

// takeOutput bounds what an executor's output hands the engine, before
// anything applies it: every free text (a summary, a message, the texts
// of the steps it plans, those of a task or agent instruction) is cut to
// MaxTextChars with the note, the executor and type of a planned step to
// maxNameChars (it is then rejected as no executor known). A name, an ID
// or a list of an instruction past its bound is refused instead: cut, it
// would name something else, or nothing. It returns that refusal, which
// fails the step. The output's own values are never changed in place:
// its Result may share them (a plan is both its steps and its result).
func (s *System) takeOutput(out *Output) error {
	if out.Completion != nil {
		c := s.clipText(*out.Completion)
		out.Completion = &c
	}
	if m := out.SendMessage; m != nil {
		c := *m
		c.Message = s.clipText(c.Message)
		out.SendMessage = &c
	}
	out.AddSteps = s.takeSpecs(out.AddSteps)
	out.AddNextSteps = s.takeSpecs(out.AddNextSteps)
	if sp := out.GetMoreInfo; sp != nil {
		c := s.takeSpec(*sp)
		out.GetMoreInfo = &c
	}
	if sp := out.ReactAction; sp != nil {
		c := s.takeSpec(*sp)
		out.ReactAction = &c
	}
	if ti := out.ToolInstruction; ti != nil && ti.Instruction != nil {
		if err := takeToolCall(ti.Instruction); err != nil {
			return err
		}
	}
	if ti := out.TaskInstruction; ti != nil {
		c, err := s.takeTaskInstruction(*ti)
		if err != nil {
			return err
		}
		out.TaskInstruction = &c
	}
	if ai := out.AgentInstruction; ai != nil {
		c, err := s.takeAgentInstruction(*ai)
		if err != nil {
			return err
		}
		out.AgentInstruction = &c
	}
	return nil
}

// takeSpec bounds one planned step's texts.
func (s *System) takeSpec(sp StepSpec) StepSpec {
	sp.StepIntention = s.clipText(sp.StepIntention)
	sp.TextContent = s.clipText(sp.TextContent)
	sp.Executor = s.clip(sp.Executor, maxNameChars)
	sp.Type = s.clip(sp.Type, maxNameChars)
	return sp
}

// takeSpecs bounds the texts of a list of planned steps, in a new list
// (nil stays nil: an empty list is an answer, none is not). Only the
// steps checkPlan may keep or quote are bounded: it rejects those past
// MaxPlannedSteps in one line, with the first of them.
func (s *System) takeSpecs(specs []StepSpec) []StepSpec {
	if specs == nil {
		return nil
	}
	out := make([]StepSpec, len(specs))
	for i, sp := range specs {
		if i <= MaxPlannedSteps {
			sp = s.takeSpec(sp)
		}
		out[i] = sp
	}
	return out
}

// intake checks the names and lists of an instruction and bounds its
// texts, collecting the first refusal.
type intake struct {
	s   *System
	err error
}

// name refuses a name or an ID past maxNameChars.
func (in *intake) name(field, v string) {
	if in.err == nil && len(v) > maxNameChars {
		if n := utf8.RuneCountInString(v); n > maxNameChars {
			in.err = errf(ErrLimit, "%s: %d characters, more than the limit of %d for names and IDs", field, n, maxNameChars)
		}
	}
}

// names refuses a list past maxInstructionItems, or a name in it past
// maxNameChars.
func (in *intake) names(field string, list []string) {
	in.items(field, len(list))
	for i, v := range list {
		in.name(fmt.Sprintf("%s[%d]", field, i), v)
	}
}

// items refuses a list of n items past maxInstructionItems.
func (in *intake) items(field string, n int) {
	if in.err == nil && n > maxInstructionItems {
		in.err = errf(ErrLimit, "%s: %d items, more than the limit of %d in an agent's instruction", field, n, maxInstructionItems)
	}
}

// allocation bounds an agent allocation: its agent IDs are names, its
// goals texts. The map is a new one.
func (in *intake) allocation(field string, alloc map[string]string) map[string]string {
	if alloc == nil {
		return nil
	}
	in.items(field, len(alloc))
	out := make(map[string]string, len(alloc))
	for _, id := range slices.Sorted(maps.Keys(alloc)) {
		in.name(field+" key", id)
		out[id] = in.s.clipText(alloc[id])
	}
	return out
}

// takeTaskInstruction bounds a task instruction a model wrote.
func (s *System) takeTaskInstruction(ti TaskInstruction) (TaskInstruction, error) {
	in := &intake{s: s}
	in.name("action", ti.Action)
	in.name("task_id", ti.TaskID)
	in.name("task_name", ti.TaskName)
	in.name("task_manager", ti.Manager)
	in.name("stage_id", ti.StageID)
	in.name("old_stage_id", ti.OldStageID)
	in.name("execution_state", ti.ExecutionState)
	ti.TaskIntention = s.clipText(ti.TaskIntention)
	ti.NewStageIntention = s.clipText(ti.NewStageIntention)
	ti.Summary = s.clipText(ti.Summary)
	ti.NewAgentAllocation = in.allocation("new_agent_allocation", ti.NewAgentAllocation)
	if ti.Stages != nil {
		in.items("stages", len(ti.Stages))
		if in.err != nil {
			return ti, in.err
		}
		stages := make([]StageSpec, len(ti.Stages))
		for i, sp := range ti.Stages {
			stages[i] = StageSpec{
				StageIntention:  s.clipText(sp.StageIntention),
				AgentAllocation: in.allocation(fmt.Sprintf("stages[%d].agent_allocation", i), sp.AgentAllocation),
			}
		}
		ti.Stages = stages
	}
	return ti, in.err
}

// takeAgentInstruction bounds an agent instruction a model wrote.
func (s *System) takeAgentInstruction(ai AgentInstruction) (AgentInstruction, error) {
	in := &intake{s: s}
	in.name("action", ai.Action)
	in.name("task_id", ai.TaskID)
	in.names("agents", ai.Agents)
	if c := ai.AgentConfig; c != nil {
		cfg := c.clone()
		in.name("agent_config.template", cfg.Template)
		in.name("agent_config.name", cfg.Name)
		in.names("agent_config.skills", cfg.Skills)
		in.names("agent_config.tools", cfg.Tools)
		if cfg.LLMConfig != nil {
			in.name("agent_config.llm_config.model", cfg.LLMConfig.Model)
		}
		cfg.Role = s.clipText(cfg.Role)
		cfg.Profile = s.clipText(cfg.Profile)
		ai.AgentConfig = &cfg
	}
	return ai, in.err
}

// takeToolCall refuses a tool call whose names or arguments are past their
// bounds (maxNameChars, maxToolArgBytes), naming the field, the size and
// the limit.
func takeToolCall(c *ToolCall) error {
	in := intake{}
	in.name("instruction_content.tool_name", c.ToolName)
	in.name("instruction_content.prompt_name", c.PromptName)
	in.name("instruction_content.resource_name", c.ResourceName)
	in.name("instruction_content.instruction_type", c.InstructionType)
	if in.err != nil {
		return in.err
	}
	if len(c.Arguments) == 0 {
		return nil
	}
	b, err := json.Marshal(c.Arguments)
	if err != nil {
		return errf(ErrInvalid, "instruction_content.arguments: %v", err)
	}
	if len(b) > maxToolArgBytes {
		return errf(ErrLimit, "instruction_content.arguments: %d bytes, more than the limit of %d for one tool call's arguments: split the work into smaller calls", len(b), maxToolArgBytes)
	}
	return nil
}
