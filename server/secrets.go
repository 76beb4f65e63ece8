package server

import (
	"context"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// scrubAnswers keeps the MAS's secrets (engine.Config.Secrets) out of what
// the server answers with what it was given: a tool's result text (an
// error quoting an argument that does not validate, a summary repeating a
// name) and a request's error have each secret replaced with
// "[redacted]", as the state has (the engine scrubs what it takes in); an
// error still wraps what it wrapped. It runs inside the telemetry
// middleware, so traces get the scrubbed answers.
func (s *Server) scrubAnswers(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if r, ok := res.(*mcp.CallToolResult); ok && r != nil {
			for i, c := range r.Content {
				if tc, ok := c.(*mcp.TextContent); ok {
					if clean := s.sys.Scrub(tc.Text); clean != tc.Text {
						cp := *tc
						cp.Text = clean
						r.Content[i] = &cp
					}
				}
			}
		}
		if err != nil {
			if msg := err.Error(); s.sys.Scrub(msg) != msg {
				var werr *jsonrpc.Error
				if errors.As(err, &werr) {
					cp := *werr
					cp.Message = s.sys.Scrub(werr.Message)
					return res, &cp
				}
				return res, s.sys.ScrubError(err)
			}
		}
		return res, err
	}
}
