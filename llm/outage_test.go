package llm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRefusalsAreNotRetried(t *testing.T) {
	tests := []struct {
		name      string
		rp        reply
		kind      error
		wantWords string
		wantCause string
	}{
		{"401", reply{status: 401, body: errorBody("Incorrect API key provided")}, ErrUnauthorized,
			"the LLM endpoint refused the API key (HTTP 401)", "HTTP 401"},
		{"403", reply{status: 403, body: errorBody("no access")}, ErrForbidden,
			"denied access with this API key (HTTP 403)", "HTTP 403"},
		{"404", reply{status: 404, body: errorBody("The model `gpt-9` does not exist")}, ErrModelNotFound,
			"does not know the model or path (HTTP 404)", "HTTP 404"},
		{"400 context", reply{status: 400, body: errorBody("This model's maximum context length is 8192 tokens")}, ErrContextLength,
			"longer than the model's context (HTTP 400)", "HTTP 400"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newFakeAPI(t, tt.rp)
			o, sleeps := newTestClient(t, api, OpenAIConfig{MaxRetries: 3, OutageWindow: time.Hour})
			_, err := o.Complete(t.Context(), userRequest("hi"))
			if !errors.Is(err, ErrRefused) || !errors.Is(err, tt.kind) {
				t.Fatalf("error %v: want ErrRefused and %v", err, tt.kind)
			}
			if !strings.Contains(err.Error(), tt.wantWords) {
				t.Errorf("error %q does not say %q", err, tt.wantWords)
			}
			if cause, ok := Refusal(err); !ok || cause != tt.wantCause {
				t.Errorf("Refusal = %q, %v; want %q, true", cause, ok, tt.wantCause)
			}
			if n := len(api.received()); n != 1 || len(sleeps.got()) != 0 {
				t.Errorf("sent %d requests and waited %v: a refusal is not retried", n, sleeps.got())
			}
		})
	}
	t.Run("other 400 is no refusal", func(t *testing.T) {
		api := newFakeAPI(t, reply{status: 400, body: errorBody("temperature must be below 2")})
		o, _ := newTestClient(t, api, OpenAIConfig{})
		_, err := o.Complete(t.Context(), userRequest("hi"))
		if err == nil || errors.Is(err, ErrRefused) {
			t.Fatalf("error %v: want a failure that is not ErrRefused", err)
		}
		if _, ok := Refusal(err); ok {
			t.Error("Refusal reports a plain 400")
		}
	})
}

func TestNegativeMaxRetriesMeansNoRetry(t *testing.T) {
	api := newFakeAPI(t, reply{status: 503})
	o, sleeps := newTestClient(t, api, OpenAIConfig{MaxRetries: -1, OutageWindow: time.Hour})
	_, err := o.Complete(t.Context(), userRequest("hi"))
	if !errors.Is(err, ErrServer) {
		t.Fatalf("error %v: want ErrServer", err)
	}
	if n := len(api.received()); n != 1 || len(sleeps.got()) != 0 {
		t.Errorf("sent %d requests, waited %v: want one request and no wait", n, sleeps.got())
	}
}

// outageLog records what an OutageObserver was told.
type outageLog struct {
	mu     sync.Mutex
	events []string
}

func (l *outageLog) OutageBegan(since time.Time, reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, "began: "+reason)
}

func (l *outageLog) OutageEnded(end OutageEnd) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, end.String())
}

func (l *outageLog) got() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.events...)
}

// fakeClock is a clock that only the client's sleeps move.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) read() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
	return ctx.Err()
}

func TestOutageIsWaitedOut(t *testing.T) {
	const window = 5 * time.Minute
	// 503 for the first 6 attempts: 2 quick retries, then 3 more in the
	// outage, then an answer.
	down := reply{status: 503, body: errorBody("overloaded")}
	replies := []reply{down, down, down, down, down, down, {}}
	api := newFakeAPI(t, replies...)
	o, _ := newTestClient(t, api, OpenAIConfig{MaxRetries: 2, OutageWindow: window, MaxRetryWait: 30 * time.Second})
	clock := &fakeClock{now: time.Unix(1e9, 0)}
	o.now, o.sleep = clock.read, clock.sleep
	log := &outageLog{}
	resp, err := o.Complete(WithOutageObserver(t.Context(), log), userRequest("hi"))
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if resp.Content != "hello" {
		t.Errorf("Content = %q", resp.Content)
	}
	want := []string{"began: status 503: overloaded", "recovered"}
	if diff := cmp.Diff(want, log.got()); diff != "" {
		t.Errorf("observer mismatch (-want +got):\n%s", diff)
	}
	if n := len(api.received()); n != 7 {
		t.Errorf("sent %d requests, want 7", n)
	}
}

func TestOutageLongerThanTheWindowFails(t *testing.T) {
	const window = 2 * time.Minute
	api := newFakeAPI(t, reply{status: 502, body: errorBody("upstream down")})
	o, _ := newTestClient(t, api, OpenAIConfig{MaxRetries: 1, OutageWindow: window, MaxRetryWait: 20 * time.Second})
	clock := &fakeClock{now: time.Unix(1e9, 0)}
	o.now, o.sleep = clock.read, clock.sleep
	log := &outageLog{}
	start := clock.read()
	_, err := o.Complete(WithOutageObserver(t.Context(), log), userRequest("hi"))
	if !errors.Is(err, ErrServer) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("error %v: want ErrServer and ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), "stayed unavailable for 2m0s") {
		t.Errorf("error %q does not say how long the endpoint was unavailable", err)
	}
	if waited := clock.read().Sub(start); waited != window {
		t.Errorf("waited %s in all, want exactly the window %s", waited, window)
	}
	if diff := cmp.Diff([]string{"began: status 502: upstream down", "gave up"}, log.got()); diff != "" {
		t.Errorf("observer mismatch (-want +got):\n%s", diff)
	}
}

