package downstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/llm"
)

// ExecutorConfig configures the tool executor.
type ExecutorConfig struct {
	// Pool reaches the servers. Required.
	Pool *Pool
	// Texts renders the step texts the executor writes (the prompt set).
	Texts engine.Texts
	// ConfirmTimeout bounds the wait for the operator's approval of a risky
	// call. Default 10 minutes.
	ConfirmTimeout time.Duration
	// MaxResultBytes bounds a call's result kept on the step; larger text
	// and data are cut with a note. Default 64 KiB.
	MaxResultBytes int
	// NoArgumentQuestions: a call whose arguments fail the tool's input
	// schema fails at once, instead of the operator being asked for the
	// missing or invalid fields (spec 001).
	NoArgumentQuestions bool
	// LLM answers the sampling requests of servers configured with
	// allowSampling (nil: they are refused).
	LLM llm.Client
	// OperatorElicit, when set, also puts a form (a server's elicitation,
	// a tool call's missing arguments) to the task's operator as an
	// elicitation to their own MCP client; it fails at once when no client
	// of theirs can take one. The first answer, there or in the inbox, wins.
	OperatorElicit ElicitFunc
	Logger         *slog.Logger
	// Trail records every call: server, tool, arguments, result, duration,
	// approval (nil: off).
	Trail engine.Trail
}

// Executor runs every tool step (spec §4.2): the step's executor names the
// MCP server, its instruction_content (written by instruction_generation)
// says what to do.
type Executor struct {
	cfg ExecutorConfig
}

