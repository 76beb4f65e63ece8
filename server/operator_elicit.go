package server

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ElicitOperator puts a form to the operator of a task through their own
// MCP client: one session of that operator whose client declared
// elicitation (sessions of protocol 2026-07-28 are stateless and take no
// server requests). It fails at once when there is none. The executor
// (downstream.Pool.SetOperatorElicit) sends approval questions, downstream
// servers' elicitations and missing-argument forms this way besides the
// inbox; the first answer wins.
func (s *Server) ElicitOperator(ctx context.Context, taskID string, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	t, ok := s.sys.Task(taskID)
	if !ok {
		return nil, fmt.Errorf("task %q: no such task", taskID)
	}
	op := t.Operator
	if op == "" {
		op = s.sys.OperatorID()
	}
	var pick *mcp.ServerSession
	for ss := range s.mcp.Sessions() {
		ip := ss.InitializeParams()
		if ip == nil || ip.Capabilities == nil || ip.Capabilities.Elicitation == nil || ip.ProtocolVersion >= statelessFrom {
			continue
		}
		if who, ok := s.sessionOperator(ss); ok && who == op {
			pick = ss
		}
	}
	if pick == nil {
		return nil, fmt.Errorf("operator %s has no MCP client that takes elicitation", op)
	}
	return pick.Elicit(ctx, p)
}
