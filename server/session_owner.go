package server

import "net/http"

// A stateful MCP session is its operator's alone (the operator whose token
// opened it, limitSessions). The SDK refuses another's token on a session
// with 403 "session user mismatch" but an unknown session with 404, which
// tells whoever names a session whether it is live: here a session of
// another operator is an unknown session, whatever the request.

// unknownSession stands for a session of another operator in the request
// passed on: the SDK never issues it (its IDs are rand.Text, upper case),
// so it answers exactly as for any session it does not know.
const unknownSession = "unknown-session"

// sessionOwner is the operator of the live session id, if it is live.
func (m *mcpSessions) sessionOwner(id string) (op string, live bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sessionOpLocked(id)
}

// ownSessions passes a request that names another operator's session on as
// one naming an unknown session.
func (s *Server) ownSessions(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get("Mcp-Session-Id"); id != "" {
			if op, live := s.mcpSessions.sessionOwner(id); live && op != s.operator(r.Context(), nil) {
				r = r.Clone(r.Context())
				r.Header.Set("Mcp-Session-Id", unknownSession)
			}
		}
		next.ServeHTTP(w, r)
	})
}
