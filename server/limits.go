package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Limits bound what clients may hold open and send, so that no client (and
// no operator) can exhaust the process. Zero values mean the documented
// defaults; negative values are refused. Over a cap a client gets a clear
// answer — HTTP 429 (its operator's share is used up) or 503 (the server's
// is), both with Retry-After, or a tool error — never a crash, never a
// silently dropped request.
type Limits struct {
	// Sessions bounds the stateful MCP sessions of streamable HTTP at
	// once, SessionsPerOperator those of one operator. Default 256 and 32.
	// (Idle sessions close after HTTPConfig.SessionTimeout.)
	Sessions, SessionsPerOperator int
	// EventStreams bounds the open /api/events streams, in total and per
	// operator. Default 256 and 16.
	EventStreams, EventStreamsPerOperator int
	// SSEStreams bounds the open legacy SSE streams (GET /sse), in total
	// and per operator. Default 256 and 16.
	SSEStreams, SSEStreamsPerOperator int
	// LongRequests bounds the long-lived requests open at once, in total
	// and per operator: subscriptions/listen streams of protocol
	// 2026-07-28 (open until the client ends them), and wait_for_updates
	// long polls (up to 300 s) and tasks/result waits (until the task
	// ends) of any protocol — within a session (where Sessions bounds the
	// sessions, not what each holds) as well as stateless. Default 512
	// and 64.
	//
	// One pair covers all three rather than one pair each: they hold the
	// same things (a connection, a goroutine, an SDK session) for as long
	// as the client likes, and the mix depends on the client (go-sdk opens
	// one listen stream per subscribed URI, others long-poll), so one share
	// bounds what an operator holds whatever its clients do, and there is
	// one key to raise. The per-operator default leaves room for a client
	// following each of its running tasks (limits.running_tasks_per_operator)
	// with a stream per URI, and a second client; the total is eight such
	// shares, as for sessions.
	LongRequests, LongRequestsPerOperator int
	// SubscriptionsPerSession bounds the resources one MCP session (or one
	// subscriptions/listen stream) is subscribed to at once. Default 256.
	SubscriptionsPerSession int
	// BodyTimeout bounds the time to receive a request's body once its
	// headers arrived. Default 30s.
	BodyTimeout time.Duration
	// IdleTimeout closes a keep-alive HTTP connection that waited that
	// long for its next request. Default 2m.
	IdleTimeout time.Duration
	// StuckSession cuts the HTTP stream of an MCP session whose client
	// has taken none of its notifications for that long (it keeps its
	// connection open but reads no more), and drops what waits for it
	// (outbox); and an /api/events stream a write to which waited that
	// long (apiEvents). Default 5m.
	StuckSession time.Duration
	// MonitorSessionTTL is how long a web monitor session bound with
	// bind_human_agent lasts. Default 12h. An operator keeps at most
	// MonitorSessionsPerOperator (default 32): binding one more ends its
	// oldest.
	MonitorSessionTTL          time.Duration
	MonitorSessionsPerOperator int
	// PasswordFailures is how many failed bind_human_agent attempts an
	// operator ID, or a source address, has before each further attempt
	// must wait: PasswordBackoff, doubling with each failure up to
	// PasswordBackoffMax. Default 5, 1s, 15m. A success clears the
	// operator's and the address's failures; so does a quiet
	// PasswordBackoffMax.
	PasswordFailures                    int
	PasswordBackoff, PasswordBackoffMax time.Duration
	// NameBytes bounds names and IDs in tool and API inputs (task_name,
	// agent_config.name, task_id, …) and in the protocol's own requests
	// (boundRequests, visibleTask), URIs included, TextBytes their free
	// text (task_intention, content, summary, …), ListItems their lists
	// (receiver, stages, agents, …). Default 256 bytes, 32 KiB, 64.
	// NameBytes may not be below MinNameBytes.
	NameBytes, TextBytes, ListItems int
	// RunningTasksPerOperator bounds the tasks reporting to one operator
	// that have not ended; TasksPerMinute the tasks one operator adds with
	// add_task in any minute. Default 16 and 10.
	RunningTasksPerOperator, TasksPerMinute int

	// Now is the clock of expiries, backoffs and rates (nil: time.Now).
	Now func() time.Time
}

// Config keys of the limits (cmd/mas-mcp's config file), named in errors so
// that whoever runs the server knows what to raise.
const (
	keySessions         = "limits.sessions"
	keySessionsPerOp    = "limits.sessions_per_operator"
	keyEventStreams     = "limits.event_streams"
	keyEventStreamsOp   = "limits.event_streams_per_operator"
	keySSEStreams       = "limits.sse_streams"
	keySSEStreamsOp     = "limits.sse_streams_per_operator"
	keyLongRequests     = "limits.long_requests"
	keyLongRequestsOp   = "limits.long_requests_per_operator"
	keySubsPerSession   = "limits.subscriptions_per_session"
	keyBodyTimeout      = "limits.body_timeout"
	keyIdleTimeout      = "limits.idle_timeout"
	keyStuckSession     = "limits.stuck_session_timeout"
	keyNameBytes        = "limits.name_bytes"
	keyTextBytes        = "limits.text_bytes"
	keyListItems        = "limits.list_items"
	keyRunningTasksOp   = "limits.running_tasks_per_operator"
	keyTasksPerMinuteOp = "limits.tasks_per_minute"
)

// MinNameBytes is the least Limits.NameBytes may be: the longest name the
// server itself gives out for clients to send back, a trail page's
// next_uri with every filter (trailNextURI: task, agent and step IDs of 36
// bytes, the longest kind, a full page, a sealed cursor of 22 bytes:
// trailCursors). URIs are bounded as names (boundRequests): below it the
// server would refuse its own URIs, and its IDs (36 bytes) below that.
const MinNameBytes = 200

// check fills in defaults and refuses negative values, and a NameBytes
// below MinNameBytes.
func (l *Limits) check() error {
	ints := []struct {
		v   *int
		def int
		key string
	}{
		{&l.Sessions, 256, keySessions}, {&l.SessionsPerOperator, 32, keySessionsPerOp},
		{&l.EventStreams, 256, keyEventStreams}, {&l.EventStreamsPerOperator, 16, keyEventStreamsOp},
		{&l.SSEStreams, 256, keySSEStreams}, {&l.SSEStreamsPerOperator, 16, keySSEStreamsOp},
		{&l.LongRequests, 512, keyLongRequests}, {&l.LongRequestsPerOperator, 64, keyLongRequestsOp},
		{&l.SubscriptionsPerSession, 256, keySubsPerSession},
		{&l.MonitorSessionsPerOperator, 32, "limits.monitor_sessions_per_operator"},
		{&l.PasswordFailures, 5, "limits.password_failures"},
		{&l.NameBytes, 256, keyNameBytes}, {&l.TextBytes, 32 << 10, keyTextBytes}, {&l.ListItems, 64, keyListItems},
		{&l.RunningTasksPerOperator, 16, keyRunningTasksOp}, {&l.TasksPerMinute, 10, keyTasksPerMinuteOp},
	}
	for _, f := range ints {
		if *f.v < 0 {
			return fmt.Errorf("server: %s %d: must not be negative", f.key, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if l.NameBytes < MinNameBytes {
		return fmt.Errorf("server: %s %d: must be at least %d, the longest URI the server gives out for clients to send back "+
			"(a trail page's next_uri), which it bounds as names; raise it, or leave it out (default 256)", keyNameBytes, l.NameBytes, MinNameBytes)
	}
	durs := []struct {
		v   *time.Duration
		def time.Duration
		key string
	}{
		{&l.BodyTimeout, 30 * time.Second, keyBodyTimeout},
		{&l.IdleTimeout, 2 * time.Minute, keyIdleTimeout},
		{&l.StuckSession, 5 * time.Minute, keyStuckSession},
		{&l.MonitorSessionTTL, 12 * time.Hour, "limits.monitor_session_ttl"},
		{&l.PasswordBackoff, time.Second, "limits.password_backoff"},
		{&l.PasswordBackoffMax, 15 * time.Minute, "limits.password_backoff_max"},
	}
	for _, f := range durs {
		if *f.v < 0 {
			return fmt.Errorf("server: %s %s: must not be negative", f.key, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if l.Now == nil {
		l.Now = time.Now
	}
	return nil
}

// capError is a request refused over a cap: 429 when the operator's share
// is used up, 503 when the server's is.
type capError struct {
	status     int
	retryAfter time.Duration
	msg        string
}

func (e *capError) Error() string { return e.msg }

// refuse answers a request refused over a cap; asJSON in the monitor
// API's shape.
func (s *Server) refuse(w http.ResponseWriter, e *capError, asJSON bool) {
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int((e.retryAfter+time.Second-1)/time.Second))))
	if asJSON {
		s.apiError(w, e.status, e.msg)
		return
	}
	s.httpError(w, e.msg, e.status)
}

// retryStreams is the Retry-After of a refused session or stream: long
// enough not to hammer, short enough to get in once one closes.
const retryStreams = 10 * time.Second

// streamCaps counts what is held open (streams, sessions) in total and per
// operator.
type streamCaps struct {
	what            string // "MCP sessions", for messages
	total, perOp    int
	totalKey, opKey string

	mu      sync.Mutex
	n       int            // held, guarded by mu
	byOp    map[string]int // held per operator, guarded by mu; no zero entries
	changed *sync.Cond     // broadcast when n changes (for waits: tests)
}

func newStreamCaps(what string, total, perOp int, totalKey, opKey string) *streamCaps {
	c := &streamCaps{what: what, total: total, perOp: perOp, totalKey: totalKey, opKey: opKey, byOp: map[string]int{}}
	c.changed = sync.NewCond(&c.mu)
	return c
}

// acquire takes one for op, or says why not. release gives it back; it is
// safe to call once only.
func (c *streamCaps) acquire(op string) (release func(), err *capError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.refuseLocked(op, 0, 0); err != nil {
		return nil, err
	}
	c.n++
	c.byOp[op]++
	c.changed.Broadcast()
	return func() { c.release(op) }, nil
}

// refuseLocked says why op may not take one more, beyond the held ones and
// extra (held elsewhere), extraOp of which are op's.
func (c *streamCaps) refuseLocked(op string, extra, extraOp int) *capError {
	if c.byOp[op]+extraOp >= c.perOp {
		return &capError{status: http.StatusTooManyRequests, retryAfter: retryStreams, msg: fmt.Sprintf(
			"operator %s has %d open %s, the most one operator may have (%s): close one first", op, c.perOp, c.what, c.opKey)}
	}
	if c.n+extra >= c.total {
		return &capError{status: http.StatusServiceUnavailable, retryAfter: retryStreams, msg: fmt.Sprintf(
			"the server has %d open %s, the most it serves (%s): try again later", c.total, c.what, c.totalKey)}
	}
	return nil
}

func (c *streamCaps) release(op string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n--
	if c.byOp[op]--; c.byOp[op] <= 0 {
		delete(c.byOp, op)
	}
	c.changed.Broadcast()
}

// held is how many are held, in total and by op (for tests and logs).
func (c *streamCaps) held(op string) (total, byOp int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n, c.byOp[op]
}

// limitStreams holds one of c for the life of each GET request (a stream)
// of the operator the request acts as; asJSON answers a refusal in the
// monitor API's shape. Requests whose operator is unknown pass through:
// the handler refuses them itself. Other methods pass through uncounted:
// they stream nothing (HEAD /api/events, which the mux serves with GET's
// handler, gets the headers only and returns at once: apiEvents).
func (s *Server) limitStreams(c *streamCaps, asJSON bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			next.ServeHTTP(w, r)
			return
		}
		op, ok := s.requestOperator(r)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		release, err := c.acquire(op)
		if err != nil {
			s.log.Warn("stream refused", "what", c.what, "operator", op, "status", err.status)
			s.refuse(w, err, asJSON)
			return
		}
		defer release()
		next.ServeHTTP(w, r)
	})
}

// longRequest names what a request of protocol 2026-07-28 (statelessFrom)
// to /mcp holds open for long, "" for the short ones. Such a request names
// its method, and a tools/call its tool, in its headers, which the SDK
// checks against the body (a mismatch is refused, 400), and it cannot be a
// batch: the headers are the request's. Requests of older protocols are
// within a stateful session (limitSessions): their waits take their place
// in their handlers (holdLong).
func longRequest(r *http.Request) string {
	if r.Method != http.MethodPost || r.Header.Get("Mcp-Protocol-Version") < statelessFrom {
		return ""
	}
	switch r.Header.Get("Mcp-Method") {
	case "subscriptions/listen":
		return "subscriptions/listen stream"
	case "tasks/result":
		return "tasks/result wait"
	case "tools/call":
		if r.Header.Get("Mcp-Name") == "wait_for_updates" {
			return "wait_for_updates long poll"
		}
	}
	return ""
}

// limitLongRequests holds one of the long-request caps for the life of
// each long-lived request of protocol 2026-07-28 (longRequest): until its
// handler returns, which it does when the request ends or the client goes
// away (the stateless handlers end a listen stream's, and Handler routes
// long polls to one that ends theirs, once the client is gone).
func (s *Server) limitLongRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		what := longRequest(r)
		if what == "" {
			next.ServeHTTP(w, r)
			return
		}
		op := s.operator(r.Context(), nil)
		release, err := s.longCaps.acquire(op)
		if err != nil {
			s.log.Warn("long-lived request refused", "what", what, "operator", op, "status", err.status)
			s.refuse(w, err, false)
			return
		}
		defer release()
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), longCounted{}, true)))
	})
}

