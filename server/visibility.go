package server

import (
	"context"
	"fmt"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// What an operator may see of other operators' tasks and messages is decided
// by the engine (engine/visibility.go: MayOperate, Visible, MessageVisible,
// TaskFor, AgentsFor, EventVisible). This file applies it where the MCP
// SDK, not our handlers, builds an answer: resources/list (every session
// shares one resource list), resources/subscribe, and logging
// notifications (sent to sessions, not in answer to a request).

// filterLists is a receiving middleware that leaves out of resources/list
// the resources of tasks the session's operator may not see.
func (s *Server) filterLists(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		lr, ok := res.(*mcp.ListResourcesResult)
		if err != nil || !ok || method != "resources/list" {
			return res, err
		}
		op := s.operator(ctx, req.GetExtra())
		out := *lr
		out.Resources = slices.DeleteFunc(slices.Clone(lr.Resources), func(r *mcp.Resource) bool {
			id, ok := uriTask(r.URI)
			return ok && !s.sys.Visible(op, id)
		})
		return &out, nil
	}
}

// uriTask returns the task a mas://tasks/{id}… URI names.
func uriTask(uri string) (string, bool) {
	parts, err := parseURI(uri)
	if err != nil || parts[0] != "tasks" || len(parts) < 2 {
		return "", false
	}
	return parts[1], true
}

// checkSubscribe refuses a subscription to a resource the operator may not
// read: its resources/updated notifications would tell when the resource
// changes (another operator's task, inbox or steps). The rule is the one
// resources/read applies, so the document is built once, as the operator
// would read it. A URI that names no resource is refused alike: the session
// would keep a subscription that can never fire.
func (s *Server) checkSubscribe(uri, op string) error {
	if id, ok := uriTask(uri); ok && !s.sys.Visible(op, id) {
		return &resourceError{uri: uri, problem: fmt.Sprintf("no such task visible to operator %s (a task is seen by its owner, operators it is shared with and admins)", op), notFound: true}
	}
	_, err := s.document(uri, op)
	return err
}

// sessionOperator is the operator a session acts as: the operator whose
// token opened it (streamable HTTP), or the default operator on a server
// without tokens (stdio, in-memory). ok is false when it is not known (a
// session on a server with tokens that this server did not admit): such a
// session gets no notification that names a task.
func (s *Server) sessionOperator(ss *mcp.ServerSession) (string, bool) {
	m := s.mcpSessions
	m.mu.Lock()
	op, ok := m.live[ss.ID()]
	m.mu.Unlock()
	if ok {
		return op, true
	}
	if len(s.cfg.HTTP.Tokens) == 0 {
		return s.sys.OperatorID(), true
	}
	return "", false
}
