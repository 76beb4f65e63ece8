package server

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// openStreams knows the HTTP response streams the MCP sessions' messages
// are written to, so that the outbox can cut those of a session whose
// client keeps its connection open but reads no more (outbox.deliver,
// Limits.StuckSession). go-sdk writes a session's messages to the stream's
// http.ResponseWriter, waiting for the connection; ServerSession.Close does
// not end a write in flight (docs/mcp.md, Notifications). A write deadline
// in the past on the stream's connection does: the write fails, net/http
// cancels the request, go-sdk ends the stream (and an SSE session), and
// the connection is closed.
//
// Only the streams the outbox's notifications go to are kept: a stateful
// streamable HTTP session's standalone GET streams (by Mcp-Session-Id), a
// legacy SSE session's GET stream and a stateless session's request (a
// subscriptions/listen stream of 2026-07-28), both bound to their
// ServerSession by bindStreams. A stateful session's POSTs carry their own
// requests' answers, which the outbox does not send.
type openStreams struct {
	mu   sync.Mutex
	byID map[string]map[*openStream]bool             // stateful sessions' GET streams; guarded by mu
	bySS map[*mcp.ServerSession]map[*openStream]bool // bound streams of sessions without an ID; guarded by mu
}

// openStream is one request's response stream, while its handler runs.
type openStream struct {
	rc *http.ResponseController
	id string             // the session's Mcp-Session-Id, "" for none
	ss *mcp.ServerSession // the session it is bound to (id ""), nil until bound; guarded by openStreams.mu
}

// openStreamKey is the context key of a request's openStream.
type openStreamKey struct{}

func newOpenStreams() *openStreams {
	return &openStreams{byID: map[string]map[*openStream]bool{}, bySS: map[*mcp.ServerSession]map[*openStream]bool{}}
}

// track keeps the response streams of the requests to next the outbox may
// write to — GETs, and POSTs outside a stateful session — for as long as
// next serves them. The stream is forgotten before next's ServeHTTP
// returns to net/http, under the lock cut holds: a deadline is never set
// on a response whose handler has returned.
func (o *openStreams) track(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("Mcp-Session-Id")
		if r.Method != http.MethodGet && (r.Method != http.MethodPost || id != "") {
			next.ServeHTTP(w, r)
			return
		}
		st := &openStream{rc: http.NewResponseController(w), id: id}
		if id != "" {
			o.mu.Lock()
			addStream(o.byID, id, st)
			o.mu.Unlock()
		}
		defer o.forget(st)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), openStreamKey{}, st)))
	})
}

// addStream adds st to m[k].
func addStream[K comparable](m map[K]map[*openStream]bool, k K, st *openStream) {
	if m[k] == nil {
		m[k] = map[*openStream]bool{}
	}
	m[k][st] = true
}

// dropStream removes st from m[k].
func dropStream[K comparable](m map[K]map[*openStream]bool, k K, st *openStream) {
	if delete(m[k], st); len(m[k]) == 0 {
		delete(m, k)
	}
}

func (o *openStreams) forget(st *openStream) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if st.id != "" {
		dropStream(o.byID, st.id, st)
	}
	if st.ss != nil {
		dropStream(o.bySS, st.ss, st)
	}
}

// bind is a receiving middleware that binds the stream of the request a
// session without an ID was connected in (legacy SSE: the GET; stateless:
// the request itself; go-sdk connects both with the request's context and
// serves their messages in contexts derived from it) to the session.
func (o *openStreams) bind(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		st, _ := ctx.Value(openStreamKey{}).(*openStream)
		if ss, ok := req.GetSession().(*mcp.ServerSession); ok && st != nil && st.id == "" && ss.ID() == "" {
			o.mu.Lock()
			if st.ss == nil {
				st.ss = ss
				addStream(o.bySS, ss, st)
			}
			o.mu.Unlock()
		}
		return next(ctx, method, req)
	}
}

// cut sets a write deadline in the past on ss's open streams, ending the
// writes in flight on them, and returns how many it cut (none for a
// session over stdio or in memory).
func (o *openStreams) cut(ss *mcp.ServerSession) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	streams := o.bySS[ss]
	if id := ss.ID(); id != "" {
		streams = o.byID[id]
	}
	n := 0
	for st := range streams {
		if st.rc.SetWriteDeadline(time.Now()) == nil {
			n++
		}
	}
	return n
}