// CodeOverLimit is the JSON-RPC error of a request refused over a cap
// within a session (tasks/result; a tool's refusal is a tool error), where
// no HTTP status can say it: a server error of JSON-RPC's implementation-
// defined range. The stdio relay refuses over its own bounds with it too.
const CodeOverLimit = -32000

// longCounted marks the context of a request limitLongRequests holds a
// place for: the stateless handler serves it within that context, so the
// wait it makes (holdLong) is not counted again.
type longCounted struct{}

// holdLong holds a place under the long-request caps for a wait of what
// (wait_for_updates, tasks/result) by op, for as long as the wait lasts:
// within a session (protocols before 2026-07-28, over every transport) a
// client may make any number of such requests at once, each of which
// holds a goroutine and a stream for up to 300 s (or until its task ends).
// A request of 2026-07-28 holds one already (limitLongRequests), from its
// HTTP request on. The refusal names the key, as a 429 or 503 would.
func (s *Server) holdLong(ctx context.Context, op, what string) (release func(), err error) {
	if counted, _ := ctx.Value(longCounted{}).(bool); counted {
		return func() {}, nil
	}
	release, cerr := s.longCaps.acquire(op)
	if cerr != nil {
		s.log.Warn("long-lived request refused", "what", what, "operator", op, "status", cerr.status)
		return nil, fmt.Errorf("%s: %w", what, cerr)
	}
	return release, nil
}

