package downstream

import (
	"context"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/telemetry"
)

// tracedCall is callTool inside an execute_tool span (and the tool-call
// metrics). The MCP request itself gets its own client span, and its
// params._meta the trace context, from telemetry.ClientMiddleware, which
// every connection installs.
func (e *Executor) tracedCall(ctx context.Context, in *engine.ExecInput, server string, ins *engine.ToolCall, next *engine.ToolDecisionRequest) *engine.Output {
	ctx, span := telemetry.StartTool(ctx, server, ins.ToolName, ins.Arguments)
	out := e.callTool(ctx, in, server, ins, next)
	span.End(out.Result["mcp_server_result"], out.Err)
	return out
}
