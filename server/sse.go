package server

import (
	"context"
	"crypto/rand"
	"fmt"
	"mime"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// sseHandler serves the legacy SSE transport (/sse) as go-sdk's SSEHandler
// does — a GET opens a session and streams its messages, POSTs to the
// session's endpoint (?sessionid=…) carry the client's — except that each
// session is bound to the operator whose token opened it: a POST made with
// another operator's token is refused (403). go-sdk binds streamable HTTP
// sessions to their token's user, but not SSE ones, and a session's
// requests run as the operator of its stream, so without this check bob's
// POSTs to alice's session would act as alice.
type sseHandler struct {
	mcp     *mcp.Server
	maxBody int64

	mu       sync.Mutex
	sessions map[string]sseSession // by session ID; guarded by mu
}

// sseSession is an open SSE session and the user ID of the token that
// opened it ("" without tokens).
type sseSession struct {
	transport *mcp.SSEServerTransport
	user      string
}

func newSSEHandler(srv *mcp.Server, maxBody int64) *sseHandler {
	return &sseHandler{mcp: srv, maxBody: maxBody, sessions: map[string]sseSession{}}
}

// tokenUser is the user ID of the request's verified bearer token, "" when
// there is none (no tokens configured).
func tokenUser(r *http.Request) string {
	if ti := auth.TokenInfoFromContext(r.Context()); ti != nil {
		return ti.UserID
	}
	return ""
}

func (h *sseHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
		h.post(w, r)
	case http.MethodGet:
		h.open(w, r)
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "method not allowed: GET opens a session, POST sends to one", http.StatusMethodNotAllowed)
	}
}

// post hands a client message to its session, if the session is the
// caller's.
func (h *sseHandler) post(w http.ResponseWriter, r *http.Request) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		http.Error(w, "Content-Type must be application/json", http.StatusUnsupportedMediaType)
		return
	}
	id := r.URL.Query().Get("sessionid")
	if id == "" {
		http.Error(w, "sessionid must be provided", http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	sess, ok := h.sessions[id]
	h.mu.Unlock()
	if !ok || tokenUser(r) != sess.user {
		// Another operator's session is an unknown one: the answer does
		// not tell that it is live.
		http.Error(w, "session not found", http.StatusNotFound)
		return
	}
	sess.transport.ServeHTTP(w, r)
}

// open serves a new session until the client goes away or the server
// closes the session.
func (h *sseHandler) open(w http.ResponseWriter, r *http.Request) {
	id := rand.Text()
	endpoint, err := r.URL.Parse("?sessionid=" + id)
	if err != nil {
		http.Error(w, "internal error: cannot build the session's endpoint", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Connection", "keep-alive")
	t := &mcp.SSEServerTransport{Endpoint: endpoint.RequestURI(), Response: w, MaxRequestBodyBytes: h.maxBody}
	h.mu.Lock()
	h.sessions[id] = sseSession{transport: t, user: tokenUser(r)}
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.sessions, id)
		h.mu.Unlock()
	}()
	ss, err := h.mcp.Connect(r.Context(), t, nil)
	if err != nil {
		http.Error(w, fmt.Sprintf("connection failed: %v", err), http.StatusInternalServerError)
		return
	}
	stop := context.AfterFunc(r.Context(), func() { _ = ss.Close() })
	defer stop()
	defer ss.Close()
	_ = ss.Wait()
}