// requestOperator is the operator an HTTP request acts as: for the MCP
// endpoints, the bearer token's (the guard verified it) or the default
// one; for the monitor API, apiOperator's answer.
func (s *Server) requestOperator(r *http.Request) (string, bool) {
	if len(r.URL.Path) >= 5 && r.URL.Path[:5] == "/api/" {
		return s.apiOperator(r)
	}
	return s.operator(r.Context(), nil), true
}

// mcpSessions counts the stateful MCP sessions of streamable HTTP. The SDK
// creates one for each POST without Mcp-Session-Id and closes it when it
// idles past the session timeout or the client deletes it, without telling
// anyone: so the sessions this server admitted are remembered by ID and
// those the SDK no longer lists are forgotten before each admission.
type mcpSessions struct {
	caps *streamCaps // pending admissions and live sessions

	mu       sync.Mutex
	live     map[string]liveSession // by session ID; guarded by mu
	recorded uint64                 // sessions recorded so far; guarded by mu

	// afterSnapshot, when set (tests only), is called once by the next
	// forgetClosed between its look at the SDK's sessions and its lock.
	afterSnapshot atomic.Pointer[func()]
}

// liveSession is an admitted session: its operator, and when it was
// recorded (mcpSessions.recorded then).
type liveSession struct {
	op string
	n  uint64
}

