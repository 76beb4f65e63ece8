package skills

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/llm"
	"github.com/mas-mcp/mas-mcp/prompts"
)

// Config wires the skills to a model and a prompt set.
type Config struct {
	// LLM answers every skill's request. Required.
	LLM llm.Client
	// Prompts is the prompt set (language). Required.
	Prompts *prompts.Set
	// Tools describes the downstream MCP servers (nil: none).
	Tools engine.ToolCatalog
	// Logger receives debug logs of calls (nil: discarded).
	Logger *slog.Logger
	// Trail records every LLM call: request, raw answer, parse result
	// (nil: off).
	Trail engine.Trail
	// PromptBudget caps, in characters, each prompt's variable sections
	// (stage history, tool history, persistent memory, the current step
	// with its message and the tool step it prepares): older history steps
	// are folded and the current step's longest parts cut to stay within it
	// (render). 0: DefaultPromptBudget; negative is rejected.
	PromptBudget int
}

// skill is one LLM skill: how its prompt is assembled and how its answer
// becomes an Output.
type skill struct {
	name string
	// sections lists the prompt's sections after the system prompt (§3's
	// "提示词"). render puts their fixed parts first; the variable parts
	// follow in this order, which is the spec's except that a stage history
	// comes before the current step (see render).
	sections []section
	// prepare runs before the LLM call; an error fails the step without a
	// call (e.g. instruction_generation with no tool step to write to).
	prepare func(in *engine.ExecInput) error
	// parse turns the answer (reasoning already stripped) into an Output.
	// An error is a contract violation: it goes back to the model once.
	parse func(answer string, in *engine.ExecInput) (*engine.Output, error)
}