// NewExecutor checks cfg and returns the tool executor.
func NewExecutor(cfg ExecutorConfig) (*Executor, error) {
	switch {
	case cfg.Pool == nil:
		return nil, errors.New("downstream: executor: Pool is required")
	case cfg.Texts == nil:
		return nil, errors.New("downstream: executor: Texts is required")
	}
	if cfg.ConfirmTimeout <= 0 {
		cfg.ConfirmTimeout = 10 * time.Minute
	}
	if cfg.MaxResultBytes <= 0 {
		cfg.MaxResultBytes = 64 << 10
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	e := &Executor{cfg: cfg}
	cfg.Pool.serve(e)
	return e, nil
}

// Execute implements engine.Executor. The step's error and result are
// scrubbed of the server's configured secrets (secrets.go). Its calls
// wait for a server they cannot reach, telling in.ServerOutage
// (outage.go).
func (e *Executor) Execute(ctx context.Context, in *engine.ExecInput) *engine.Output {
	ctx = withOutageWait(ctx, in.ServerOutage)
	if ins := in.Step.InstructionContent; ins != nil && ins.InstructionType != "get_description" && ins.ToolName != "" {
		// A copy: the operator's completed or corrected arguments change
		// the call made, not the step's instruction_content.
		return e.tracedCall(ctx, in, in.Step.Executor, ins.Clone()) // scrubbed before its span records it
	}
	return e.cfg.Pool.scrubber(in.Step.Executor).output(e.execute(ctx, in))
}

// decide is the tool_decision step that follows a tool step (key: the
// texts' key prefix).
func (e *Executor) decide(in *engine.ExecInput, key string) *engine.ToolDecisionRequest {
	data := map[string]any{"ToolName": in.Step.Executor}
	return &engine.ToolDecisionRequest{
		TaskID: in.Step.TaskID, StageID: in.Step.StageID, ToolName: in.Step.Executor,
		StepIntention: e.cfg.Texts.Text(key+"_intention", data),
		TextContent:   e.cfg.Texts.Text(key+"_text", data),
	}
}

func (e *Executor) execute(ctx context.Context, in *engine.ExecInput) *engine.Output {
	server := in.Step.Executor
	if in.Step.InstructionContent == nil {
		return &engine.Output{Err: fmt.Errorf("tool step for %s has no instruction_content: the instruction_generation step before it did not write one (it failed or was skipped)", server)}
	}
	ins := in.Step.InstructionContent
	switch {
	case ins.InstructionType == "get_description":
		start := time.Now()
		caps, err := e.cfg.Pool.Describe(ctx, server)
		e.record(ctx, in, server, "describe", "", nil, caps, err, start, nil)
		if err != nil {
			return &engine.Output{Err: err}
		}
		return &engine.Output{
			Result:           map[string]any{"capabilities_list_description": e.described(caps)},
			NeedToolDecision: e.decide(in, "tool_describe"),
		}
	case ins.ResourceName != "":
		uri, _ := ins.Arguments["uri"].(string)
		if uri == "" {
			return &engine.Output{Err: errors.New(`instruction_content.arguments.uri: is empty; a resource call needs {"uri": …}`)}
		}
		var res *mcp.ReadResourceResult
		start := time.Now()
		cctx := withCaller(ctx, in, "resource "+uri)
		err := e.cfg.Pool.do(cctx, server, true, func(ctx context.Context, s *mcp.ClientSession) error {
			var err error
			res, err = s.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
			return err
		})
		e.record(ctx, in, server, "read_resource", ins.ResourceName, ins.Arguments, res, err, start, nil)
		if err != nil {
			return &engine.Output{Err: fmt.Errorf("mcp server %q: read resource %q: %w", server, uri, err), Usage: callerOf(cctx).spent()}
		}
		return &engine.Output{Result: map[string]any{"mcp_server_result": e.bounded(res)}, NeedToolDecision: e.decide(in, "tool_result"),
			Usage: callerOf(cctx).spent()}
	case ins.PromptName != "":
		args := map[string]string{}
		for k, v := range ins.Arguments {
			if s, ok := v.(string); ok {
				args[k] = s
			} else {
				bs, _ := json.Marshal(v)
				args[k] = string(bs)
			}
		}
		var res *mcp.GetPromptResult
		start := time.Now()
		cctx := withCaller(ctx, in, "prompt "+ins.PromptName)
		err := e.cfg.Pool.do(cctx, server, true, func(ctx context.Context, s *mcp.ClientSession) error {
			var err error
			res, err = s.GetPrompt(ctx, &mcp.GetPromptParams{Name: ins.PromptName, Arguments: args})
			return err
		})
		e.record(ctx, in, server, "get_prompt", ins.PromptName, args, res, err, start, nil)
		if err != nil {
			return &engine.Output{Err: fmt.Errorf("mcp server %q: get prompt %q: %w", server, ins.PromptName, err), Usage: callerOf(cctx).spent()}
		}
		return &engine.Output{Result: map[string]any{"mcp_server_result": e.bounded(res)}, NeedToolDecision: e.decide(in, "tool_result"),
			Usage: callerOf(cctx).spent()}
	}
	return &engine.Output{Err: errors.New(`instruction_content: needs "instruction_type": "get_description", or one of "tool_name", "resource_name", "prompt_name"`)}
}

// callTool validates and (after the risk gate) makes one tool call.
func (e *Executor) callTool(ctx context.Context, in *engine.ExecInput, server string, ins *engine.ToolCall, next *engine.ToolDecisionRequest) *engine.Output {
	caps, err := e.cfg.Pool.Describe(ctx, server)
	if err != nil {
		return &engine.Output{Err: err}
	}
	tool, ok := caps.Tools[ins.ToolName]
	if !ok {
		names := make([]string, 0, len(caps.Tools))
		for n := range caps.Tools {
			names = append(names, n)
		}
		sort.Strings(names)
		return &engine.Output{Err: fmt.Errorf("tool_name %q: server %s has no such tool (its tools: %s)", ins.ToolName, server, strings.Join(names, ", "))}
	}
	if ins.Arguments == nil {
		ins.Arguments = map[string]any{}
	}
	result := map[string]any{}
	if err := checkArguments(tool.schema, ins.Arguments); err != nil {
		err = fmt.Errorf("arguments of %s.%s: %v", server, ins.ToolName, err)
		if e.cfg.NoArgumentQuestions {
			return &engine.Output{Err: err}
		}
		asked, err := e.completeArguments(ctx, in, server, ins, tool, err)
		if asked != nil {
			result["operator_arguments"] = asked
		}
		if err != nil {
			return &engine.Output{Err: err, Result: result}
		}
	}
	if e.risky(server, ins.ToolName, tool) {
		approval, err := e.confirm(ctx, in, server, ins)
		result["operator_approval"] = approval
		if err != nil {
			e.record(ctx, in, server, "call_tool", ins.ToolName, ins.Arguments, nil, err, time.Now(), approval)
			return &engine.Output{Err: err, Result: result}
		}
	}
	var res *mcp.CallToolResult
	safe := tool.Annotations != nil && (tool.Annotations.ReadOnlyHint || tool.Annotations.IdempotentHint)
	start := time.Now()
	cctx := withCaller(ctx, in, ins.ToolName)
	err = e.cfg.Pool.do(cctx, server, safe, func(ctx context.Context, s *mcp.ClientSession) error {
		var err error
		res, err = s.CallTool(ctx, &mcp.CallToolParams{Name: ins.ToolName, Arguments: ins.Arguments})
		return err
	})
	e.record(ctx, in, server, "call_tool", ins.ToolName, ins.Arguments, res, err, start, result["operator_approval"])
	// What the server's sampling requests cost the MAS's LLM.
	usage := callerOf(cctx).spent()
	if err != nil {
		return &engine.Output{Err: fmt.Errorf("mcp server %q: call %s: %w", server, ins.ToolName, err), Result: result, Usage: usage}
	}
	result["mcp_server_result"] = e.bounded(res)
	if res.IsError {
		return &engine.Output{Err: fmt.Errorf("mcp server %q: tool %s reported an error: %s", server, ins.ToolName, contentText(res.Content, 500)),
			Result: result, NeedToolDecision: next, Usage: usage}
	}
	return &engine.Output{Result: result, NeedToolDecision: next, Usage: usage}
}

// resolveSchema reads a tool's input schema; nil when there is none or it
// cannot be read (a schema we cannot read is the server's business).
func resolveSchema(schema any) *jsonschema.Resolved {
	if schema == nil {
		return nil
	}
	b, err := json.Marshal(schema)
	if err != nil {
		return nil
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(b, &s); err != nil {
		return nil
	}
	resolved, err := s.Resolve(nil)
	if err != nil {
		return nil
	}
	return resolved
}

// checkArguments validates a call's arguments against the tool's input schema.
func checkArguments(schema *jsonschema.Resolved, args map[string]any) error {
	if schema == nil {
		return nil
	}
	return schema.Validate(args)
}

// risky reports whether a call waits for the operator: a high-risk server,
// or a tool that is not read-only and does not declare itself
// non-destructive (spec 001's risk grading, with MCP's annotation
// defaults); autoApprove names tools that never wait.
func (e *Executor) risky(server, tool string, desc ToolDesc) bool {
	sc, _ := e.cfg.Pool.Server(server)
	if slices.Contains(sc.AutoApprove, tool) {
		return false
	}
	if sc.Risk == RiskHigh {
		return true
	}
	// MCP's defaults: a tool that does not say otherwise may modify its
	// world (readOnlyHint false) destructively (destructiveHint true).
	a := desc.Annotations
	return a == nil || (!a.ReadOnlyHint && (a.DestructiveHint == nil || *a.DestructiveHint))
}

// argumentsText is a call's arguments as JSON, for a question to the
// operator. Arguments are decoded JSON (the model's or the operator's), so
// they encode; were they ever not to, the question shows them as Go prints
// them rather than nothing.
func argumentsText(args map[string]any) string {
	b, err := json.Marshal(args)
	if err != nil {
		return fmt.Sprintf("%v", args)
	}
	return string(b)
}

// confirm asks the task's operator to approve the call and waits.
// A structured decision (answer_approval, a button) wins over the text;
// arguments it carries replace the call's.
func (e *Executor) confirm(ctx context.Context, in *engine.ExecInput, server string, ins *engine.ToolCall) (map[string]any, error) {
	question := e.cfg.Texts.Text("tool_confirm", map[string]any{
		"AgentID": in.Agent.AgentID, "AgentName": in.Agent.Name, "Server": server, "ToolName": ins.ToolName,
		"Arguments": argumentsText(ins.Arguments), "StepIntention": in.Step.StepIntention,
	})
	ans, err := e.askApproval(ctx, in, engine.OperatorQuestion{
		TaskID: in.Step.TaskID, StageID: in.Step.StageID, AgentID: in.Agent.AgentID,
		Question: question, Timeout: e.cfg.ConfirmTimeout,
		// The call is made only after the answer: a restart that finds
		// the question unanswered runs the step again.
		StepID: in.Step.StepID, BeforeCall: true,
	})
	reply := ans.Text
	if d := ans.Decision; err == nil && d != nil {
		if !d.Approve {
			return map[string]any{"approved": false, "reply": reply},
				fmt.Errorf("the operator refused the call of %s.%s: %q", server, ins.ToolName, d.Note)
		}
		out := map[string]any{"approved": true, "reply": reply}
		if d.Arguments != nil {
			ins.Arguments = d.Arguments
			out["edited_arguments"] = d.Arguments
		}
		return out, nil
	}
	switch {
	case errors.Is(err, engine.ErrNoAnswer):
		return map[string]any{"approved": false, "timed_out": true},
			fmt.Errorf("the operator did not approve the call of %s.%s within %s; it was not made", server, ins.ToolName, e.cfg.ConfirmTimeout)
	case err != nil:
		return map[string]any{"approved": false}, fmt.Errorf("asking the operator to approve %s.%s: %w", server, ins.ToolName, err)
	case !approves(reply):
		return map[string]any{"approved": false, "reply": reply},
			fmt.Errorf("the operator refused the call of %s.%s: %q", server, ins.ToolName, reply)
	}
	return map[string]any{"approved": true, "reply": reply}, nil
}

// approves reads an operator's answer: it approves when it starts with a
// yes-word, in English or Chinese, standing alone — the whole reply, or
// followed by a space or punctuation. "yesterday", "好像不行" (seems not),
// "可以吗？" (may it?) and "确认一下参数再说" (let me check first) refuse;
// so does anything else.
func approves(reply string) bool {
	r := strings.ToLower(strings.TrimSpace(reply))
	for _, w := range []string{"yes", "y", "ok", "okay", "approve", "approved", "allow", "go ahead", "sure", "confirm",
		"是的", "是", "好的", "好", "同意", "可以", "批准", "确认", "允许"} {
		rest, ok := strings.CutPrefix(r, w)
		if !ok {
			continue
		}
		if rest == "" {
			return true
		}
		next, _ := utf8.DecodeRuneInString(rest)
		if unicode.IsSpace(next) || (unicode.IsPunct(next) && !strings.ContainsRune("?？'’", next)) {
			return true
		}
	}
	return false
}

// contentText joins a result's text blocks, cut at max runes.
func contentText(cs []mcp.Content, max int) string {
	var b strings.Builder
	for _, c := range cs {
		if t, ok := c.(*mcp.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	s := []rune(b.String())
	if len(s) > max {
		return string(s[:max]) + "…"
	}
	return string(s)
}

// bounded returns a result as plain JSON data (content blocks kept as
// structured data: text, images, embedded resources, resource links), kept
// near MaxResultBytes: long strings are cut, each time shorter, and when
// that is not enough (a listing of very many entries) trailing list items
// are dropped; a note says what was cut.
func (e *Executor) bounded(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return map[string]any{"error": "unreadable result: " + err.Error()}
	}
	fresh := func() any {
		var data any
		if err := json.Unmarshal(b, &data); err != nil {
			return map[string]any{"error": "unreadable result: " + err.Error()}
		}
		return data
	}
	bound := e.cfg.MaxResultBytes
	if len(b) <= bound {
		return fresh()
	}
	const minString = 64
	var data any
	var cut, dropped int
	for limit := bound / 4; ; limit /= 2 {
		limit = max(limit, minString)
		data, cut = fresh(), 0
		data = cutStrings(data, limit, &cut)
		if e.fits(data) || limit == minString {
			break
		}
	}
	if !e.fits(data) {
		// Strings are as short as they go: keep fewer items of each list.
		for keep := 64; keep >= 1; keep /= 2 {
			trial, c, d := fresh(), 0, 0
			trial = cutStrings(trial, minString, &c)
			trial = keepItems(trial, keep, &d)
			data, cut, dropped = trial, c, d
			if e.fits(data) {
				break
			}
		}
	}
	note := fmt.Sprintf("the result was %d bytes; %d bytes of long strings were cut", len(b), cut)
	if dropped > 0 {
		note += fmt.Sprintf(" and %d more list items were left out", dropped)
	}
	if m, ok := data.(map[string]any); ok {
		m["_truncated"] = note
		return data
	}
	return map[string]any{"result": data, "_truncated": note}
}

// fits reports whether data's JSON fits MaxResultBytes.
func (e *Executor) fits(data any) bool {
	out, err := json.Marshal(data)
	return err == nil && len(out) <= e.cfg.MaxResultBytes
}

// describedKinds are the capability lists of a description, by name.
var describedKinds = []string{"tools", "resources", "resource_templates", "prompts"}

// described is a server's capabilities as a get_description step keeps
// them: whole when they fit MaxResultBytes. Otherwise every name stays —
// what the server offers is what the model needs first — and the details
// give way: long strings (descriptions, schemas' texts) are cut, each time
// shorter; then only the first entries of each list (by name) keep their
// details and the others are listed by name only, in tools_without_details
// (resources_…, resource_templates_…, prompts_…); and when even the names
// do not fit, the lists of names are cut. A note says what was cut.
func (e *Executor) described(caps *Capabilities) any {
	b, err := json.Marshal(caps)
	if err != nil {
		return map[string]any{"error": "unreadable description: " + err.Error()}
	}
	fresh := func() map[string]any {
		var data map[string]any
		_ = json.Unmarshal(b, &data) // b is a Capabilities' JSON
		return data
	}
	bound := e.cfg.MaxResultBytes
	if len(b) <= bound {
		return fresh()
	}
	const minString = 64
	var data map[string]any
	var cut, limit int
	for limit = 1024; limit >= minString; limit /= 4 {
		data, cut = fresh(), 0
		cutStrings(data, limit, &cut)
		if e.fits(data) {
			break
		}
	}
	limit = max(limit, minString)
	most := 0
	for _, k := range describedKinds {
		m, _ := data[k].(map[string]any)
		most = max(most, len(m))
	}
	// Details for the first keep entries of each list only, then (names
	// >= 0) at most names of the others by name.
	var bare, left map[string]int // per kind: entries listed by name only, names left out
	shrink := func(keep, names int) {
		data, cut = fresh(), 0
		cutStrings(data, limit, &cut)
		bare, left = map[string]int{}, map[string]int{}
		for _, k := range describedKinds {
			m, _ := data[k].(map[string]any)
			if len(m) <= keep {
				continue
			}
			rest := slices.Sorted(maps.Keys(m))[keep:]
			for _, n := range rest {
				delete(m, n)
			}
			bare[k] = len(rest)
			if names >= 0 && len(rest) > names {
				left[k] = len(rest) - names
				rest = rest[:names]
			}
			data[k+"_without_details"] = rest
		}
	}
	for keep := most / 2; !e.fits(data); keep /= 2 {
		shrink(keep, -1)
		if keep == 0 {
			break
		}
	}
	for names := most / 2; !e.fits(data); names /= 2 {
		shrink(0, names)
		if names == 0 {
			break
		}
	}
	note := fmt.Sprintf("the description was %d bytes, more than the limit of %d: %d bytes of long strings (descriptions, schemas' texts) were cut", len(b), bound, cut)
	for _, k := range describedKinds {
		if n := bare[k] - left[k]; n > 0 {
			note += fmt.Sprintf("; %d %s are listed by name only (%s_without_details)", n, strings.ReplaceAll(k, "_", " "), k)
		}
		if n := left[k]; n > 0 {
			note += fmt.Sprintf("; %d more %s were left out", n, strings.ReplaceAll(k, "_", " "))
		}
	}
	data["_truncated"] = note
	return data
}

// cutStrings cuts every string of v longer than limit bytes (on a rune
// boundary, with a note), adding the bytes cut to *cut.
func cutStrings(v any, limit int, cut *int) any {
	switch x := v.(type) {
	case map[string]any:
		for k, vv := range x {
			x[k] = cutStrings(vv, limit, cut)
		}
	case []any:
		for i := range x {
			x[i] = cutStrings(x[i], limit, cut)
		}
	case string:
		if len(x) > limit {
			end := limit
			for end > 0 && !utf8.RuneStart(x[end]) {
				end--
			}
			*cut += len(x) - end
			return x[:end] + fmt.Sprintf("…[truncated %d bytes]", len(x)-end)
		}
	}
	return v
}

// keepItems keeps the first keep items of every list of v, adding the
// number left out to *dropped.
func keepItems(v any, keep int, dropped *int) any {
	switch x := v.(type) {
	case map[string]any:
		for k, vv := range x {
			x[k] = keepItems(vv, keep, dropped)
		}
	case []any:
		if len(x) > keep {
			*dropped += len(x) - keep
			x = x[:keep]
		}
		for i := range x {
			x[i] = keepItems(x[i], keep, dropped)
		}
		return x
	}
	return v
}

// SafeToRerun implements engine.Rerunner: a tool step interrupted by a
// crash may run again when it only reads (get_description, a resource, a
// prompt) or its tool declares readOnlyHint or idempotentHint.
func (e *Executor) SafeToRerun(step engine.StepState) bool {
	ins := step.InstructionContent
	switch {
	case ins == nil:
		return true // never called anything: no instruction yet
	case ins.InstructionType == "get_description", ins.ResourceName != "", ins.PromptName != "":
		return true
	case ins.ToolName == "":
		return true // never called anything: no instruction yet
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	caps, err := e.cfg.Pool.Describe(ctx, step.Executor)
	if err != nil {
		return false
	}
	a := caps.Tools[ins.ToolName].Annotations
	return a != nil && (a.ReadOnlyHint || a.IdempotentHint)
}
