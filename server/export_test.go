package server

import "github.com/modelcontextprotocol/go-sdk/mcp"

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

// LongRequests says how many long-lived requests (subscriptions/listen
// streams of protocol 2026-07-28, wait_for_updates and tasks/result waits
// of any) the server holds, in total and of op.
func (s *Server) LongRequests(op string) (total, byOp int) { return s.longCaps.held(op) }

// AwaitLongRequests waits until op holds n long-lived requests (a request
// holds its place from before its handler runs until it returned).
func (s *Server) AwaitLongRequests(op string, n int) {
	c := s.longCaps
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.byOp[op] != n {
		c.changed.Wait()
	}
}

// SubscribedSessions says how many MCP sessions are subscribed to at
// least one resource: for protocol 2026-07-28, the subscriptions/listen
// streams open with resource subscriptions (the SDK subscribes a stream's
// session before acknowledging it, and unsubscribes it when it ends).
func (s *Server) SubscribedSessions() int {
	s.subs.mu.Lock()
	defer s.subs.mu.Unlock()
	return len(s.subs.bySess)
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

// BeforeTaskCancel sets a function tasks/cancel calls once it found the
// task still running, just before it cancels it (nil: none): a test ends
// the task there to race the cancel against the task's own end.
func (s *Server) BeforeTaskCancel(f func(taskID string)) {
	if f == nil {
		s.beforeCancel.Store(nil)
		return
	}
	s.beforeCancel.Store(&f)
}

// AwaitUpdatesHandled waits until the updates' run loop has handled the
// MAS's events up to seq (they are in its event log, and the
// resources/updated they caused were handed to their sessions' queues in
// the outbox, or are pending).
func (s *Server) AwaitUpdatesHandled(seq uint64) {
	for {
		handled, changed := s.updates.logs.handledUpTo()
		if handled >= seq || seq == 0 {
			return
		}
		<-changed
	}
}

// EventCursor is op's newest event number (its own numbering, as
// wait_for_updates' cursor): what cursor 0 means now.
func (s *Server) EventCursor(op string) uint64 { return s.updates.logs.now(op) }

// AfterSessionsSnapshot sets a function the next count of the live MCP
// sessions (before each admission, and Held) calls once, between its look
// at the SDK's sessions and taking its lock: a test opens a session there.
func (s *Server) AfterSessionsSnapshot(f func()) { s.mcpSessions.afterSnapshot.Store(&f) }

// NotifyLog offers a logging notification of data (at info) to each
// session of op, as the MAS's step logs are (updates.logStep: queued for
// a session whose logging level takes it), and returns how many sessions
// of op it was offered to.
func (s *Server) NotifyLog(op string, data any) int {
	n := 0
	for ss := range s.mcp.Sessions() {
		if o, ok := s.sessionOperator(ss); ok && o == op {
			params := &mcp.LoggingMessageParams{Level: "info", Logger: "test", Data: data}
			s.postLog(ss, op, params)
			n++
		}
	}
	return n
}

// QueuesEmptied returns a channel closed once no session has notifications
// waiting in the outbox, or being sent.
func (s *Server) QueuesEmptied() <-chan struct{} { return s.outbox.whenEmpty() }

// OnListChanged sets a function called each time a
// resources/list_changed of go-sdk's is offered to a session, after the
// server decided whether the session is told (its resource list changed
// since it was last told): with the session's operator and the decision.
// nil: none.
func (s *Server) OnListChanged(f func(op string, told bool)) {
	if f == nil {
		s.lists.decided.Store(nil)
		return
	}
	s.lists.decided.Store(&f)
}

// BeforeAnswer sets a function answerQuestion (an elicitation's answer to
// an operator's question) calls once it found the question awaiting a
// reply, just before it answers (nil: none): a test answers the question
// there from another channel to race the two answers.
func (s *Server) BeforeAnswer(f func(messageID string)) {
	if f == nil {
		s.beforeAnswer.Store(nil)
		return
	}
	s.beforeAnswer.Store(&f)
}

// AnswerQuestions answers op's questions of task taskID ("": any) with
// elicitation results keyed by message ID, as tasks/result's
// inputResponses do, and returns the problems.
func (s *Server) AnswerQuestions(op, taskID string, responses mcp.InputResponseMap) []string {
	return s.answerQuestions(op, taskID, responses)
}
