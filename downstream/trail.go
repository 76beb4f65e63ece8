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
	t := &engine.TrailTool{
		Server: server, Op: op, Name: name, Arguments: engine.JSONBody(args),
		DurationMS: time.Since(start).Milliseconds(),
	}
	if ap, ok := approval.(map[string]any); ok {
		t.Approval = ap
	}
	switch r := res.(type) {
	case *mcp.CallToolResult:
		if r != nil {
			t.Result, t.IsError = engine.JSONBody(r), r.IsError
		}
	case *mcp.ReadResourceResult:
		if r != nil {
			t.Result = engine.JSONBody(r)
		}
	case *mcp.GetPromptResult:
		if r != nil {
			t.Result = engine.JSONBody(r)
		}
	case nil:
	default:
		t.Result = engine.JSONBody(r)
	}
	if err != nil {
		t.Error = err.Error()
	}
	st := &in.Step
	e.cfg.Trail.Append(ctx, engine.TrailEntry{
		Time: start, Kind: engine.TrailKindToolCall, TaskID: st.TaskID, StageID: st.StageID,
		AgentID: in.Agent.AgentID, StepID: st.StepID, Skill: st.Executor, Tool: t,
	})
}