// sessionOpLocked is the operator of the live session id, if it is live. mu
// must be held.
func (m *mcpSessions) sessionOpLocked(id string) (op string, live bool) {
	l, live := m.live[id]
	return l.op, live
}

// limitSessions admits a new stateful session (a POST without
// Mcp-Session-Id, of a protocol older than statelessFrom) only under the
// session caps.
func (s *Server) limitSessions(next http.Handler) http.Handler {
	m := s.mcpSessions
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Header.Get("Mcp-Session-Id") != "" || r.Header.Get("Mcp-Protocol-Version") >= statelessFrom {
			next.ServeHTTP(w, r)
			return
		}
		op := s.operator(r.Context(), nil)
		m.forgetClosed(s)
		release, err := m.caps.acquire(op)
		if err != nil {
			s.log.Warn("MCP session refused", "operator", op, "status", err.status)
			s.refuse(w, err, false)
			return
		}
		// The SDK names the session it created in the response header;
		// none (a failed initialize): nothing is held. It is recorded as
		// the response starts, before the client can name it (ownSessions
		// reads whose it is).
		held := false
		sw := &sessionHeaderWriter{ResponseWriter: w, seen: func() {
			if id := w.Header().Get("Mcp-Session-Id"); id != "" {
				m.mu.Lock()
				m.recorded++
				m.live[id] = liveSession{op: op, n: m.recorded}
				m.mu.Unlock()
				held = true
			}
		}}
		next.ServeHTTP(sw, r)
		sw.note()
		if !held {
			release()
		}
	})
}

