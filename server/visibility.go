package server

import (
	"context"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
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
//
// go-sdk pages the list (mcp.DefaultPageSize resources a page) before this
// filter, and its nextCursor is the base64 of the page's last URI: another
// operator's task, as often as not. So the SDK's cursor never reaches the
// client: it goes out sealed (listCursors), bound to the operator, and
// comes back opened, and a page filtered down to less than a page's worth
// is completed from the SDK's next pages. A cursor this server did not give
// the operator is refused (invalid params).
func (s *Server) filterLists(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		lreq, ok := req.(*mcp.ListResourcesRequest)
		if method != "resources/list" || !ok {
			return next(ctx, method, req)
		}
		op := s.operator(ctx, req.GetExtra())
		params := mcp.ListResourcesParams{}
		if lreq.Params != nil {
			params = *lreq.Params
		}
		if params.Cursor != "" {
			c, err := s.listCursors.open(params.Cursor, op)
			if err != nil {
				return nil, err
			}
			params.Cursor = c
		} else if ss, ok := req.GetSession().(*mcp.ServerSession); ok {
			// The session will know its list as it is now: a list_changed
			// already under way for what this listing shows is not sent
			// (listViews). Only from the first page: a change between
			// pages may land in a page already read.
			s.lists.listed(ss)
		}
		var out mcp.ListResourcesResult
		kept := []*mcp.Resource{}
		for {
			page := *lreq
			page.Params = &params
			res, err := next(ctx, method, &page)
			if err != nil {
				return nil, err
			}
			lr, ok := res.(*mcp.ListResourcesResult)
			if !ok {
				return res, nil
			}
			for _, r := range lr.Resources {
				if id, ok := uriTask(r.URI); !ok || s.sys.Visible(op, id) {
					kept = append(kept, r)
				}
			}
			out = *lr
			if lr.NextCursor == "" || len(kept) >= mcp.DefaultPageSize {
				break
			}
			params.Cursor = lr.NextCursor
		}
		out.Resources = kept
		if out.NextCursor != "" {
			out.NextCursor = s.listCursors.seal(out.NextCursor, op)
		}
		return &out, nil
	}
}

// listCursors seals the SDK's resources/list cursors for the operator they
// were made for: AES-GCM with a key of this process, the operator's ID as
// additional data. The client can neither read one (it names the URI the
// unfiltered page ended at), nor make one, nor use another operator's. A
// cursor does not outlive the process, which a client learns from the
// refusal.
type listCursors struct{ aead cipher.AEAD }

func newListCursors() (*listCursors, error) {
	block, err := newProcessCipher()
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &listCursors{aead: aead}, nil
}

func (c *listCursors) seal(cursor, op string) string {
	nonce := make([]byte, c.aead.NonceSize(), c.aead.NonceSize()+len(cursor)+c.aead.Overhead())
	_, _ = rand.Read(nonce) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(c.aead.Seal(nonce, nonce, []byte(cursor), []byte(op)))
}

func (c *listCursors) open(cursor, op string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err == nil && len(b) >= c.aead.NonceSize() {
		var plain []byte
		n := c.aead.NonceSize()
		if plain, err = c.aead.Open(nil, b[:n], b[n:], []byte(op)); err == nil {
			return string(plain), nil
		}
	}
	return "", &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(
		"cursor %q: not a cursor this server gave operator %s for resources/list (cursors do not survive a restart): list again without one", clip(cursor), op)}
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
	op, ok := m.sessionOpLocked(ss.ID())
	m.mu.Unlock()
	if ok {
		return op, true
	}
	if len(s.cfg.HTTP.Tokens) == 0 {
		return s.sys.OperatorID(), true
	}
	return "", false
}
