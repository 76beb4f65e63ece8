package server

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/mas-mcp/mas-mcp/engine"
)

// The state monitor's JSON API (spec §8.5, §7.4.1), served beside /mcp with
// the same Host, Origin and token rules:
//
//	GET  /api/states?type=task|stage|agent|step  {id: state, …} (spec §8.5)
//	GET  /api/events                             server-sent events, one per change
//	POST /api/bind_human_agent                   {token} or {human_agent_id, password}
//	POST /api/send_message                       spec §7.4.1's body
//	GET  /api/inbox                              the operator's inbox
//	GET  /api/whoami                             the operator the page acts as
//	POST /api/control                            pause/resume a task or agent, interrupt, cancel_step
//	POST /api/answer_approval                    approve or deny an approval question
//
// POST bodies must be sent as Content-Type application/json (415 otherwise)
// and be one JSON object of known fields with nothing after it (400); a
// missing required field is a 400 naming it. Every answer forbids framing
// (CSP frame-ancestors 'none', X-Frame-Options DENY), and only a 401 carries
// WWW-Authenticate.
//
// A page binds to an operator with bind_human_agent and gets an HttpOnly
// session cookie (EventSource cannot send headers); programs may send the
// bearer token instead. The cookie is Secure when the page is an https
// page: the request came over TLS, or through a proxy that terminated it
// (the bind request's Origin is https://, or X-Forwarded-Proto says https).
// An /api/events stream opened with a session ends when the session does;
// one whose client stops reading is cut after limits.stuck_session_timeout.
// Without configured tokens (loopback only) every request acts as the
// default operator unless it bound another one.
//
// Wrong bearer tokens count as failed attempts of their source address in
// bind_human_agent's throttle (limits.password_failures …), here and on
// /mcp and /sse: while the address backs off, every request from it with a
// bearer token is answered 429 without the token being checked, a correct
// one included, as bind_human_agent does.

const sessionCookie = "mas_session"

// apiHandler serves /api/.
func (s *Server) apiHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/states", s.apiStates)
	mux.Handle("GET /api/events", s.limitStreams(s.eventCaps, true, http.HandlerFunc(s.apiEvents)))
	mux.HandleFunc("POST /api/bind_human_agent", s.apiBind)
	mux.HandleFunc("POST /api/send_message", s.apiSendMessage)
	mux.HandleFunc("GET /api/inbox", s.apiInbox)
	mux.HandleFunc("GET /api/whoami", s.apiWhoami)
	mux.HandleFunc("POST /api/control", s.apiControl)
	mux.HandleFunc("POST /api/answer_approval", s.apiAnswerApproval)
	mux.HandleFunc("GET /api/trail", s.apiTrail)
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		// The mux's own 405 never happens: this catch-all matches first.
		if methods, ok := apiMethods[r.URL.Path]; ok {
			w.Header().Set("Allow", methods)
			s.apiError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s: %s takes %s", r.Method, r.URL.Path, methods))
			return
		}
		s.apiError(w, http.StatusNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// JSON and event streams only: nothing to render, nothing to frame.
		w.Header().Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		mux.ServeHTTP(w, r)
	})
}

// apiMethods is what each endpoint takes (for 405 answers).
var apiMethods = map[string]string{
	"/api/states": "GET, HEAD", "/api/events": "GET, HEAD", "/api/inbox": "GET, HEAD", "/api/whoami": "GET, HEAD",
	"/api/trail": "GET, HEAD", "/api/bind_human_agent": "POST", "/api/send_message": "POST", "/api/control": "POST", "/api/answer_approval": "POST",
}

// apiOperator is the operator an API request acts as: its bearer token's,
// its bound session's, or (without configured tokens) the default one.
func (s *Server) apiOperator(r *http.Request) (string, bool) {
	op, _, ok := s.apiAuth(r)
	return op, ok
}

// apiAuth is apiOperator's answer and, when a bound session gave it, the
// session's ID (its cookie's value; "" otherwise).
func (s *Server) apiAuth(r *http.Request) (op, session string, ok bool) {
	if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
		if op, ok := s.tokenOperator(strings.TrimPrefix(h, "Bearer ")); ok {
			return op, "", true
		}
		return "", "", false
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		if op, ok := s.sessions.lookup(c.Value); ok {
			return op, c.Value, true
		}
	}
	if len(s.cfg.HTTP.Tokens) == 0 {
		return s.sys.OperatorID(), "", true
	}
	return "", "", false
}

// tokenOperator maps a bearer token to its operator (constant time).
func (s *Server) tokenOperator(token string) (string, bool) {
	for tok, op := range s.cfg.HTTP.Tokens {
		if subtle.ConstantTimeCompare([]byte(tok), []byte(token)) == 1 {
			return op, true
		}
	}
	return "", false
}

