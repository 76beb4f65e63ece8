package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/mas-mcp/mas-mcp/server"
	"github.com/mas-mcp/mas-mcp/store"
)

// A second mas-mcp started on a data directory that another one owns (say
// Claude Desktop and an IDE both start it with --stdio) does not run a MAS
// of its own: two engines on one state would run every agent twice. It
// relays its host's MCP session, message by message, to the owner's local
// socket, so both hosts see and drive the same tasks. When the owner stops
// (a crash, a kill -9), the relay takes the data directory over: it starts
// the MAS from the durable state (or joins whichever relay won the race),
// opens a session there as its host had (initialize, log level,
// subscriptions), fails the calls that were in flight with a reason, tells
// the host that resources changed, and carries on.

// relayPrefix marks the IDs of requests the relay makes itself; their
// answers are not the host's.
const relayPrefix = "mas-relay-"

// frame is what the relay reads of a JSON-RPC message.
type frame struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
}

func (f frame) isRequest() bool  { return f.Method != "" && len(f.ID) > 0 }
func (f frame) isResponse() bool { return f.Method == "" && len(f.ID) > 0 }

// relay holds what a new owner must be told to continue the host's session.
type relay struct {
	log *slog.Logger
	out *lineWriter

	mu       sync.Mutex
	init     *frame            // the host's initialize request
	inited   []byte            // its notifications/initialized
	level    *frame            // its last logging/setLevel
	subs     map[string]*frame // resources/subscribe by URI
	inflight map[string]string // the host's open requests: ID → method
	listens  map[string][]byte // its open subscriptions/listen streams (2026-07-28) by ID
	unsent   [][]byte          // host messages the stopped owner never received
	n        int               // relay request counter
}

func newRelay(log *slog.Logger, out io.Writer) *relay {
	return &relay{log: log.With("component", "relay"), out: &lineWriter{w: out},
		subs: map[string]*frame{}, inflight: map[string]string{}, listens: map[string][]byte{}}
}

// lineWriter writes whole lines to the host.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *lineWriter) line(b []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := w.w.Write(append(bytes.TrimRight(b, "\r\n"), '\n')); err != nil {
		return err
	}
	return nil
}

// relayStdio serves the host on in/out through the owner of the data
// directory, taking over when the owner stops. It returns when the host
// disconnects or ctx is done.
func relayStdio(ctx context.Context, cfg Config, log *slog.Logger, getenv func(string) string, inUse *store.InUseError, in io.Reader, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := newRelay(log, out)
	socket := store.SocketPath(inUse.Dir)
	hostLines := make(chan []byte)
	hostGone := make(chan struct{})
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

	var inst *instance
	defer func() {
		if inst != nil {
			inst.close()
		}
	}()
	for first := true; ; first = false {
		conn, owned, err := r.connect(ctx, cfg, log, getenv, socket, cancel)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		br := bufio.NewReaderSize(conn, 64<<10)
		if first {
			log.Info("mas-mcp ready", "transport", "stdio", "listen", "stdin/stdout", "data_dir", inUse.Dir,
				"joined_pid", inUse.Owner, "took_over", owned != nil)
		} else if err := r.resume(conn, br); err != nil {
			r.log.Warn("resuming the session with the new owner", "err", err)
			conn.Close()
			if owned != nil {
				owned.close()
			}
			continue
		}
		inst = owned
		backendGone := make(chan struct{})
		go func() {
			defer close(backendGone)
			r.fromOwner(br)
		}()
		broke := r.fromHost(ctx, conn, hostLines, hostGone, backendGone)
		conn.Close()
		if !broke {
			<-backendGone
			log.Info("shutting down")
			return nil
		}
		<-backendGone
		r.failInflight()
		r.log.Warn("the mas-mcp owning the data directory stopped; taking over", "data_dir", inUse.Dir)
	}
}