func TestOutageWaitEndsWithTheCaller(t *testing.T) {
	api := newFakeAPI(t, reply{status: 503, body: errorBody("overloaded")})
	o, _ := newTestClient(t, api, OpenAIConfig{MaxRetries: 1, OutageWindow: time.Hour})
	ctx, cancel := context.WithCancel(t.Context())
	clock := &fakeClock{now: time.Unix(1e9, 0)}
	log := &outageLog{}
	o.now = clock.read
	o.sleep = func(c context.Context, d time.Duration) error {
		if len(log.got()) > 0 {
			cancel() // the caller gives up while the outage is waited out
		}
		return clock.sleep(c, d)
	}
	_, err := o.Complete(WithOutageObserver(ctx, log), userRequest("hi"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v: want context.Canceled", err)
	}
	if errors.Is(err, ErrUnavailable) {
		t.Errorf("error %v: a call its caller ended did not give up on the endpoint", err)
	}
	// Left, not gave up: the caller's end says nothing of the endpoint,
	// and the engine tells nobody it gave up on it (an interrupt during an
	// outage told the operator its tasks were paused).
	if diff := cmp.Diff([]string{"began: status 503: overloaded", "left"}, log.got()); diff != "" {
		t.Errorf("observer mismatch (-want +got):\n%s", diff)
	}
}

// gateLog is an OutageObserver with the CallGate ability.
type gateLog struct {
	outageLog
	err   error
	asked int
}

func (g *gateLog) BeforeCall(context.Context) error {
	g.asked++
	return g.err
}

// TestCallGate: a gate that refuses stops the call before anything is
// sent; one that lets it go is asked once per call, not per retry.
func TestCallGate(t *testing.T) {
	api := newFakeAPI(t)
	o, _ := newTestClient(t, api, OpenAIConfig{MaxRetries: 2})
	held := errors.New("the task is held for its budget")
	g := &gateLog{err: held}
	resp, err := o.Complete(WithOutageObserver(t.Context(), g), userRequest("hi"))
	if !errors.Is(err, held) || resp == nil || resp.Usage.Calls != 0 {
		t.Fatalf("Complete = %+v, %v; want the gate's error and no call counted", resp, err)
	}
	if n := len(api.received()); n != 0 || g.asked != 1 {
		t.Errorf("sent %d requests, gate asked %d times; want 0 and 1", n, g.asked)
	}

	api = newFakeAPI(t, reply{status: 503, body: errorBody("busy")}, reply{status: 200, body: completionBody("m", "ok", nil)})
	o, _ = newTestClient(t, api, OpenAIConfig{MaxRetries: 2})
	g = &gateLog{}
	if _, err := o.Complete(WithOutageObserver(t.Context(), g), userRequest("hi")); err != nil {
		t.Fatal(err)
	}
	if n := len(api.received()); n != 2 || g.asked != 1 {
		t.Errorf("sent %d requests, gate asked %d times; want 2 (one retry) and 1", n, g.asked)
	}
}

// TestOutageEndedByARefusal: an endpoint that comes back refusing the call
// (a key revoked meanwhile) is reachable: the wait ends recovered, and the
// refusal fails the call as one.
func TestOutageEndedByARefusal(t *testing.T) {
	down := reply{status: 503, body: errorBody("overloaded")}
	api := newFakeAPI(t, down, down, reply{status: 401, body: errorBody("invalid api key")})
	o, _ := newTestClient(t, api, OpenAIConfig{MaxRetries: 1, OutageWindow: time.Hour})
	clock := &fakeClock{now: time.Unix(1e9, 0)}
	o.now, o.sleep = clock.read, clock.sleep
	log := &outageLog{}
	_, err := o.Complete(WithOutageObserver(t.Context(), log), userRequest("hi"))
	if !errors.Is(err, ErrRefused) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("error %v: want a refusal, not ErrUnavailable", err)
	}
	if diff := cmp.Diff([]string{"began: status 503: overloaded", "recovered"}, log.got()); diff != "" {
		t.Errorf("observer mismatch (-want +got):\n%s", diff)
	}
}

// TestUnanswered tells the failures of calls the endpoint did not answer
// from answers: what an outage's pause waits for.
func TestUnanswered(t *testing.T) {
	call := func(ctx context.Context, replies ...reply) error {
		api := newFakeAPI(t, replies...)
		o, _ := newTestClient(t, api, OpenAIConfig{MaxRetries: -1, OutageWindow: -1})
		_, err := o.Complete(ctx, userRequest("hi"))
		return err
	}
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"5xx", call(t.Context(), reply{status: 503, body: errorBody("overloaded")}), true},
		{"429", call(t.Context(), reply{status: 429, body: errorBody("slow down")}), true},
		{"caller's end", call(cancelled, reply{}), true},
		{"refusal", call(t.Context(), reply{status: 401, body: errorBody("invalid api key")}), false},
		{"a step's own failure, wrapping none", fmt.Errorf("think: no <think> block: %w", errors.New("parse")), false},
		{"a call's failure, wrapped", fmt.Errorf("planning: %w", call(t.Context(), reply{status: 500})), true},
	} {
		if c.err == nil {
			t.Fatalf("%s: no error", c.name)
		}
		if got := Unanswered(c.err); got != c.want {
			t.Errorf("%s: Unanswered(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