// Executors returns an engine.Executor for each of the 13 skills.
func Executors(cfg Config) (map[string]engine.Executor, error) {
	if cfg.LLM == nil {
		return nil, errors.New("skills: config: LLM is required")
	}
	if cfg.Prompts == nil {
		return nil, errors.New("skills: config: Prompts is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.PromptBudget < 0 {
		return nil, fmt.Errorf("skills: config: PromptBudget %d: must not be negative", cfg.PromptBudget)
	}
	budget := cmp.Or(cfg.PromptBudget, DefaultPromptBudget)
	// Every prompt lists the agent's skills with their guides: render each
	// guide once.
	guides := map[string]string{}
	for n, g := range cfg.Prompts.SkillGuides() {
		guides[n] = oneLine(g)
	}
	out := map[string]engine.Executor{}
	for _, sk := range all() {
		if _, ok := cfg.Prompts.Skill(sk.name); !ok {
			return nil, fmt.Errorf("skills: prompt set %q has no skill %q", cfg.Prompts.Lang(), sk.name)
		}
		r := &runner{cfg: cfg, sk: sk, guides: guides, budget: budget}
		r.system, r.static = r.systemMessage(), map[section]string{}
		for _, sec := range sk.sections {
			if st := r.staticSection(sec); st != "" {
				r.static[sec] = st
			}
		}
		out[sk.name] = r
	}
	for _, n := range engine.SkillNames {
		if out[n] == nil {
			return nil, fmt.Errorf("skills: skill %q is not implemented", n)
		}
	}
	return out, nil
}

// all lists every skill definition.
func all() []skill {
	return []skill{
		planning(), reflection(), summary(), instructionGeneration(), think(),
		quickThink(), sendMessage(), processMessage(), taskManager(), agentManager(),
		askInfo(), toolDecision(), decision(),
	}
}

// runner executes one skill: prompt, one call, tolerant parsing with one
// repair round (LLM_CONTRACT.md).
type runner struct {
	cfg Config
	sk  skill
	// guides are the skills' use guides, one line each.
	guides map[string]string
	// budget is the variable sections' character budget (Config.PromptBudget).
	budget int
	// system and static are the system message and the static sections,
	// the same in every call (the prompt set does not change): rendered
	// once, not at every step.
	system string
	static map[section]string
}

// Execute implements engine.Executor.
func (r *runner) Execute(ctx context.Context, in *engine.ExecInput) *engine.Output {
	if r.sk.prepare != nil {
		if err := r.sk.prepare(in); err != nil {
			return &engine.Output{Err: err}
		}
	}
	system, user := r.render(in)
	req := &llm.Request{
		Messages: []llm.Message{{Role: llm.RoleSystem, Content: system}, {Role: llm.RoleUser, Content: user}},
		Tag:      fmt.Sprintf("agent=%s step=%s skill=%s", in.Agent.AgentID, in.Step.StepID, r.sk.name),
	}
	if c := in.Agent.LLMConfig; c != nil {
		req.Model, req.Temperature, req.MaxTokens = c.Model, c.Temperature, c.MaxTokens
	}
	var usage engine.Usage
	var last *llm.Response
	call := func() (string, error) {
		resp, err := r.cfg.LLM.Complete(ctx, req)
		last = resp
		if resp != nil {
			usage.Add(engineUsage(resp.Usage))
		}
		if err != nil {
			return "", err
		}
		return resp.Content, nil
	}

	answer, err := call()
	if err != nil {
		r.record(ctx, in, req, 1, last, err, nil, nil)
		return &engine.Output{Err: err, Usage: usage}
	}
	out, perr := r.parse(answer, in)
	r.record(ctx, in, req, 1, last, nil, out, perr)
	if perr != nil {
		// One repair round: the same prompt, the answer, the exact error.
		r.cfg.Logger.Debug("skill output rejected, repairing", "skill", r.sk.name, "step", in.Step.StepID, "err", perr)
		req.Messages = append(req.Messages,
			llm.Message{Role: llm.RoleAssistant, Content: echoed(answer)},
			llm.Message{Role: llm.RoleUser, Content: r.cfg.Prompts.Text("repair_request", map[string]any{"Error": perr.Error()})},
		)
		answer, err = call()
		if err != nil {
			r.record(ctx, in, req, 2, last, err, nil, nil)
			return &engine.Output{Err: err, Usage: usage}
		}
		out, perr = r.parse(answer, in)
		r.record(ctx, in, req, 2, last, nil, out, perr)
		if perr != nil {
			return &engine.Output{
				Err:    fmt.Errorf("%s output unusable after one repair round: %w", r.sk.name, perr),
				Usage:  usage,
				Result: map[string]any{"raw_output": engine.Truncate(answer, 2000)},
			}
		}
	}
	out.Usage = usage
	return out
}

// engineUsage is an LLM call's usage as the engine accounts it: where an
// answer enters the engine (the step's Output), llm's type becomes the
// engine's.
func engineUsage(u llm.Usage) engine.Usage {
	return engine.Usage{
		PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens,
		CachedTokens: u.CachedTokens, Calls: u.Calls, LatencyMS: u.LatencyMS,
		PromptChars: u.PromptChars, ResponseChars: u.ResponseChars,
	}
}

// parse runs the skill's parser on the raw answer (the extractors strip
// reasoning themselves, and can then tell the model when its only block was
// inside its reasoning) and collects the optional persistent-memory block.
func (r *runner) parse(answer string, in *engine.ExecInput) (*engine.Output, error) {
	out, err := r.sk.parse(answer, in)
	if err != nil {
		return nil, err
	}
	if out.Result == nil {
		out.Result = map[string]any{}
	}
	var ops []engine.MemoryOp
	switch err := ExtractJSON(answer, "persistent_memory", &ops); {
	case err == nil:
		out.Memory = ops
	case errors.Is(err, ErrNoBlock), errors.Is(err, ErrEmptyBlock):
		// The block is optional; an empty one says nothing.
	default:
		// The skill's own output is fine: keep it, say why memory was not updated.
		out.Result["persistent_memory_error"] = err.Error()
	}
	return out, nil
}

// textOutput is the parser of the skills that answer with one text block.
func textOutput(tag, resultKey string) func(string, *engine.ExecInput) (*engine.Output, error) {
	return func(answer string, _ *engine.ExecInput) (*engine.Output, error) {
		text, err := ExtractText(answer, tag)
		if err != nil {
			return nil, err
		}
		return &engine.Output{Result: map[string]any{resultKey: text}}, nil
	}
}

// stepList parses a list of steps (planning, reflection, decision,
// tool_decision). empty says the skill has an empty answer (LLM_CONTRACT.md:
// reflection, decision, tool_decision): an empty block and null then read
// as []. Without it both are parse errors; [] is accepted either way (the
// engine appends a reflection to a plan).
func stepList(answer, tag string, empty bool) ([]engine.StepSpec, error) {
	var steps []engine.StepSpec
	if err := ExtractJSON(answer, tag, &steps); err != nil {
		if empty && errors.Is(err, ErrEmptyBlock) {
			return []engine.StepSpec{}, nil
		}
		return nil, err
	}
	if len(steps) > maxStepsPerList {
		return nil, fmt.Errorf("<%s>: %d steps, more than the %d one answer may add: plan the next steps only, and plan again later", tag, len(steps), maxStepsPerList)
	}
	for i, s := range steps {
		if strings.TrimSpace(s.Executor) == "" {
			return nil, fmt.Errorf("<%s> step %d: executor is empty", tag, i)
		}
	}
	if steps == nil {
		// The block held null (or None).
		if !empty {
			return nil, fmt.Errorf("<%s>: null is not a list of steps: write a JSON list of steps", tag)
		}
		steps = []engine.StepSpec{}
	}
	return steps, nil
}

// quoted bounds a value of the model's that a parse error quotes: the
// error goes into the repair prompt and the step's result.
func quoted(v string) string { return engine.Truncate(v, 80) }

// maxStepsPerList bounds the steps one answer may add (a plan, a
// reflection's steps): a plan longer than that is a runaway answer, and
// each step is an LLM call to come. It is above the budgets of steps in a
// stage and outside one (60 and 100 by default): a plan the size of a
// whole stage's budget is a plan. It is the engine's own bound, which the
// skills tell the model of (the engine drops the surplus of any list).
const maxStepsPerList = engine.MaxPlannedSteps

// maxEchoedAnswer bounds the rejected answer the repair round sends back to
// the model (its start and its end, where blocks usually are).
const maxEchoedAnswer = 8000

// echoed is a rejected answer as the repair round shows it.
func echoed(answer string) string {
	if len(answer) <= maxEchoedAnswer {
		return answer
	}
	head, tail := answer[:maxEchoedAnswer/2], answer[len(answer)-maxEchoedAnswer/2:]
	head = strings.ToValidUTF8(head, "")
	tail = strings.ToValidUTF8(tail, "")
	return fmt.Sprintf("%s\n[… %d bytes of the answer left out …]\n%s", head, len(answer)-len(head)-len(tail), tail)
}

// errorf builds a parse error (shown to the model in the repair round).
func errorf(format string, a ...any) error { return fmt.Errorf(format, a...) }

// templateLLM reads a template's llm_config (model, temperature,
// max_tokens); nil when it sets none.
func templateLLM(m map[string]any) *engine.LLMConfig {
	var c engine.LLMConfig
	if v, ok := m["model"].(string); ok {
		c.Model = v
	}
	switch v := m["temperature"].(type) {
	case float64:
		f := float32(v)
		c.Temperature = &f
	case int:
		f := float32(v)
		c.Temperature = &f
	}
	if v, ok := m["max_tokens"].(int); ok {
		c.MaxTokens = v
	}
	if c == (engine.LLMConfig{}) {
		return nil
	}
	return &c
}

// Templates converts the prompt set's agent templates for the engine.
func Templates(set *prompts.Set) []engine.AgentConfig {
	var out []engine.AgentConfig
	for _, t := range set.Templates() {
		c := engine.AgentConfig{
			Template: t.Name, Name: t.Name, Role: t.Role, Profile: t.Profile,
			Skills: t.Skills, Tools: t.Tools,
		}
		c.LLMConfig = templateLLM(t.LLMConfig)
		out = append(out, c)
	}
	return out
}

// blankEntry is the index of the first null or blank entry of a list of
// agent_ids (JSON null decodes to "", which the model did not write), or -1.
func blankEntry(ids engine.StringList) int {
	for i, id := range ids {
		if strings.TrimSpace(id) == "" {
			return i
		}
	}
	return -1
}
