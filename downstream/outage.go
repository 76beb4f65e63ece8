package downstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/mas-mcp/mas-mcp/llm"
)

// Outages pause, not destroy. A call that cannot reach its server —
// nothing listens (connection refused, an address that does not resolve
// or cannot be dialled), a gateway answers 502, 503 or 504, a stdio
// server's process cannot start or exits at once, the handshake gets no
// answer within the server's timeout — waits for it: it tries again with
// backoff (a second, doubling up to 30 s, jittered) until the server is
// reached or the server's outage window has passed (outageWindow,
// DefaultOutageWindow; negative: no waiting). Only a call that is safe to
// make then waits: one whose request could not have reached the server,
// or whose tool is declared read-only or idempotent; a call that was sent
// and broke is not made again (Pool.do). Meanwhile the step's
// ExecInput.ServerOutage is told (the engine shows the agent waiting and
// tells its task's operator which server is down), the call's own
// timeout does not run, and the wait ends at once when the step's context
// does. A server that answers, even to refuse the connection (an HTTP 401,
// a JSON-RPC error), is no outage: the call fails at once.
//
// Only the calls of a tool step wait (Executor.Execute marks their
// context, withOutageWait): a description asked outside any step
// (SafeToRerun at a restart) fails at once as before.

// Backoff between the attempts to reach a server.
const (
	outageBackoff    = time.Second
	outageBackoffMax = 30 * time.Second
)

// unreachableError is a failure to connect to a server that was not there
// to answer (connectLocked): an outage.
type unreachableError struct{ err error }

func (e *unreachableError) Error() string { return e.err.Error() }
func (e *unreachableError) Unwrap() error { return e.err }

// unreachable reports whether err is a failure to reach the server.
func unreachable(err error) bool {
	var u *unreachableError
	return errors.As(err, &u)
}

type outageKey struct{}

// withOutageWait lets the calls made with ctx wait for a server they cannot
// reach, telling o (nil: nobody).
func withOutageWait(ctx context.Context, o llm.OutageObserver) context.Context {
	return context.WithValue(ctx, outageKey{}, outageWatch{o})
}

// outageWatch is what withOutageWait puts into a context.
type outageWatch struct{ obs llm.OutageObserver }

// outageWait is one call's wait for its server (Pool.do).
type outageWait struct {
	c      *conn
	obs    llm.OutageObserver // nil: nobody is told
	window time.Duration      // <= 0: the call does not wait
	first  time.Time          // when the server was first found unreachable
	tries  int                // attempts that found it so
	// waiting: the observer was told the call waits.
	waiting bool
}

// outageWait returns the wait of a call of c made with ctx.
func (p *Pool) outageWait(ctx context.Context, c *conn) *outageWait {
	w := &outageWait{c: c}
	if watch, ok := ctx.Value(outageKey{}).(outageWatch); ok {
		w.obs, w.window = watch.obs, c.sc.outageWindow()
	}
	return w
}

// next is told that connecting to the server failed with err. When the
// call is to wait for the server, it sleeps (with backoff, within the
// window) and returns nil: the caller tries again. Otherwise it returns
// the error the call fails with: err itself when the server answered or
// the call does not wait, a give-up naming the window once it passed, or
// the context's error when the step's context ended meanwhile.
func (w *outageWait) next(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		w.end(llm.OutageLeft)
		return err
	case !unreachable(err):
		w.end(llm.OutageRecovered) // it answered: it is reachable
		return err
	case w.window <= 0:
		return err
	}
	now := w.c.pool.now()
	if w.first.IsZero() {
		w.first = now
	}
	waited := now.Sub(w.first)
	if waited >= w.window {
		w.end(llm.OutageGaveUp)
		return fmt.Errorf("mcp server %q could not be reached for %s, its outage window; the call gave up waiting for it (\"outageWindow\" in the server's entry of the MCP servers config sets how long calls wait; default %s): %w",
			w.c.name, waited.Round(time.Second), DefaultOutageWindow, err)
	}
	w.tries++
	if !w.waiting {
		w.waiting = true
		w.c.log.Warn("mcp server unreachable: the call waits for it", "window", w.window, "err", err)
		if w.obs != nil {
			w.obs.OutageBegan(w.first, err.Error())
		}
	}
	wait := min(llm.Backoff(w.tries, outageBackoff, outageBackoffMax), w.window-waited)
	w.c.log.LogAttrs(ctx, slog.LevelInfo, "mcp server unreachable: trying again", slog.Int("attempt", w.tries),
		slog.Duration("wait", wait), slog.Duration("waited", waited), slog.String("err", err.Error()))
	if serr := w.c.pool.sleep(ctx, wait); serr != nil {
		w.end(llm.OutageLeft)
		return fmt.Errorf("stopped waiting for mcp server %q: %w (it could not be reached: %v)", w.c.name, serr, err)
	}
	return nil
}

// reached is told that the server was reached (a session is there).
func (w *outageWait) reached() { w.end(llm.OutageRecovered) }

// end tells the observer, if it was told the call waits, how the wait
// ended.
func (w *outageWait) end(how llm.OutageEnd) {
	if !w.waiting {
		return
	}
	w.waiting = false
	if how == llm.OutageRecovered {
		w.c.log.Info("mcp server reachable again", "waited", w.c.pool.now().Sub(w.first).Round(time.Millisecond))
	}
	if w.obs != nil {
		w.obs.OutageEnded(how)
	}
}
