// Package relay lets a second mas-mcp on a data directory that another
// process owns serve its host through that owner.
//
// Two engines on one state would run every agent twice, so a mas-mcp
// started with --stdio on a data directory another one owns (say Claude
// Desktop and an IDE both start it) runs no MAS of its own: Serve relays
// its host's MCP session, message by message, to the owner's local socket,
// and both hosts see and drive the same tasks. When the owner stops (a
// crash, a kill -9), the relay takes the data directory over: it starts
// the MAS from the durable state (or joins whichever relay won the race),
// opens a session there as its host had (initialize, log level,
// subscriptions), fails the calls that were in flight with a reason, tells
// the host that resources changed, and carries on.
//
// Messages are read with go-sdk's JSON-RPC types (jsonrpc.DecodeMessage)
// only to note what a new owner must be told; they are forwarded as the
// bytes the host wrote.
//
// Bounds: a line either side may be at most server.MaxLineBytes (16 MiB,
// what an MCP session of mas-mcp takes as one message). An over-long line
// of the host is answered by the LineReader; one of the owner is dropped,
// and the host's request it answered gets an error naming the limit, as
// does the owner for a request of its own to the host (sampling,
// elicitation) that the line held.
//
// What the relay keeps of the host's session is bounded too: at most
// Config.MaxInflight of its requests awaiting answers (default
// DefaultMaxInflight, 1,024) and Config.MaxSubscriptions resources it is
// subscribed to (default DefaultMaxSubscriptions, 10,000), which a new
// owner is told again, and Config.MaxKeptBytes of them all (default
// DefaultMaxKeptBytes, 64 MiB: their IDs and methods, subscriptions/listen
// requests, kept whole, and subscriptions, each of which may be a line of
// 16 MiB). A request past any is not forwarded: the relay
// answers it with an error naming the limit (a tool error for tools/call,
// JSON-RPC error -32000 otherwise), as the owner answers one past its own
// caps. A subscription the owner refuses is forgotten, so only those it
// took count.
//
// Lines to the host are written by a goroutine of their own through a
// queue of at most 64 MiB (four such lines): a host that stops reading its
// stdout holds nothing, and once more than that waits for it the relay
// ends with an error saying so (dropping messages would leave its callers
// waiting unawares). Failed writes to the host are logged once, with a
// count of the messages it missed when a write succeeds again or the relay
// ends. Cancelling the context (SIGTERM) ends Serve at once, also while a
// write to the host blocks and while it reopens the session on a new
// owner: it does not wait for that owner's answers. When Serve returns,
// the goroutines it started have ended where the host's streams allow
// ending a read or write that blocks (see Serve). A failed reopening
// is tried again after a wait (50 ms, doubling up to 5 s), at most 10
// times in a row; then Serve fails saying so. A reopened session the new
// owner drops within 10 s counts as a failed reopening.
package relay

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mas-mcp/mas-mcp/server"
	"github.com/mas-mcp/mas-mcp/store"
)

// Owner is a MAS this process started on taking the data directory over.
type Owner interface {
	// ServeConn serves one MCP session on c until c closes.
	ServeConn(ctx context.Context, c net.Conn) error
	// Close stops the MAS (after Serve returns).
	Close()
}

// Config configures Serve. Socket and TakeOver are required.
type Config struct {
	// Socket is the owner's local socket (store.SocketPath of the data
	// directory).
	Socket string
	// TakeOver tries to become the owner of the data directory. While
	// another process holds it, it fails with a *store.InUseError and Serve
	// tries the socket again.
	TakeOver func(ctx context.Context) (Owner, error)
	// Ready, when set, is called once the host's session is first
	// connected; tookOver says whether this process owns the directory.
	Ready func(tookOver bool)
	// Logger receives the relay's lines (nil: none).
	Logger *slog.Logger
	// OwnerWait bounds the wait for an owner that holds the data
	// directory but does not answer on its socket (default
	// DefaultOwnerWait): past it Serve fails saying so.
	OwnerWait time.Duration
	// MaxInflight bounds the host's requests awaiting the owner's answer
	// (default DefaultMaxInflight); MaxSubscriptions the resources it is
	// subscribed to (default DefaultMaxSubscriptions). A request past
	// either is answered with an error naming the limit, not forwarded.
	// Negative values are refused.
	MaxInflight, MaxSubscriptions int
	// MaxKeptBytes bounds the bytes the relay keeps of those requests and
	// subscriptions (default DefaultMaxKeptBytes): the IDs and methods of
	// the requests awaiting answers, subscriptions/listen requests whole
	// (a new owner is sent them again), resources/subscribe requests. A
	// request that would pass it is answered with an error naming the
	// limit, not forwarded. Negative values are refused.
	MaxKeptBytes int
}

