package server

import (
	"context"
	"fmt"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ElicitOperator puts a form to the operator of a task through their own
// MCP client: one session of that operator whose client declared
// elicitation (sessions of protocol 2026-07-28 are stateless and take no
// server requests). It fails at once when there is none. The executor
// (downstream.Pool.SetOperatorElicit) sends approval questions, downstream
// servers' elicitations and missing-argument forms this way besides the
// inbox; the first answer wins. A session that is being asked the same
// question already (tasks/result puts a task's questions to its caller:
// tasks_ask.go) is passed over: one client is not asked twice at once.
func (s *Server) ElicitOperator(ctx context.Context, taskID string, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	t, ok := s.sys.Task(taskID)
	if !ok {
		return nil, fmt.Errorf("task %q: no such task", taskID)
	}
	op := t.Operator
	if op == "" {
		op = s.sys.OperatorID()
	}
	var picks []*mcp.ServerSession
	for ss := range s.mcp.Sessions() {
		if !takesForms(ss) {
			continue
		}
		if who, ok := s.sessionOperator(ss); ok && who == op {
			picks = append(picks, ss)
		}
	}
	if len(picks) == 0 {
		return nil, fmt.Errorf("operator %s has no MCP client that takes elicitation", op)
	}
	for _, ss := range slices.Backward(picks) {
		key := askKey{ss, taskID, p.Message}
		if s.asks.claim(key) {
			defer s.asks.release(key)
			return ss.Elicit(ctx, p)
		}
	}
	return nil, fmt.Errorf("operator %s's MCP clients that take elicitation are being asked this question already (tasks/result)", op)
}