// sessionHeaderWriter calls seen once, when the response starts (its
// headers are final then) or, if nothing was written, at note.
type sessionHeaderWriter struct {
	http.ResponseWriter
	seen func()
	done bool
}

func (w *sessionHeaderWriter) note() {
	if !w.done {
		w.done = true
		w.seen()
	}
}

func (w *sessionHeaderWriter) WriteHeader(code int) {
	w.note()
	w.ResponseWriter.WriteHeader(code)
}

func (w *sessionHeaderWriter) Write(b []byte) (int, error) {
	w.note()
	return w.ResponseWriter.Write(b)
}

func (w *sessionHeaderWriter) Flush() {
	w.note()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *sessionHeaderWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// forgetClosed releases the sessions the SDK has closed since. Only those
// recorded before it looked at the SDK's sessions can be missing from
// them for having closed: a session recorded since (created and recorded
// meanwhile) is open, though the look did not see it.
func (m *mcpSessions) forgetClosed(s *Server) {
	m.mu.Lock()
	before := m.recorded
	m.mu.Unlock()
	open := map[string]bool{}
	for ss := range s.mcp.Sessions() {
		open[ss.ID()] = true
	}
	if f := m.afterSnapshot.Swap(nil); f != nil {
		(*f)()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, l := range m.live {
		if l.n <= before && !open[id] {
			delete(m.live, id)
			m.caps.release(l.op)
		}
	}
}

// limitBodyTime gives each request's body Limits.BodyTimeout to arrive
// (http.Server's ReadTimeout would also cut the long-lived streams that
// follow a request). The deadline is lifted once the body is read to its
// end, so the response may stream as long as it needs.
func (s *Server) limitBodyTime(next http.Handler) http.Handler {
	d := s.cfg.Limits.BodyTimeout
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(d)); err != nil {
			next.ServeHTTP(w, r) // not a network connection (a test recorder)
			return
		}
		r.Body = &deadlineBody{body: r.Body, rc: rc, limit: d, timedOut: func() {
			s.log.Warn("request body not received in time", "limit", d, "key", keyBodyTimeout,
				"method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
		}}
		next.ServeHTTP(w, r)
	})
}

// errBodyTimeout: a request body did not arrive in time.
var errBodyTimeout = errors.New("request body: not received in time")