// DefaultOwnerWait is Config.OwnerWait's default: an owner starts in
// seconds; one that does not answer for a minute is wedged, or could not
// make its socket (a data directory path too long for one).
const DefaultOwnerWait = time.Minute

// A resume that fails (the new owner drops the connection, or does not
// answer within 10 s) is tried again after resumeWait, doubling up to
// maxResumeWait, at most maxResumeAttempts times in a row: an owner that
// keeps failing is not hammered, and a host is not kept waiting for ever.
const (
	resumeWait        = 50 * time.Millisecond
	maxResumeWait     = 5 * time.Second
	maxResumeAttempts = 10
)

// A resumed session that the new owner drops sooner than healthySession
// after it was resumed counts as a failed resume: an owner that
// takes each session and drops it (it is shutting down, or fails on what
// the relay replays) would otherwise be reached again at once, for ever.
// One that lasts longer is an owner that stopped, taken over at once.
const healthySession = 10 * time.Second

// errHostGone ends a wait for the owner when the host leaves.
var errHostGone = errors.New("the host left")

// idPrefix marks the IDs of requests the relay makes itself; their
// answers are not the host's.
const idPrefix = "mas-relay-"

// relay holds what a new owner must be told to continue the host's session.
type relay struct {
	log     *slog.Logger
	out     *lineWriter
	maxLine int // bounds a line of the owner: server.MaxLineBytes
	// maxInflight and maxSubs bound inflight and subs (Config's
	// MaxInflight and MaxSubscriptions), maxKept the bytes kept of them
	// and of listens (MaxKeptBytes); fixed before the first line.
	maxInflight, maxSubs, maxKept int

	sessions sync.WaitGroup // the sessions of owners this process took over, served on pipes

	mu       sync.Mutex
	init     *jsonrpc.Request            // the host's initialize request
	inited   []byte                      // its notifications/initialized
	level    *jsonrpc.Request            // its last logging/setLevel
	subs     map[string]*jsonrpc.Request // resources/subscribe by URI
	inflight map[jsonrpc.ID]string       // the host's open requests: ID → method
	listens  map[jsonrpc.ID][]byte       // its open subscriptions/listen streams (2026-07-28) by ID
	unsent   [][]byte                    // host messages the stopped owner never received
	n        int                         // relay request counter
	kept     int                         // the bytes kept of inflight, listens and subs (keptBytesLocked)
	refusing bool                        // the last call of the host was refused over a bound (overLimitLocked)
}

func newRelay(log *slog.Logger, out io.Writer) *relay {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "relay")
	return &relay{log: log, out: newLineWriter(log, out), maxLine: server.MaxLineBytes,
		maxInflight: DefaultMaxInflight, maxSubs: DefaultMaxSubscriptions, maxKept: DefaultMaxKeptBytes,
		subs: map[string]*jsonrpc.Request{}, inflight: map[jsonrpc.ID]string{}, listens: map[jsonrpc.ID][]byte{}}
}

