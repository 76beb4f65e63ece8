package downstream

import (
	"context"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
)

// record appends one call to a downstream server to the trail: op is
// "call_tool", "read_resource", "get_prompt" or "describe"; res is the
// server's whole answer (the trail keeps it unshortened, the step keeps
// it bounded); approval is the operator's answer to the risk gate, if
// one was asked.
func (e *Executor) record(ctx context.Context, in *engine.ExecInput, server, op, name string, args, res any, err error, start time.Time, approval any) {
	if e.cfg.Trail == nil {
		return
	}
	// The server's configured secrets are scrubbed: the trail is kept and
	// exported like the state.
	scrub := e.cfg.Pool.scrubber(server)
	t := &engine.TrailTool{
		Server: server, Op: op, Name: name, Arguments: engine.JSONBody(scrub.value(args)),
		DurationMS: time.Since(start).Milliseconds(),
	}
	if ap, ok := approval.(map[string]any); ok {
		t.Approval, _ = scrub.value(ap).(map[string]any)
	}
	var body any
	switch r := res.(type) {
	case *mcp.CallToolResult:
		if r != nil {
			body, t.IsError = r, r.IsError
		}
	case *mcp.ReadResourceResult:
		if r != nil {
			body = r
		}
	case *mcp.GetPromptResult:
		if r != nil {
			body = r
		}
	case nil:
	default:
		body = r
	}
	if body != nil {
		t.Result = engine.JSONBody(scrub.value(body))
	}
	if err != nil {
		t.Error = scrub.text(err.Error())
	}
	st := &in.Step
	e.cfg.Trail.Append(ctx, engine.TrailEntry{
		Time: start, Kind: engine.TrailKindToolCall, TaskID: st.TaskID, StageID: st.StageID,
		AgentID: in.Agent.AgentID, StepID: st.StepID, Skill: st.Executor, Tool: t,
	})
}
