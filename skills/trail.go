package skills

import (
	"cmp"
	"context"
	"time"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/llm"
)

// record appends one LLM call of a step to the trail: every message sent,
// the raw answer (reasoning included), what it parsed into or why it did
// not, and what it cost. round is 1 for the first call, 2 for the repair.
// resp may be nil (a client that returned none); callErr is the call's
// failure, out and perr the parse's outcome.
func (r *runner) record(ctx context.Context, in *engine.ExecInput, req *llm.Request, round int, resp *llm.Response, callErr error, out *engine.Output, perr error) {
	if r.cfg.Trail == nil {
		return
	}
	l := &engine.TrailLLM{Model: req.Model, Round: round, Request: make([]engine.TrailChat, len(req.Messages))}
	for i, m := range req.Messages {
		l.Request[i] = engine.TrailChat{Role: m.Role, Content: engine.Body(m.Content)}
	}
	if resp != nil {
		if resp.Model != "" {
			l.Model = resp.Model
		}
		l.Answer = engine.Body(resp.Content)
		u := resp.Usage
		l.PromptTokens, l.CompletionTokens, l.CachedTokens = u.PromptTokens, u.CompletionTokens, u.CachedTokens
		// The HTTP requests the call made, retries included (a client
		// that does not say: its completions).
		l.LatencyMS, l.Attempts = u.LatencyMS, cmp.Or(resp.Attempts, u.Calls)
		if l.LatencyMS == 0 && resp.Latency > 0 {
			l.LatencyMS = resp.Latency.Milliseconds()
		}
	}
	switch {
	case callErr != nil:
		l.Error = callErr.Error()
	case perr != nil:
		l.ParseError = perr.Error()
	case out != nil:
		parsed := *out
		parsed.Err, parsed.Usage = nil, engine.Usage{}
		b := engine.JSONBody(parsed)
		l.Parsed = &b
	}
	st := &in.Step
	r.cfg.Trail.Append(ctx, engine.TrailEntry{
		Time: time.Now(), Kind: engine.TrailKindLLMCall, TaskID: st.TaskID, StageID: st.StageID,
		AgentID: in.Agent.AgentID, StepID: st.StepID, Skill: r.sk.name, LLM: l,
	})
}