// Serve serves the host on in/out through the owner of the data
// directory, taking over when the owner stops. It returns when the host
// disconnects or ctx is done (nil), when taking over fails otherwise than
// by finding the directory in use, or when the host does not read its
// output (see lineWriter).
//
// When it returns, Serve has stopped using in and out, and every
// goroutine it started has ended, if the streams allow it: a read of in
// or a write to out that blocks is ended by a deadline in the past (a
// net.Conn; an *os.File of a pipe or socket in non-blocking mode), or
// else by closing the stream (an io.Closer other than an *os.File). A
// read or write that neither ends (an *os.File in blocking mode: os.Stdin
// as the process got it) is left to end with the process; Serve does not
// wait for it.
func Serve(ctx context.Context, cfg Config, in io.Reader, out io.Writer) error {
	switch {
	case cfg.Socket == "" || cfg.TakeOver == nil:
		return errors.New("relay: Socket and TakeOver are required")
	case cfg.MaxInflight < 0:
		return fmt.Errorf("relay: MaxInflight %d: must not be negative", cfg.MaxInflight)
	case cfg.MaxSubscriptions < 0:
		return fmt.Errorf("relay: MaxSubscriptions %d: must not be negative", cfg.MaxSubscriptions)
	case cfg.MaxKeptBytes < 0:
		return fmt.Errorf("relay: MaxKeptBytes %d: must not be negative", cfg.MaxKeptBytes)
	}
	r := newRelay(cfg.Logger, out)
	r.maxInflight = cmp.Or(cfg.MaxInflight, r.maxInflight)
	r.maxSubs = cmp.Or(cfg.MaxSubscriptions, r.maxSubs)
	r.maxKept = cmp.Or(cfg.MaxKeptBytes, r.maxKept)
	return r.run(ctx, cfg, in)
}

// run is Serve with the relay made. Once it ends, it stops reading the
// host's stdin and waits for the sessions of the owners it took over to
// end; then what is queued for the host is written (for up to flushWait)
// unless ctx is done or the host is stuck: neither waits for the host.
// Last, the writer is closed, interrupting a write that blocks.
func (r *relay) run(parent context.Context, cfg Config, in io.Reader) (err error) {
	ctx, cancel := context.WithCancelCause(parent)
	r.out.onStuck = cancel
	hostGone := make(chan struct{}) // closed when the goroutine reading the host's stdin ends
	defer func() {
		cancel(nil)
		select {
		case <-hostGone:
		default:
			if stopReading(in) {
				waitEnded(r.log, hostGone, "the read of the host's stdin")
			} else {
				// It ends at the host's next line (ctx is done) or with
				// the process.
				r.log.Debug("the read of the host's stdin cannot be interrupted; it ends with the process")
			}
		}
		// The owner it took over (if any) is closed: its session ends.
		sessions := make(chan struct{})
		go func() {
			defer close(sessions)
			r.sessions.Wait()
		}()
		waitEnded(r.log, sessions, "the session of the owner this process took over")
		if stuck := r.out.err(); stuck != nil {
			err = stuck
		} else if parent.Err() == nil {
			fctx, stop := context.WithTimeout(context.WithoutCancel(parent), flushWait)
			if !r.out.flush(fctx) {
				r.log.Warn("the host did not read the last messages", "wait", flushWait)
			}
			stop()
		}
		r.out.close()
		r.out.report()
	}()
	hostLines := make(chan []byte)
	go func() {
		defer close(hostGone)
		// A line no MCP session could take is answered here, as the owner
		// would answer it, and never forwarded.
		lines := server.NewLineReader(in, r.out.line)
		for {
			b, err := lines.Next()
			if err != nil {
				return
			}
			select {
			case hostLines <- bytes.Clone(b):
			case <-ctx.Done():
				return
			}
		}
	}()

	var owner Owner
	defer func() {
		if owner != nil {
			owner.Close()
		}
	}()
	failed, wait := 0, resumeWait // resumes failed in a row; the wait before the next
	// retry counts a failed resume (err says why) and waits before the
	// next attempt. It reports whether Serve is to end, and with what.
	retry := func(err error) (end bool, _ error) {
		if failed++; failed == maxResumeAttempts {
			return true, fmt.Errorf("relay: resuming the host's session on the new owner of the data directory failed %d times in a row "+
				"(the limit of attempts), the last: %w; see the owner's log", failed, err)
		}
		r.log.Warn("resuming the session with the new owner failed; trying again", "err", err,
			"attempt", failed, "max_attempts", maxResumeAttempts, "wait", wait)
		select {
		case <-ctx.Done():
			return true, nil
		case <-hostGone:
			return true, nil
		case <-time.After(wait):
		}
		wait = min(2*wait, maxResumeWait)
		return false, nil
	}
	for first := true; ; first = false {
		conn, owned, err := r.connect(ctx, cfg, hostGone)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, errHostGone) {
				return nil
			}
			return err
		}
		br := bufio.NewReaderSize(conn, 64<<10)
		if first {
			if cfg.Ready != nil {
				cfg.Ready(owned != nil)
			}
		} else if err := r.resume(ctx, conn, br); err != nil {
			conn.Close()
			if owned != nil {
				owned.Close()
			}
			if ctx.Err() != nil {
				return nil
			}
			// The calls it sent the new owner are in flight.
			r.failInflight()
			if end, err := retry(err); end {
				return err
			}
			continue
		}
		if owned != nil {
			owner = owned
		}
		resumed := time.Now()
		backendGone := make(chan struct{})
		go func() {
			defer close(backendGone)
			r.fromOwner(br, conn)
		}()
		broke := r.fromHost(ctx, conn, hostLines, hostGone, backendGone)
		conn.Close()
		<-backendGone
		// A cancelled ctx may also break the owner's side (resume's
		// connection closes): it ends Serve all the same.
		if !broke || ctx.Err() != nil {
			r.log.Info("shutting down")
			return nil
		}
		r.failInflight()
		if lasted := time.Since(resumed); !first && lasted < healthySession {
			if end, err := retry(fmt.Errorf("the new owner dropped the session %s after it was resumed, sooner than %s", lasted, healthySession)); end {
				return err
			}
			continue
		}
		failed, wait = 0, resumeWait
		r.log.Warn("the mas-mcp owning the data directory stopped; taking over", "socket", cfg.Socket)
	}
}

