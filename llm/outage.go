package llm

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// DefaultOutageWindow is how long a call waits out an unavailable endpoint
// (connection errors, timeouts, 429, 5xx) before it fails.
const DefaultOutageWindow = 10 * time.Minute

// OutageObserver learns that one call is waiting out an outage of the
// endpoint: its quick retries are spent and it keeps trying, with capped
// backoff, until the endpoint answers or the outage window has passed.
// Began is called once, when the call starts waiting; Ended once after
// that, saying how the wait ended. Both are called on the caller's
// goroutine and must return promptly.
type OutageObserver interface {
	OutageBegan(since time.Time, reason string)
	OutageEnded(end OutageEnd)
}

// OutageEnd is how a call's wait for the endpoint ended.
type OutageEnd int

const (
	// OutageRecovered: the endpoint answered again (an answer, or a
	// refusal: it is reachable).
	OutageRecovered OutageEnd = iota
	// OutageGaveUp: the outage window passed; the call fails with
	// ErrUnavailable.
	OutageGaveUp
	// OutageLeft: the call stopped waiting on its own account (its
	// context ended: an interrupt, a stop, a shutdown) or for a failure
	// that says nothing of the endpoint; the outage may well go on.
	OutageLeft
)

// String names the end for logs and tests.
func (e OutageEnd) String() string {
	switch e {
	case OutageRecovered:
		return "recovered"
	case OutageGaveUp:
		return "gave up"
	case OutageLeft:
		return "left"
	}
	return fmt.Sprintf("OutageEnd(%d)", int(e))
}

// CallGate is an ability an OutageObserver may have: BeforeCall is asked
// before each Complete sends anything (not before its retries), and an
// error stops the call there, with no request sent and no call counted.
// The engine holds the calls of a task paused for its budget this way.
type CallGate interface {
	BeforeCall(ctx context.Context) error
}

type observerKey struct{}

// WithOutageObserver returns a context whose calls report outages they
// wait out to o (the engine shows the agent as waiting meanwhile).
func WithOutageObserver(ctx context.Context, o OutageObserver) context.Context {
	return context.WithValue(ctx, observerKey{}, o)
}

// outageWait tracks one call's outage: when its first retryable failure
// happened and whether the observer was told it is waiting.
type outageWait struct {
	obs     OutageObserver
	first   time.Time
	waiting bool
}

func newOutageWait(ctx context.Context) *outageWait {
	o, _ := ctx.Value(observerKey{}).(OutageObserver)
	return &outageWait{obs: o}
}

// failed records a retryable failure at now.
func (w *outageWait) failed(now time.Time) {
	if w.first.IsZero() {
		w.first = now
	}
}

// begin tells the observer, once, that the call waits out an outage.
func (w *outageWait) begin(reason string) {
	if w.waiting {
		return
	}
	w.waiting = true
	if w.obs != nil {
		w.obs.OutageBegan(w.first, reason)
	}
}

// end tells the observer the wait is over, if it was told of one.
func (w *outageWait) end(how OutageEnd) {
	if !w.waiting {
		return
	}
	w.waiting = false
	if w.obs != nil {
		w.obs.OutageEnded(how)
	}
}

// Check asks the endpoint once for its models (GET /models) with the
// configured key, to find a wrong key or base URL before any agent meets
// it. It returns nil when the endpoint answered; a refusal matches
// ErrRefused (with the plain-words cause, see Refusal); an endpoint
// without /models (HTTP 404) is not an error. It never retries.
func (o *OpenAI) Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, min(o.timeout, 30*time.Second))
	defer cancel()
	ex := &exchange{}
	_, err := o.client.ListModels(context.WithValue(ctx, exchangeKey{}, ex))
	if err == nil {
		return nil
	}
	f := o.classify(context.Background(), ctx, ex, err)
	if errors.Is(f.kind, ErrModelNotFound) {
		return nil // many compatible servers serve chat but not /models
	}
	return o.fail(f, o.model, 1)
}
