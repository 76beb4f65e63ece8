package engine

// Bounds on what an executor's output hands the engine, as it is taken in
// (sync.go's apply): a model's answer can be of any size, and what it puts
// into a step, a stage or an agent is stored in a document NATS takes up
// to 1 MiB of.

// MaxPlannedSteps bounds the steps one answer may add (a plan, a
// reflection's, a decision's or a tool_decision's steps): a longer list is
// a runaway answer, and each step is an LLM call to come. The skills
// refuse such a list to the model (asking for the next steps only); the
// engine keeps the first MaxPlannedSteps of any executor's list and
// rejects the rest.
const MaxPlannedSteps = 100

// maxNameChars bounds a name in what a model wrote (a planned step's
// executor and type): nothing longer names anything in the MAS.
const maxNameChars = 256

// takeOutput bounds what an executor's output hands the engine, before
// anything applies it: every free text (a summary, a message, the texts
// of the steps it plans) is cut to MaxTextChars with the note, the
// executor and type of a planned step to maxNameChars (it is then
// rejected as no executor known). The output's own values are never
// changed in place: its Result may share them (a plan is both its steps
// and its result).
func (s *System) takeOutput(out *Output) {
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