// connect reaches the owner's socket or, when nobody owns the directory
// any more, becomes the owner and talks to its own server through a pipe.
// It gives up when the host leaves (errHostGone) or after cfg.OwnerWait.
func (r *relay) connect(ctx context.Context, cfg Config, hostGone <-chan struct{}) (net.Conn, Owner, error) {
	wait := 50 * time.Millisecond
	start, bound := time.Now(), cmp.Or(cfg.OwnerWait, DefaultOwnerWait)
	for warned := start; ; {
		if c, err := net.DialTimeout("unix", cfg.Socket, 2*time.Second); err == nil {
			return c, nil, nil
		}
		owner, err := cfg.TakeOver(ctx)
		var inUse *store.InUseError
		switch {
		case err == nil:
			a, b := net.Pipe()
			// It ends when the relay closes its side of the pipe; run
			// waits for it.
			r.sessions.Go(func() { _ = owner.ServeConn(context.WithoutCancel(ctx), a) })
			r.log.Info("took over the data directory")
			return b, owner, nil
		case !errors.As(err, &inUse):
			return nil, nil, err
		}
		// Another process holds the lock but does not answer yet (it is
		// starting, or another relay is taking over): try again shortly.
		if time.Since(start) > bound {
			return nil, nil, fmt.Errorf("relay: %v, and it has not answered on its socket %s for %s: it is wedged, or could not make its socket (see its log); stop it, or use another data directory", err, cfg.Socket, bound)
		}
		if time.Since(warned) > 10*time.Second {
			r.log.Warn("waiting for the owner of the data directory", "socket", cfg.Socket, "err", err)
			warned = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-hostGone:
			return nil, nil, errHostGone
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// fromHost forwards the host's messages to the owner, noting what a new
// owner must be told. It reports whether the owner's side broke (rather
// than the host leaving or ctx ending).
func (r *relay) fromHost(ctx context.Context, conn net.Conn, lines <-chan []byte, hostGone, backendGone <-chan struct{}) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-hostGone:
			return false
		case <-backendGone:
			return true
		case b := <-lines:
			if refused := r.note(b); refused != nil {
				_ = r.out.send(refused) // the writer logs a host that does not take it
				continue
			}
			if _, err := conn.Write(append(b, '\n')); err != nil {
				// The owner is gone and never read it: the next owner gets it.
				r.mu.Lock()
				r.unsent = append(r.unsent, b)
				r.mu.Unlock()
				select {
				case <-backendGone:
				case <-ctx.Done():
					return false
				}
				return true
			}
		}
	}
}