// connect reaches the owner's socket or, when nobody owns the directory
// any more, becomes the owner and talks to its own server through a pipe.
func (r *relay) connect(ctx context.Context, cfg Config, log *slog.Logger, getenv func(string) string, socket string, stop func()) (net.Conn, *instance, error) {
	wait := 50 * time.Millisecond
	for warned := time.Now(); ; {
		if c, err := net.DialTimeout("unix", socket, 2*time.Second); err == nil {
			return c, nil, nil
		}
		inst, err := start(ctx, cfg, log, getenv, stop)
		var inUse *store.InUseError
		switch {
		case err == nil:
			a, b := net.Pipe()
			go func() { _ = inst.srv.ServeConn(context.WithoutCancel(ctx), a) }()
			r.log.Info("took over the data directory", "base_task", inst.sys.BaseTaskID())
			return b, inst, nil
		case !errors.As(err, &inUse):
			return nil, nil, err
		}
		// Another process holds the lock but does not answer yet (it is
		// starting, or another relay is taking over): try again shortly.
		if time.Since(warned) > 10*time.Second {
			r.log.Warn("waiting for the owner of the data directory", "socket", socket, "err", err)
			warned = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
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
			r.note(b)
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

// note records a host message the session depends on.
func (r *relay) note(b []byte) {
	var f frame
	if json.Unmarshal(b, &f) != nil {
		return // a batch or garbage: the owner answers it
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if f.isRequest() {
		r.inflight[string(f.ID)] = f.Method
	}
	switch f.Method {
	case "subscriptions/listen":
		r.listens[string(f.ID)] = b
	case "notifications/cancelled":
		var p struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		if json.Unmarshal(f.Params, &p) == nil {
			delete(r.inflight, string(p.RequestID))
			delete(r.listens, string(p.RequestID))
		}
	case "initialize":
		r.init = &f
	case "notifications/initialized":
		r.inited = b
	case "logging/setLevel":
		r.level = &f
	case "resources/subscribe", "resources/unsubscribe":
		var p struct {
			URI string `json:"uri"`
		}
		if json.Unmarshal(f.Params, &p) == nil && p.URI != "" {
			if f.Method == "resources/subscribe" {
				r.subs[p.URI] = &f
			} else {
				delete(r.subs, p.URI)
			}
		}
	}
}

// fromOwner forwards the owner's messages to the host until the
// connection ends, dropping the answers to the relay's own requests.
func (r *relay) fromOwner(br *bufio.Reader) {
	for {
		b, err := br.ReadBytes('\n')
		if b = bytes.TrimSpace(b); len(b) > 0 {
			var f frame
			if json.Unmarshal(b, &f) == nil && f.isResponse() {
				if bytes.HasPrefix(f.ID, []byte(`"`+relayPrefix)) {
					continue
				}
				r.mu.Lock()
				delete(r.inflight, string(f.ID))
				delete(r.listens, string(f.ID))
				r.mu.Unlock()
			}
			if err := r.out.line(b); err != nil {
				r.log.Warn("writing to the host", "err", err)
			}
		}
		if err != nil {
			return
		}
	}
}

// failInflight answers the host's requests the stopped owner left open:
// they may or may not have taken effect. Subscription streams stay open:
// resume reopens them on the new owner.
func (r *relay) failInflight() {
	r.mu.Lock()
	open := r.inflight
	r.inflight = map[string]string{}
	for id := range r.listens {
		r.inflight[id] = "subscriptions/listen"
		delete(open, id)
	}
	for _, b := range r.unsent {
		var f frame
		if json.Unmarshal(b, &f) == nil && f.isRequest() {
			r.inflight[string(f.ID)] = f.Method
			delete(open, string(f.ID))
		}
	}
	r.mu.Unlock()
	const why = "the mas-mcp process that owned the data directory stopped during this call, " +
		"so it may or may not have taken effect; this process took over: check the state (ask_info, the resources) before repeating it"
	for id, method := range open {
		var msg any
		if method == "tools/call" {
			msg = map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id), "result": map[string]any{
				"content": []any{map[string]any{"type": "text", "text": why}}, "isError": true,
			}}
		} else {
			msg = map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id), "error": map[string]any{"code": -32603, "message": why}}
		}
		b, _ := json.Marshal(msg)
		_ = r.out.line(b)
	}
}