// authed wraps an API handler that needs an operator. A request with a
// bearer token from an address that is backing off is refused (429), and
// a wrong token counts against its address (bearerKeys).
func (s *Server) authed(w http.ResponseWriter, r *http.Request) (string, bool) {
	op, _, ok := s.authedSession(w, r)
	return op, ok
}

// authedSession is authed, also giving the ID of the bound session the
// request acts through ("" for a bearer token or the default operator).
func (s *Server) authedSession(w http.ResponseWriter, r *http.Request) (op, session string, ok bool) {
	bearer := strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ")
	if bearer && s.bearerBackingOff(w, r, true) {
		return "", "", false
	}
	op, session, ok = s.apiAuth(r)
	if !ok {
		if bearer {
			s.throttle.failed(bearerKeys(r)...)
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="mas-mcp"`)
		s.apiError(w, http.StatusUnauthorized, "bind an operator first (POST /api/bind_human_agent) or send its bearer token")
	}
	return op, session, ok
}

func apiJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// apiError answers {"success": false, "message": …} (spec §7.4.1's shape).
// The message is scrubbed of the MAS's secrets (engine.Config.Secrets):
// errors quote what the request gave (its path, a header, a field's or a
// parameter's value, an engine error naming an ID), as the MCP server's
// answers do (scrubAnswers).
func (s *Server) apiError(w http.ResponseWriter, status int, msg string) {
	apiJSON(w, status, map[string]any{"success": false, "message": s.sys.Scrub(msg)})
}

// readJSON reads a POST's body into v strictly, or answers why not: a
// Content-Type other than application/json (415); a body that is not one
// JSON object of known fields with nothing but white space after it (400);
// one larger than the limit (413). It reports whether v was read.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	ct := r.Header.Get("Content-Type")
	mt, params, err := mime.ParseMediaType(ct)
	if cs, ok := params["charset"]; err != nil || mt != "application/json" || ok && !strings.EqualFold(cs, "utf-8") {
		s.apiError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %q: must be application/json", ct))
		return false
	}
	fail := func(err error) bool {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.apiError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body: larger than %d bytes", mbe.Limit))
		} else {
			s.apiError(w, http.StatusBadRequest, "body: "+err.Error())
		}
		return false
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fail(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err == nil {
			err = errors.New("unexpected data after the JSON object")
		}
		return fail(fmt.Errorf("after the JSON object: %w", err))
	}
	return true
}

// apiStates serves spec §8.5's GET /api/states?type=….
func (s *Server) apiStates(w http.ResponseWriter, r *http.Request) {
	op, ok := s.authed(w, r)
	if !ok {
		return
	}
	out := map[string]any{}
	switch typ := r.URL.Query().Get("type"); typ {
	case "task":
		for _, t := range s.sys.TasksFor(op) {
			out[t.TaskID] = t
		}
	case "stage":
		for _, t := range s.sys.TasksFor(op) {
			for _, st := range t.StageList {
				out[st.StageID] = st
			}
		}
	case "agent":
		// An operator's conversations and steps are its own; what an
		// operator may not see is left out (engine/visibility.go).
		for _, a := range s.sys.AgentsFor(op) {
			out[a.AgentID] = a
		}
	case "step":
		for _, a := range s.sys.AgentsFor(op) {
			for _, st := range a.AgentStep.StepList {
				out[st.StepID] = st
			}
		}
	default:
		s.apiError(w, http.StatusBadRequest, fmt.Sprintf("type %q: must be task, stage, agent or step", typ))
		return
	}
	apiJSON(w, http.StatusOK, out)
}

// apiEvents streams the MAS's change events as server-sent events, each as
// it happens. A client that fell behind gets an "resync" event (re-read the
// states); ": ping" comments keep idle connections open through proxies.
//
// The events are the operator's own log (eventlog.go), which
// wait_for_updates reads too: the hello's seq, each event's id and seq
// are the operator's own numbers (what it may see, counted from the
// process's random base), not the engine's count of every operator's
// events, and the stream wakes only for an event the operator may see. A
// resync follows when events after the stream's last one were lost (more
// than Config.EventLog of the operator's own came in between, or the
// server's intake overflowed), never because other operators were busy.
// A stream opened with a bound session ends when the session does
// (limits.monitor_session_ttl, or a newer binding ended it): the session
// is looked up again before each write and each ping. One opened with a
// bearer token lasts as long as its connection.
//
// A client that keeps its connection open but reads no more would hold
// the handler in a write, and its place among the event streams and its
// subscription with it, for as long as the connection lasts: each write
// (with its flush) gets limits.stuck_session_timeout, as an MCP session's
// notification does (outbox), through a write deadline that is cleared
// once it is done. Past it the write fails, net/http closes the
// connection, and the handler returns, logging the cut as a warning.
func (s *Server) apiEvents(w http.ResponseWriter, r *http.Request) {
	op, session, ok := s.authedSession(w, r)
	if !ok {
		return
	}
	if _, ok := w.(http.Flusher); !ok {
		s.apiError(w, http.StatusInternalServerError, "streaming is not supported by this connection")
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	// HEAD (which the mux serves with GET's handler) gets the stream's
	// headers and returns at once: it subscribes to nothing and holds
	// nothing, so limitStreams need not count it.
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return
	}
	// live says whether the stream may go on writing: its session, if it
	// has one, still acts as op.
	live := func() bool {
		if session == "" {
			return true
		}
		sop, ok := s.sessions.lookup(session)
		return ok && sop == op
	}
	// send writes what write writes and flushes it, within the bound; it
	// reports whether the stream may go on.
	rc := http.NewResponseController(w)
	send := func(write func()) bool {
		start := time.Now()
		deadline := start.Add(s.cfg.Limits.StuckSession)
		bounded := rc.SetWriteDeadline(deadline) == nil
		write()
		if err := rc.Flush(); err != nil {
			if bounded && !time.Now().Before(deadline) {
				s.log.Warn("a monitor client has taken no event for too long: its /api/events stream is cut",
					"operator", op, "waited", time.Since(start).Round(time.Millisecond),
					"limit", s.cfg.Limits.StuckSession, "key", keyStuckSession)
			}
			return false
		}
		if bounded {
			_ = rc.SetWriteDeadline(time.Time{})
		}
		return true
	}
	w.WriteHeader(http.StatusOK)
	cursor := s.updates.logs.now(op)
	if !send(func() { fmt.Fprintf(w, "retry: 2000\nevent: hello\ndata: {\"seq\":%d}\n\n", cursor) }) {
		return
	}
	ping := time.NewTicker(15 * time.Second)
	defer ping.Stop()
	for {
		// At most eventsPerWrite events a send: what comes meanwhile
		// waits for the next one.
		evs, latest, lost, changed, err := s.updates.logs.since(op, cursor, "", "", eventsPerWrite)
		if err != nil { // not for a cursor of its own log
			return
		}
		if len(evs) > 0 || lost {
			if !live() {
				return
			}
			// Send what is logged now together, then flush once.
			if !send(func() {
				if lost {
					fmt.Fprint(w, "event: resync\ndata: {}\n\n")
				}
				for _, ev := range evs {
					b, _ := json.Marshal(ev)
					fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", ev.Seq, ev.Kind, b)
				}
			}) {
				return
			}
			cursor = latest
			continue
		}
		select {
		case <-changed:
		case <-ping.C:
			if !live() || !send(func() { fmt.Fprint(w, ": ping\n\n") }) {
				return
			}
		case <-r.Context().Done():
			return
		case <-s.draining:
			return
		}
	}
}

// eventsPerWrite is how many events one write of /api/events holds at most
// (one flush, bounded by limits.stuck_session_timeout).
const eventsPerWrite = 1024

// bindRequest is POST /api/bind_human_agent's body: a token, or the spec's
// human_agent_id and password.
type bindRequest struct {
	Token        string `json:"token,omitempty"`
	HumanAgentID string `json:"human_agent_id,omitempty"`
	Password     string `json:"password,omitempty"`
}

func (s *Server) apiBind(w http.ResponseWriter, r *http.Request) {
	var req bindRequest
	if !s.readJSON(w, r, &req) {
		return
	}
	var op string
	keys := bindKeys(r, req.HumanAgentID)
	if wait := s.throttle.wait(keys...); wait > 0 && (req.Token != "" || req.HumanAgentID != "") {
		s.refuseTooEarly(w, wait)
		return
	}
	switch {
	case req.Token != "":
		var ok bool
		if op, ok = s.tokenOperator(req.Token); !ok {
			s.throttle.failed(keys...)
			s.apiError(w, http.StatusUnauthorized, "token: not a token of this server")
			return
		}
		s.throttle.succeeded(keys...)
	case req.HumanAgentID != "":
		if !s.sys.CheckOperatorPassword(req.HumanAgentID, req.Password) {
			s.throttle.failed(keys...)
			s.apiError(w, http.StatusUnauthorized, "human_agent_id and password: no operator with this password")
			return
		}
		s.throttle.succeeded(keys...)
		op = req.HumanAgentID
	case len(s.cfg.HTTP.Tokens) == 0:
		// Loopback without tokens: binding needs nothing (the default operator).
		op = s.sys.OperatorID()
	default:
		s.apiError(w, http.StatusBadRequest, "token, or human_agent_id and password: one is required")
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: s.sessions.bind(op), Path: "/api/", HttpOnly: true, MaxAge: int(s.cfg.Limits.MonitorSessionTTL / time.Second),
		SameSite: http.SameSiteStrictMode, Secure: httpsPage(r),
	})
	apiJSON(w, http.StatusOK, map[string]any{"success": true, "human_agent_id": op, "message": "bound to operator " + op})
}

// httpsPage says whether r comes from an https page: it came over TLS, or
// through a proxy that terminated TLS — the browser's Origin is https://
// (the perimeter let it through: the server's own or an allowed one) or
// the proxy says so in X-Forwarded-Proto. Its session cookie is then
// Secure, so that the browser never sends it over plain http.
func httpsPage(r *http.Request) bool {
	if r.TLS != nil || strings.HasPrefix(strings.ToLower(r.Header.Get("Origin")), "https://") {
		return true
	}
	proto, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Proto"), ",")
	return strings.EqualFold(strings.TrimSpace(proto), "https")
}

// sendRequest is spec §7.4.1's POST /api/send_message body.
type sendRequest struct {
	HumanAgentID  string   `json:"human_agent_id"`
	TaskID        string   `json:"task_id"`
	Receiver      []string `json:"receiver"`
	Content       string   `json:"content"`
	StageRelative string   `json:"stage_relative,omitempty"`
	NeedReply     *bool    `json:"need_reply,omitempty"`
	Waiting       bool     `json:"waiting,omitempty"`
	ReplyTo       string   `json:"reply_to,omitempty"`
}

// missing names the required fields req lacks (the engine would answer
// an empty task_id with "no such task").
func (req *sendRequest) missing() []string {
	var out []string
	if strings.TrimSpace(req.TaskID) == "" {
		out = append(out, "task_id: is required")
	}
	if len(req.Receiver) == 0 {
		out = append(out, "receiver: is required (at least one agent_id of the task group)")
	}
	if strings.TrimSpace(req.Content) == "" {
		out = append(out, "content: is empty")
	}
	return out
}

func (s *Server) apiSendMessage(w http.ResponseWriter, r *http.Request) {
	op, ok := s.authed(w, r)
	if !ok {
		return
	}
	var req sendRequest
	if !s.readJSON(w, r, &req) {
		return
	}
	if missing := req.missing(); len(missing) > 0 {
		s.apiError(w, http.StatusBadRequest, strings.Join(missing, "; "))
		return
	}
	if req.HumanAgentID != "" && req.HumanAgentID != op {
		s.apiError(w, http.StatusForbidden, fmt.Sprintf("human_agent_id %q: this session acts as operator %s", req.HumanAgentID, op))
		return
	}
	in := SendMessageIn{TaskID: req.TaskID, Receiver: req.Receiver, Content: req.Content,
		StageRelative: req.StageRelative, NeedReply: req.NeedReply, Waiting: req.Waiting, ReplyTo: req.ReplyTo}
	if err := in.check(&s.cfg.Limits); err != nil {
		s.apiError(w, http.StatusBadRequest, err.Error())
		return
	}
	msgs, err := s.sys.HumanSend(op, engine.HumanMessage{
		TaskID: in.TaskID, Receiver: in.Receiver, Content: in.Content, StageRelative: in.StageRelative,
		NeedReply: s.defaultNeedReply(op, in), Waiting: in.Waiting, ReplyTo: in.ReplyTo,
	})
	if err != nil {
		status := http.StatusBadRequest
		if errors.Is(err, engine.ErrNotFound) {
			status = http.StatusNotFound
		} else if errors.Is(err, engine.ErrForbidden) {
			status = http.StatusForbidden
		}
		s.apiError(w, status, err.Error())
		return
	}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.MessageID
	}
	apiJSON(w, http.StatusOK, map[string]any{"success": true, "message": "message sent", "message_ids": ids})
}

func (s *Server) apiInbox(w http.ResponseWriter, r *http.Request) {
	op, ok := s.authed(w, r)
	if !ok {
		return
	}
	entries, err := s.sys.Inbox(op)
	if err != nil {
		s.apiError(w, http.StatusNotFound, err.Error())
		return
	}
	apiJSON(w, http.StatusOK, InboxDocument{OperatorID: op, Messages: entries})
}

func (s *Server) apiWhoami(w http.ResponseWriter, r *http.Request) {
	op, ok := s.authed(w, r)
	if !ok {
		return
	}
	b, _ := s.sys.AgentBrief(op)
	apiJSON(w, http.StatusOK, map[string]any{"human_agent_id": op, "name": b.Name, "tokens_required": len(s.cfg.HTTP.Tokens) > 0})
}