// request decodes b as a JSON-RPC request (a call or a notification); nil
// for a response, a batch or garbage (the owner answers those).
func request(b []byte) *jsonrpc.Request {
	msg, err := jsonrpc.DecodeMessage(b)
	if err != nil {
		return nil
	}
	req, _ := msg.(*jsonrpc.Request)
	return req
}

// note records a host message the session depends on. A request past the
// relay's bounds (overLimitLocked) is not recorded: note returns the
// answer the host gets instead, and the caller does not forward it.
func (r *relay) note(b []byte) *jsonrpc.Response {
	req := request(b)
	if req == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if refused := r.overLimitLocked(req, b); refused != nil {
		return refused
	}
	if req.IsCall() {
		r.openLocked(req.ID, req.Method)
	}
	switch req.Method {
	case "subscriptions/listen":
		r.listenLocked(req.ID, b)
	case "notifications/cancelled":
		var p struct {
			RequestID any `json:"requestId"`
		}
		if json.Unmarshal(req.Params, &p) == nil {
			if id, err := jsonrpc.MakeID(p.RequestID); err == nil {
				r.closeLocked(id)
			}
		}
	case "initialize":
		r.init = req
	case "notifications/initialized":
		r.inited = b
	case "logging/setLevel":
		r.level = req
	case "resources/subscribe", "resources/unsubscribe":
		if uri := subscribedURI(req); uri != "" {
			if req.Method == "resources/subscribe" {
				r.subscribeLocked(uri, req)
			} else {
				r.unsubscribeLocked(uri)
			}
		}
	}
	return nil
}

// ownID reports whether id is one of the relay's own requests.
func ownID(id jsonrpc.ID) bool {
	s, ok := id.Raw().(string)
	return ok && strings.HasPrefix(s, idPrefix)
}

// fromOwner forwards the owner's messages to the host until the
// connection ends, dropping the answers to the relay's own requests and
// lines over the limit (see dropOverLong; toOwner is the connection, for
// its answers).
func (r *relay) fromOwner(br *bufio.Reader, toOwner io.Writer) {
	for {
		b, tooLong, head, err := readOwnerLine(br, r.maxLine)
		if tooLong {
			r.dropOverLong(head, toOwner)
		} else if b = bytes.TrimSpace(b); len(b) > 0 {
			if msg, derr := jsonrpc.DecodeMessage(b); derr == nil {
				if resp, ok := msg.(*jsonrpc.Response); ok {
					if ownID(resp.ID) {
						continue
					}
					r.answered(resp)
				}
			}
			_ = r.out.line(b) // the writer logs a host that does not take it
		}
		if err != nil {
			return
		}
	}
}

// dropOverLong handles an owner's line longer than r.maxLine, already
// read past, by what its start names: a request of the owner to the host
// is answered to the owner (on toOwner) with an error naming the limit,
// so its caller does not wait for ever; the host's request an answer
// answered (by id) is answered with an error naming the limit; any other
// line is logged and dropped.
//
// toOwner is the connection fromHost writes to as well: a net.Conn's
// writes are safe to make concurrently, and one line is one Write.
func (r *relay) dropOverLong(head lineHead, toOwner io.Writer) {
	id := head.ID
	if head.request() {
		r.log.Warn("dropped a request of the owner to the host, longer than the line limit; answered it with an error",
			"limit_bytes", r.maxLine, "id", id.Raw(), "method", head.Method)
		b, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Error: &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
			Message: fmt.Sprintf("invalid request: this %s request is longer than %d bytes, the limit of one message between "+
				"mas-mcp processes (server.MaxLineBytes); it was dropped and the client never got it: send less", head.Method, r.maxLine)}})
		if err == nil {
			_, err = toOwner.Write(append(b, '\n'))
		}
		if err != nil {
			r.log.Warn("answering the owner's over-long request failed", "id", id.Raw(), "method", head.Method, "err", err)
		}
		return
	}
	method, ok := "", false
	if head.Method == "" { // an answer: to one of the host's requests?
		r.mu.Lock()
		method, ok = r.inflight[id]
		r.closeLocked(id)
		r.mu.Unlock()
	}
	if !ok {
		r.log.Warn("dropped a message of the owner longer than the line limit", "limit_bytes", r.maxLine, "id", id.Raw(), "method", head.Method)
		return
	}
	r.log.Warn("dropped the owner's answer to a request of the host, longer than the line limit; answered the request with an error",
		"limit_bytes", r.maxLine, "id", id.Raw(), "method", method)
	r.answerFailed(id, method, fmt.Sprintf("the answer to this request is longer than %d bytes, the limit of one message "+
		"between mas-mcp processes (server.MaxLineBytes); it was dropped: ask for less", r.maxLine))
}

