package server

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// outbox delivers the notifications the updates' run loop sends
// (resources/updated, and logging to the sessions whose logging level
// takes them: postLog), and go-sdk's list-changed notifications
// (queueNotifications), to each session on a goroutine of the
// session's own, so that the loop never waits for a client. go-sdk writes
// a notification to each session in the caller's goroutine and waits for
// the transport (Server.ResourceUpdated gives each session up to 10 s,
// ServerSession.Log as long as its context; a write to a stream whose
// client stopped reading ends only when the stream is cut: stuck): one
// operator's stuck client would hold every other operator's notifications
// and, once the engine's buffer filled, lose events for everyone,
// wait_for_updates included.
//
// Each session has a queue, and a goroutine while the queue is not empty;
// a stuck session holds its own queue only. The queue is bounded: a
// resources/updated says only "this URI changed", so one per URI (and
// subscription) waits at most and later ones are folded into it — the
// session's subscriptions bound those; other notifications (logging) wait
// up to outboxBacklog, past which they are dropped. The first drop of a
// backlog is logged, and its end with the count.
//
// A session whose oldest notification (the one being written) has waited
// stuckAfter is cut: its HTTP streams get a write deadline in the past
// (openStreams.cut), which ends the write, and what waits behind it is
// dropped, so that its goroutine returns. Logged once, as a warning. When
// the outbox closes (Server.Close), the sessions with a notification
// being written are cut at once.
type outbox struct {
	ctx        context.Context // the server's; cancelled on Close
	log        *slog.Logger
	stuckAfter time.Duration                   // Limits.StuckSession
	cut        func(ss *mcp.ServerSession) int // cuts ss's streams, returns how many

	mu      sync.Mutex
	queues  map[*mcp.ServerSession]*sessionQueue // sessions with notifications to send; guarded by mu
	closed  bool                                 // no more deliveries; guarded by mu
	emptied chan struct{}                        // closed when queues next becomes empty (whenEmpty); guarded by mu
	wg      sync.WaitGroup                       // the sessions' goroutines
}

// outboxBacklog is how many notifications that are not folded (logging)
// one session's queue holds.
const outboxBacklog = 256

// sendTimeout bounds one notification's write where the transport heeds
// its context (go-sdk's notifySessions gives as much).
const sendTimeout = 10 * time.Second

// sessionQueue is one session's notifications waiting to be sent, in order.
// Guarded by outbox.mu.
type sessionQueue struct {
	op      string // the session's operator, for the log
	items   []delivery
	folded  map[string]bool // keys of the folded deliveries in items
	others  int             // deliveries in items that are not folded
	dropped int             // dropped since the backlog began
}

// delivery is one notification to send.
type delivery struct {
	key    string // deliveries of one key are folded into one; "" for none
	send   func(ctx context.Context) error
	queued time.Time // when it was posted (set by post)
}

// newOutbox makes an outbox that cuts (with cut) a session stuck for
// stuckAfter.
func newOutbox(ctx context.Context, log *slog.Logger, stuckAfter time.Duration, cut func(*mcp.ServerSession) int) *outbox {
	return &outbox{ctx: ctx, log: log, stuckAfter: stuckAfter, cut: cut, queues: map[*mcp.ServerSession]*sessionQueue{}}
}

// post queues d for ss (of operator op) and returns at once: folded into a
// delivery of its key already waiting, dropped over the backlog or once
// the outbox closed.
func (o *outbox) post(ss *mcp.ServerSession, op string, d delivery) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return
	}
	q := o.queues[ss]
	if q == nil {
		q = &sessionQueue{op: op, folded: map[string]bool{}}
		o.queues[ss] = q
		o.wg.Add(1)
		go o.deliver(ss, q)
	}
	switch {
	case d.key != "" && q.folded[d.key]:
		return
	case d.key == "" && q.others >= outboxBacklog:
		if q.dropped++; q.dropped == 1 {
			o.log.Warn("a client does not take its notifications: those past the backlog are dropped until it catches up",
				"session", ss.ID(), "operator", op, "queued", len(q.items), "backlog", outboxBacklog)
		}
		return
	case d.key != "":
		q.folded[d.key] = true
	default:
		q.others++
	}
	d.queued = time.Now()
	q.items = append(q.items, d)
}

// whenEmpty returns a channel closed once no session has notifications
// waiting or being sent (at once when none has): a test's wait for a
// session's queue to go, on the event rather than the clock.
func (o *outbox) whenEmpty() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.queues) == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	if o.emptied == nil {
		o.emptied = make(chan struct{})
	}
	return o.emptied
}

// deliver sends q's notifications to ss, one after another, until q is
// empty or the outbox closes (what is left is dropped: the server stops).
func (o *outbox) deliver(ss *mcp.ServerSession, q *sessionQueue) {
	defer o.wg.Done()
	for {
		o.mu.Lock()
		if len(q.items) == 0 || o.closed {
			delete(o.queues, ss)
			if len(o.queues) == 0 && o.emptied != nil {
				close(o.emptied)
				o.emptied = nil
			}
			dropped := q.dropped
			o.mu.Unlock()
			if dropped > 0 {
				o.log.Warn("a client's notification backlog ended", "session", ss.ID(), "operator", q.op, "dropped", dropped)
			}
			return
		}
		d := q.items[0]
		q.items[0] = delivery{}
		q.items = q.items[1:]
		if d.key != "" {
			delete(q.folded, d.key)
		} else {
			q.others--
		}
		o.mu.Unlock()

		var stuck *time.Timer
		if o.cut != nil {
			stuck = time.AfterFunc(o.stuckAfter-time.Since(d.queued), func() { o.stuck(ss, q, d.queued) })
		}
		ctx, cancel := context.WithTimeout(o.ctx, sendTimeout)
		err := d.send(ctx)
		cancel()
		if stuck != nil {
			stuck.Stop()
		}
		if err != nil {
			o.log.Debug("notification not delivered", "session", ss.ID(), "operator", q.op, "err", err)
		}
	}
}