// resume opens the host's session on a new owner (and sends it what the
// stopped owner never received). A host of the
// 2026-07-28 protocol has no session: its open subscriptions/listen
// streams are sent again with their IDs (the host still reads them). An
// older host's session is initialized again as it was (initialize, the
// initialized notification, the log level, the subscriptions), each
// answered before the next. Then the host is told that resources changed.
func (r *relay) resume(conn net.Conn, br *bufio.Reader) error {
	r.mu.Lock()
	init, inited, level := r.init, r.inited, r.level
	subs := make([]*frame, 0, len(r.subs))
	uris := make([]string, 0, len(r.subs))
	for uri, f := range r.subs {
		subs = append(subs, f)
		uris = append(uris, uri)
	}
	listens := make([][]byte, 0, len(r.listens))
	for _, b := range r.listens {
		listens = append(listens, b)
	}
	unsent := r.unsent
	r.mu.Unlock()

	call := func(f *frame) error {
		r.mu.Lock()
		r.n++
		id := strconv.Quote(relayPrefix + strconv.Itoa(r.n))
		r.mu.Unlock()
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id), "method": f.Method, "params": f.Params})
		if _, err := conn.Write(append(b, '\n')); err != nil {
			return err
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		defer conn.SetReadDeadline(time.Time{})
		for {
			line, err := br.ReadBytes('\n')
			if err != nil {
				return fmt.Errorf("%s: %w", f.Method, err)
			}
			var got frame
			if json.Unmarshal(line, &got) == nil && got.isResponse() && string(got.ID) == id {
				return nil
			}
			_ = r.out.line(line) // a notification meanwhile: the host's
		}
	}
	if init != nil {
		if err := call(init); err != nil {
			return err
		}
		if inited != nil {
			if _, err := conn.Write(append(inited, '\n')); err != nil {
				return err
			}
		}
		if level != nil {
			if err := call(level); err != nil {
				return err
			}
		}
		for _, f := range subs {
			if err := call(f); err != nil {
				return err
			}
		}
	}
	for _, b := range append(listens, unsent...) {
		if _, err := conn.Write(append(b, '\n')); err != nil {
			return err
		}
	}

	// The state may have moved while nobody served it: let the host re-read.
	notify := func(method string, params map[string]any) {
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
		_ = r.out.line(b)
	}
	if init != nil {
		notify("notifications/resources/list_changed", map[string]any{})
		for _, uri := range uris {
			notify("notifications/resources/updated", map[string]any{"uri": uri})
		}
	}
	for _, b := range listens {
		var l struct {
			ID     json.RawMessage `json:"id"`
			Params struct {
				Notifications struct {
					ResourcesListChanged  bool     `json:"resourcesListChanged"`
					ResourceSubscriptions []string `json:"resourceSubscriptions"`
				} `json:"notifications"`
			} `json:"params"`
		}
		if json.Unmarshal(b, &l) != nil {
			continue
		}
		meta := map[string]any{"io.modelcontextprotocol/subscriptionId": l.ID}
		if l.Params.Notifications.ResourcesListChanged {
			notify("notifications/resources/list_changed", map[string]any{"_meta": meta})
		}
		for _, uri := range l.Params.Notifications.ResourceSubscriptions {
			notify("notifications/resources/updated", map[string]any{"uri": uri, "_meta": meta})
		}
	}
	r.mu.Lock()
	r.unsent = r.unsent[len(unsent):]
	r.mu.Unlock()
	r.log.Info("resumed the host's session", "resent", len(unsent), "initialized", init != nil, "subscriptions", len(uris), "listens", len(listens))
	return nil
}
