package server

import "github.com/modelcontextprotocol/go-sdk/mcp"

// eventStoreBytes bounds what the streamable HTTP event store keeps, over
// all sessions (the oldest events are dropped first).
const eventStoreBytes = 8 << 20

// eventStore keeps the messages of stateful streamable HTTP sessions
// (protocol versions before 2026-07-28) so that a client can resume a
// stream with Last-Event-ID. With it, go-sdk also sends the priming event
// (an event ID and empty data) that opens each SSE stream of a 2025-11-25
// session, as the spec recommends.
//
// It is also what keeps a short-lived client from causing a warning: a
// client that calls one tool and goes away without DELETE (the TypeScript
// SDK's and the Inspector's close do not end the session) leaves its
// session open with no standalone GET stream, and every notification sent
// to it afterwards — resources/list_changed as the task it added gets
// stages and agents — found no stream: go-sdk logged "rejected by
// transport: undelivered message: stream not connected". With the store
// the notification is kept for the client's return instead, until the
// session times out (HTTP.SessionTimeout) or the store's bound drops it.
func (s *Server) eventStore() mcp.EventStore {
	st := mcp.NewMemoryEventStore(nil)
	st.SetMaxBytes(eventStoreBytes)
	return st
}
