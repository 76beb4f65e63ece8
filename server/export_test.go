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

// The tests validate every tool output against its tool's output schema
// (the server does not, on each call: toolcall.go); the benchmarks turn it
// off with CheckToolOutputs(false).
func init() { checkOutputs.Store(true) }

// CheckToolOutputs turns the validation of tool outputs on or off and
// returns a function that restores the previous setting.
func CheckToolOutputs(on bool) (restore func()) {
	was := checkOutputs.Swap(on)
	return func() { checkOutputs.Store(was) }
}