// stuck cuts ss, whose notification queued at queued is still being
// written, and drops what waits behind it in q: the goroutine returns once
// the write ended. Not over a transport without streams to cut (stdio, in
// memory): the goroutine waits on.
func (o *outbox) stuck(ss *mcp.ServerSession, q *sessionQueue, queued time.Time) {
	if o.cut(ss) == 0 {
		return
	}
	o.mu.Lock()
	dropped := len(q.items)
	q.items, q.folded, q.others = nil, map[string]bool{}, 0
	o.mu.Unlock()
	o.log.Warn("a client has taken no notification for too long: its streams are cut and its waiting notifications dropped",
		"session", ss.ID(), "operator", q.op, "waited", time.Since(queued).Round(time.Millisecond),
		"limit", o.stuckAfter, "key", keyStuckSession, "dropped", dropped)
}

// closeGrace is how long close lets the notifications being written
// finish before it cuts their streams.
const closeGrace = time.Second

// close drops what waits and waits for the sessions' goroutines: each
// ends after the notification it is sending, if any. A session whose
// client stopped reading in the middle of one would hold close until
// stuckAfter cut it (5 minutes by default): after closeGrace, the sessions
// still writing have their streams cut, as a stuck one's are (the server
// stops: what they would send next is dropped anyway), while a healthy
// client's last notification is not cut off mid-write. Over a transport
// without streams to cut (stdio, in memory), a write the transport does
// not give up ends when the transport closes.
func (o *outbox) close() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	done := make(chan struct{})
	go func() {
		o.wg.Wait()
		close(done)
	}()
	grace := time.NewTimer(closeGrace)
	defer grace.Stop()
	select {
	case <-done:
		return
	case <-grace.C:
	}
	if o.cut != nil {
		o.mu.Lock()
		busy := make([]*mcp.ServerSession, 0, len(o.queues))
		for ss := range o.queues {
			busy = append(busy, ss)
		}
		o.mu.Unlock()
		cut := 0
		for _, ss := range busy {
			cut += o.cut(ss)
		}
		if cut > 0 {
			o.log.Info("the server closes: the streams of the sessions whose notifications were still being written are cut",
				"sessions", len(busy), "streams", cut, "after", closeGrace)
		}
	}
	<-done
}

// updatedKey is the folding key of a resources/updated: its URI, and the
// subscriptions/listen stream it is for (protocol 2026-07-28).
func updatedKey(req mcp.Request) string {
	p, ok := req.GetParams().(*mcp.ResourceUpdatedNotificationParams)
	if !ok {
		return ""
	}
	return foldKey(p.URI, req)
}

// foldKey is the folding key of the notification req about what (a URI,
// a list-changed method): what, and the subscriptions/listen stream it is
// for (protocol 2026-07-28), if any.
func foldKey(what string, req mcp.Request) string {
	var sub any
	if p := req.GetParams(); p != nil {
		sub = p.GetMeta()[mcp.MetaKeySubscriptionID]
	}
	return fmt.Sprintf("%s\x00%v", what, sub)
}

// listChanged reports whether method is a list-changed notification.
func listChanged(method string) bool {
	switch method {
	case "notifications/tools/list_changed", "notifications/prompts/list_changed", "notifications/resources/list_changed":
		return true
	}
	return false
}

// queueNotifications is a sending middleware that hands a session's
// list-changed and logging notifications to the session's queue in the
// outbox.
//
// A list-changed notification is folded by method (and listen stream): one
// that waits already says all a later one would. go-sdk sends them from its
// own timer after AddResource, to one session after another, each write
// waited for (Server.notifySessions and notifySubscribedSessions, 10 s,
// which a transport may not heed): a stuck session would hold the sessions
// after it.
//
// A logging notification is queued only when postLog offers it, and only
// once ServerSession.Log let it through: the session set a logging level
// (logging/setLevel; a stateless session of an older protocol has info)
// and the notification's is not below it. Queued regardless, those of a
// session that asked for none would fill its backlog and start its
// goroutine, only to be dropped at their turn. When its turn comes it is
// offered to ServerSession.Log again, without the mark, and so is sent if
// the session's level still lets it through.
func (s *Server) queueNotifications(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		ss, ok := req.GetSession().(*mcp.ServerSession)
		switch {
		case !ok:
		case listChanged(method):
			op, _ := s.sessionOperator(ss)
			s.outbox.post(ss, op, delivery{key: foldKey(method, req), send: func(ctx context.Context) error {
				_, err := next(ctx, method, req)
				return err
			}})
			return nil, nil
		case method == "notifications/message":
			op, posted := ctx.Value(logPost{}).(string)
			params, isLog := req.GetParams().(*mcp.LoggingMessageParams)
			if posted && isLog {
				s.outbox.post(ss, op, delivery{send: func(ctx context.Context) error { return ss.Log(ctx, params) }})
				return nil, nil
			}
		}
		return next(ctx, method, req)
	}
}

// logPost is the context key that marks a ServerSession.Log call of
// postLog; its value is the session's operator.
type logPost struct{}

// postLog queues the logging notification params for ss (of operator op)
// if ss takes it: ServerSession.Log decides, by the session's logging
// level, and hands it to queueNotifications, which queues it.
func (s *Server) postLog(ss *mcp.ServerSession, op string, params *mcp.LoggingMessageParams) {
	_ = ss.Log(context.WithValue(s.ctx, logPost{}, op), params)
}
