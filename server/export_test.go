package server

// Held says what the server holds for clients right now: stateful MCP
// sessions (after forgetting those the SDK closed), /api/events and SSE
// streams, bound monitor sessions and password-throttle entries. Tests
// check it returns to its baseline.
func (s *Server) Held() (sessions, events, sse, monitorSessions, throttled int) {
	s.mcpSessions.forgetClosed(s)
	sessions, _ = s.mcpSessions.caps.held("")
	events, _ = s.eventCaps.held("")
	sse, _ = s.sseCaps.held("")
	return sessions, events, sse, s.sessions.count(), s.throttle.size()
}