// deadlineBody lifts the connection's read deadline once the body is read.
type deadlineBody struct {
	body     io.ReadCloser
	rc       *http.ResponseController
	limit    time.Duration
	timedOut func() // called once if the deadline passed
	done     bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if err != nil && !b.done {
		b.done = true
		if errors.Is(err, os.ErrDeadlineExceeded) {
			b.timedOut()
			return n, fmt.Errorf("%w: the body did not arrive within %s (%s)", errBodyTimeout, b.limit, keyBodyTimeout)
		}
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

func (b *deadlineBody) Close() error { return b.body.Close() }

// sessionSubs counts each MCP session's resource subscriptions. The SDK
// keeps them without a bound (and for URIs of anything): a session could
// make the server hold, and scan on every change, any number of them. A
// session the SDK closed is forgotten lazily, as mcpSessions does, since the
// SDK tells no one. It also knows the operator each session subscribed as,
// so that updates of a task go only to the operators who may see it
// (updates.go).
type sessionSubs struct {
	max int

	mu      sync.Mutex
	bySess  map[*mcp.ServerSession]*sessionSub // guarded by mu
	byURI   map[string]map[string]int          // URI → operator → its sessions subscribed; guarded by mu
	sweepAt int                                // forget closed sessions when bySess reaches it; guarded by mu
}

// sessionSub is one session's subscriptions and the operator it acts as.
type sessionSub struct {
	op   string
	uris map[string]bool
}

// add records ss's subscription to uri as operator op, or says why not: ss
// holds max already. A URI subscribed to again counts once, as the SDK
// keeps it once.
func (c *sessionSubs) add(s *Server, ss *mcp.ServerSession, uri, op string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bySess == nil {
		c.bySess, c.byURI = map[*mcp.ServerSession]*sessionSub{}, map[string]map[string]int{}
	}
	sub := c.bySess[ss]
	if sub != nil && sub.uris[uri] {
		return nil
	}
	if sub != nil && len(sub.uris) >= c.max {
		c.forgetClosedLocked(s)
		if sub = c.bySess[ss]; sub != nil && len(sub.uris) >= c.max {
			return fmt.Errorf("uri %q: this session is subscribed to %d resources, the most one session may be (%s): unsubscribe from one first", uri, c.max, keySubsPerSession)
		}
	}
	if sub == nil {
		// Sessions that closed without unsubscribing are forgotten once
		// their number doubles: the map stays within twice the live ones.
		if len(c.bySess) >= c.sweepAt {
			c.forgetClosedLocked(s)
			c.sweepAt = 2*len(c.bySess) + 64
		}
		sub = &sessionSub{op: op, uris: map[string]bool{}}
		c.bySess[ss] = sub
	}
	sub.uris[uri] = true
	if c.byURI[uri] == nil {
		c.byURI[uri] = map[string]int{}
	}
	c.byURI[uri][sub.op]++
	return nil
}

// remove forgets ss's subscription to uri.
func (c *sessionSubs) remove(ss *mcp.ServerSession, uri string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sub := c.bySess[ss]; sub != nil && sub.uris[uri] {
		c.dropLocked(sub, uri)
		if len(sub.uris) == 0 {
			delete(c.bySess, ss)
		}
	}
}

// dropLocked forgets sub's subscription to uri. mu must be held.
func (c *sessionSubs) dropLocked(sub *sessionSub, uri string) {
	delete(sub.uris, uri)
	ops := c.byURI[uri]
	if ops[sub.op]--; ops[sub.op] <= 0 {
		delete(ops, sub.op)
		if len(ops) == 0 {
			delete(c.byURI, uri)
		}
	}
}

// operators returns the operators with a session subscribed to uri.
func (c *sessionSubs) operators(uri string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	ops := make([]string, 0, len(c.byURI[uri]))
	for op := range c.byURI[uri] {
		ops = append(ops, op)
	}
	return ops
}

// operator returns the operator ss subscribed as; ok is false for a
// session with no subscription.
func (c *sessionSubs) operator(ss *mcp.ServerSession) (op string, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sub := c.bySess[ss]; sub != nil {
		return sub.op, true
	}
	return "", false
}

// openSessions is the set of sessions the SDK lists now: what records of
// sessions are swept against, since the SDK tells no one of a closed one.
func (s *Server) openSessions() map[*mcp.ServerSession]bool {
	open := map[*mcp.ServerSession]bool{}
	for ss := range s.mcp.Sessions() {
		open[ss] = true
	}
	return open
}

// forgetClosedLocked drops the sessions the SDK no longer lists. mu must
// be held.
func (c *sessionSubs) forgetClosedLocked(s *Server) {
	open := s.openSessions()
	for ss, sub := range c.bySess {
		if !open[ss] {
			for uri := range sub.uris {
				c.dropLocked(sub, uri)
			}
			delete(c.bySess, ss)
		}
	}
}