// inflightReason is the answer to a call a stopped owner left open.
const inflightReason = "the mas-mcp process that owned the data directory stopped during this call, " +
	"so it may or may not have taken effect; this process took over: check the state (ask_info, the resources) before repeating it"

// failInflight answers the host's requests the stopped owner left open:
// they may or may not have taken effect. Subscription streams stay open:
// resume reopens them on the new owner.
func (r *relay) failInflight() {
	r.mu.Lock()
	open := r.inflight
	r.inflight = map[jsonrpc.ID]string{}
	for id := range r.listens {
		r.inflight[id] = "subscriptions/listen"
		delete(open, id)
	}
	for _, b := range r.unsent {
		if req := request(b); req != nil && req.IsCall() {
			r.inflight[req.ID] = req.Method
			delete(open, req.ID)
		}
	}
	r.kept = r.keptBytesLocked()
	r.mu.Unlock()
	for id, method := range open {
		r.answerFailed(id, method, inflightReason)
	}
}

// answerFailed answers the host's request id, a call of method, with the
// reason it failed.
func (r *relay) answerFailed(id jsonrpc.ID, method, reason string) {
	_ = r.out.send(failure(id, method, jsonrpc.CodeInternalError, reason)) // the writer logs a host that does not take it
}

// failure is the answer to the host's request id, a call of method, that
// failed for reason: a tool error for tools/call (a tool result the host's
// model reads), else a JSON-RPC error of code.
func failure(id jsonrpc.ID, method string, code int64, reason string) *jsonrpc.Response {
	resp := &jsonrpc.Response{ID: id}
	if method == "tools/call" {
		resp.Result, _ = json.Marshal(map[string]any{
			"content": []any{map[string]any{"type": "text", "text": reason}}, "isError": true,
		})
	} else {
		resp.Error = &jsonrpc.Error{Code: code, Message: reason}
	}
	return resp
}

// resume opens the host's session on a new owner (and sends it what the
// stopped owner never received). A host of the 2026-07-28 protocol has no
// session: its open subscriptions/listen streams are sent again with their
// IDs (the host still reads them). An older host's session is initialized
// again as it was (initialize, the initialized notification, the log
// level, the subscriptions), each answered before the next. Then the host
// is told that resources changed. Cancelling ctx ends it at once (conn
// is closed); an owner that does not answer one of its requests within
// 10 s fails it. What the stopped owner never received leaves r.unsent
// as it is sent: a resume that fails later does not send it again (the
// new owner may have run it), and the caller answers it as in flight.
func (r *relay) resume(ctx context.Context, conn net.Conn, br *bufio.Reader) error {
	defer context.AfterFunc(ctx, func() { conn.Close() })()
	r.mu.Lock()
	init, inited, level := r.init, r.inited, r.level
	subs := make([]*jsonrpc.Request, 0, len(r.subs))
	uris := make([]string, 0, len(r.subs))
	for uri, req := range r.subs {
		subs = append(subs, req)
		uris = append(uris, uri)
	}
	listens := make([][]byte, 0, len(r.listens))
	for _, b := range r.listens {
		listens = append(listens, b)
	}
	unsent := r.unsent
	r.mu.Unlock()

	write := func(b []byte) error {
		_, err := conn.Write(append(b, '\n'))
		return err
	}
	// call sends req to the new owner and waits for its answer; an error
	// answer is returned as one (refused).
	call := func(req *jsonrpc.Request) error {
		r.mu.Lock()
		r.n++
		id, _ := jsonrpc.MakeID(idPrefix + strconv.Itoa(r.n))
		r.mu.Unlock()
		b, err := jsonrpc.EncodeMessage(&jsonrpc.Request{ID: id, Method: req.Method, Params: req.Params})
		if err != nil {
			return err
		}
		if err := write(b); err != nil {
			return fmt.Errorf("%s: %w", req.Method, err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		defer conn.SetReadDeadline(time.Time{})
		for {
			line, tooLong, head, err := readOwnerLine(br, r.maxLine)
			switch {
			case err != nil:
				return fmt.Errorf("%s: %w", req.Method, err)
			case tooLong && head.Method == "" && head.ID == id:
				return fmt.Errorf("%s: the new owner's answer is longer than %d bytes, the line limit (server.MaxLineBytes)", req.Method, r.maxLine)
			case tooLong:
				r.dropOverLong(head, conn)
				continue
			case len(bytes.TrimSpace(line)) == 0:
				continue
			}
			if msg, err := jsonrpc.DecodeMessage(line); err == nil {
				if resp, ok := msg.(*jsonrpc.Response); ok && resp.ID == id {
					if resp.Error != nil {
						return fmt.Errorf("%s: the new owner refused it: %w", req.Method, resp.Error)
					}
					return nil
				}
			}
			_ = r.out.line(line) // a notification meanwhile: the host's
		}
	}
	if init != nil {
		if err := call(init); err != nil {
			return err
		}
		if inited != nil {
			if err := write(inited); err != nil {
				return err
			}
		}
		// A refused level or subscription is the host's to meet as it
		// would have (a subscription to a task gone): logged, not a failed
		// resume, which would be tried again and refused again.
		var refused *jsonrpc.Error
		if level != nil {
			if err := call(level); errors.As(err, &refused) {
				r.log.Warn("relay: the new owner refused the host's logging level", "err", err)
			} else if err != nil {
				return err
			}
		}
		for _, req := range subs {
			if err := call(req); errors.As(err, &refused) {
				r.log.Warn("relay: the new owner refused a subscription of the host", "err", err)
			} else if err != nil {
				return err
			}
		}
	}
	for _, b := range listens {
		if err := write(b); err != nil {
			return err
		}
	}
	for _, b := range unsent {
		if err := write(b); err != nil {
			return err
		}
		// Sent: should this resume fail, it is in flight (the owner may
		// have run it), not to be sent again.
		r.mu.Lock()
		r.unsent = r.unsent[1:]
		r.mu.Unlock()
	}

	// The state may have moved while nobody served it: let the host re-read.
	notify := func(method string, params map[string]any) {
		p, _ := json.Marshal(params)
		_ = r.out.send(&jsonrpc.Request{Method: method, Params: p})
	}
	if init != nil {
		notify("notifications/resources/list_changed", map[string]any{})
		for _, uri := range uris {
			notify("notifications/resources/updated", map[string]any{"uri": uri})
		}
	}
	for _, b := range listens {
		req := request(b)
		if req == nil {
			continue
		}
		var p struct {
			Notifications struct {
				ResourcesListChanged  bool     `json:"resourcesListChanged"`
				ResourceSubscriptions []string `json:"resourceSubscriptions"`
			} `json:"notifications"`
		}
		if json.Unmarshal(req.Params, &p) != nil {
			continue
		}
		meta := map[string]any{"io.modelcontextprotocol/subscriptionId": req.ID.Raw()}
		if p.Notifications.ResourcesListChanged {
			notify("notifications/resources/list_changed", map[string]any{"_meta": meta})
		}
		for _, uri := range p.Notifications.ResourceSubscriptions {
			notify("notifications/resources/updated", map[string]any{"uri": uri, "_meta": meta})
		}
	}
	r.log.Info("resumed the host's session", "resent", len(unsent), "initialized", init != nil, "subscriptions", len(uris), "listens", len(listens))
	return nil
}
